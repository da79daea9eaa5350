"""The cost-growth curve of reading (`python -m bench reading --modes full,guided`): one question over documents of
growing length, read in full and guided, each row measured in a fresh process
(`python -m bench.reading_sweep SPEC.json RESULT.json`): seconds per stage (reading the file, tokenizing,
ranking, forward, decoding), windows read and peak memory.

It measures; `bench.reading_report` makes the ratios, Markdown and the plot. A full read too long to run
(over `--max-full-tokens`) is predicted from the largest full read measured, and says so.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from tqdm import tqdm

from longqa.arguments import positive_int, positive_int_list
from bench.reading_report import write_reading_report
from longqa.bench.runner import PROJECT_ROOT, machine_info, prepare_model, worker_env
from evals import eval_task
from longqa.loader import load_model
from longqa.session import read_documents
from longqa_core import answering
from longqa_core.documents import Document
from longqa_core.errors import InputError
from longqa_core.reading import READING_MODES
from strategies.hardware import detect_hardware

DEFAULT_DOC_TOKENS = [10_000, 100_000, 500_000, 2_000_000]
DEFAULT_MAX_FULL_TOKENS = 100_000
CHARS_PER_TOKEN = 3.2  # the generator's prose with RoBERTa's tokenizer (measured: 387,160 characters, 121,539 tokens)
WORDS_PER_TOKEN = 0.53  # the same prose: about 1.85 tokens a word (the rows record the real characters and windows)
DOCUMENT_SEED = 2028


@dataclass(frozen=True)
class SweepSpec:
    model: str
    profile: str
    mode: str
    doc_tokens: int
    path: str  # the document file: its reading is the first stage
    question: str
    answer: str
    answer_start: int
    weak_answer_score: float | None  # None: the engine's own; 0 for random weights, whose scores say nothing


def write_document(doc_tokens: int, folder: Path) -> tuple[Path, eval_task.EvalDocument]:
    """A prose document of about `doc_tokens` tokens from the independent evaluation generator, with one fact and
    its distractors, written as a .txt file."""
    item = eval_task.make_document(DOCUMENT_SEED + doc_tokens, int(doc_tokens * WORDS_PER_TOKEN))
    path = folder / f"report-{doc_tokens}.txt"
    path.write_text(item.text, encoding="utf-8")
    return path, item


def measure(spec: SweepSpec) -> dict:
    """Load the model, read the file, answer once to warm up on a short text, then answer the document."""
    loaded = load_model(spec.model, spec.profile)
    warm = eval_task.make_document(1, 400)
    answering.answer(loaded.runner, loaded.tokenizer, [Document("warm.txt", warm.text)], warm.question,
                     loaded.settings, batch_state=loaded.batch_state)
    documents, extract_s = read_documents([spec.path])
    # whole windows, as the committed reading curves were measured (sized windows, the default since issue 60, are
    # `python -m bench first-answer`'s)
    settings = replace(loaded.settings, passage_window_tokens=0)
    result = answering.answer(loaded.runner, loaded.tokenizer, documents, spec.question, settings,
                              batch_state=loaded.batch_state, extract_s=extract_s, reading_mode=spec.mode,
                              weak_answer_score=spec.weak_answer_score)
    best = result.answers[0] if result.answers else None
    read = result.reading.read
    return {
        "mode": spec.mode, "resolved_mode": result.reading.mode, "doc_tokens": spec.doc_tokens,
        "chars": documents[0].n_chars, "tokens_read": result.tokens, "windows_read": result.reading.windows_read,
        "windows_total": result.reading.windows_total,
        "reason": result.reading.reason,
        "latency_s": result.latency_s, "host_peak_rss_bytes": result.memory.host_peak_rss_bytes,
        "answer": best.text if best else None, "answer_start": best.start_char if best else None,
        "fact_read": any(r.start_char <= spec.answer_start < r.end_char for r in read),
        "predicted": False,
    }


def plan_specs(args, model: str, folder: Path) -> list[SweepSpec]:
    specs = []
    for doc_tokens in args.doc_tokens:
        path, item = write_document(doc_tokens, folder)
        for mode in args.modes:
            if mode == "full" and doc_tokens > args.max_full_tokens:
                continue  # predicted afterwards from the largest full read measured
            weak = 0.0 if model.startswith("arch:") else None
            specs.append(SweepSpec(model, args.profile, mode, doc_tokens, str(path), item.question,
                                   item.answer, item.answer_start, weak))
    return specs


def run_row(spec: SweepSpec, work_dir: Path, log_path: Path) -> dict:
    spec_path = work_dir / f"{spec.mode}-{spec.doc_tokens}.spec.json"
    result_path = work_dir / f"{spec.mode}-{spec.doc_tokens}.result.json"
    spec_path.write_text(json.dumps(asdict(spec)))
    with open(log_path, "a") as log:
        done = subprocess.run([sys.executable, "-m", "bench.reading_sweep", str(spec_path), str(result_path)],
                              stdout=log, stderr=subprocess.STDOUT, env=worker_env(), cwd=PROJECT_ROOT)
    if done.returncode != 0 or not result_path.exists():
        return {"mode": spec.mode, "doc_tokens": spec.doc_tokens, "error": f"worker exited {done.returncode}"}
    return json.loads(result_path.read_text())


def predict_full_rows(rows: list[dict], doc_tokens: list[int]) -> list[dict]:
    """Full reads not run, predicted from the largest measured full read: its seconds per window for the forward
    pass and per character for reading, tokenizing and decoding, times the size; marked `predicted`."""
    measured = [r for r in rows if r.get("mode") == "full" and not r.get("error") and not r.get("predicted")]
    done = {r["doc_tokens"] for r in measured}
    if not measured:
        return []
    base = max(measured, key=lambda r: r["doc_tokens"])
    guided = {r["doc_tokens"]: r for r in rows if r.get("mode") == "guided" and not r.get("error")}
    predicted = []
    for tokens in doc_tokens:
        if tokens in done:
            continue
        chars = guided[tokens]["chars"] if tokens in guided else int(tokens * CHARS_PER_TOKEN)
        windows = guided[tokens]["windows_total"] if tokens in guided else round(
            base["windows_total"] * chars / base["chars"])
        per_char = {stage: base["latency_s"].get(stage, 0.0) / base["chars"]
                    for stage in ("extract", "tokenize", "decode")}
        latency = {stage: value * chars for stage, value in per_char.items()}
        latency["forward"] = base["latency_s"]["forward"] / base["windows_read"] * windows
        latency["total"] = sum(latency.values())
        predicted.append({"mode": "full", "resolved_mode": "full", "doc_tokens": tokens, "chars": chars,
                          "windows_read": windows, "windows_total": windows, "latency_s": latency,
                          "host_peak_rss_bytes": None, "predicted": True,
                          "predicted_from": f"the measured full read of {base['doc_tokens']:,} tokens"})
    return predicted


def run(args) -> int:
    """Measure every row of the sweep in its own process, predict the full reads not run, write the report."""
    modes = args.modes
    if any(m not in READING_MODES for m in modes):
        raise InputError(f"--modes takes {', '.join(READING_MODES)}, got {','.join(modes)}.")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    hardware = detect_hardware()
    prepare_model(args.model)
    command = ["python", "-m", "bench", "reading", "--model", args.model, "--profile", args.profile,
               "--modes", ",".join(modes), "--doc-tokens", ",".join(map(str, args.doc_tokens)),
               "--max-full-tokens", str(args.max_full_tokens), "--out", str(args.out)]
    results = {"model": args.model, "profile": args.profile, "command": shlex.join(command),
               "started": datetime.datetime.now().isoformat(timespec="seconds"), "machine": machine_info(hardware),
               "settings": {"doc_tokens": args.doc_tokens, "reading": modes,
                            "max_full_tokens": args.max_full_tokens},
               "stopping": ("random weights: their answer scores say nothing, so guided reading stops after the "
                            "ranked rounds (weak_answer_score 0); a trained model also reads on while its answer "
                            "is weak" if args.model.startswith("arch:") else "the engine's own"),
               "rows": []}
    log_path = out_dir / "reading-workers.log"
    log_path.write_text("")
    with tempfile.TemporaryDirectory(prefix="longqa-reading-") as work_dir:
        specs = plan_specs(args, args.model, Path(work_dir))
        for spec in tqdm(specs, desc="reading sweep", unit="row", file=sys.stderr):
            results["rows"].append(run_row(spec, Path(work_dir), log_path))
            (out_dir / "reading.json").write_text(json.dumps(results, indent=2))
    if "full" in modes:
        results["rows"] += predict_full_rows(results["rows"], args.doc_tokens)
    write_reading_report(out_dir, results)
    failed = [r for r in results["rows"] if r.get("error")]
    print(f"wrote {out_dir / 'reading.json'}, reading.md and reading.png ({len(results['rows'])} rows, "
          f"{len(failed)} failed; worker logs in {log_path})", file=sys.stderr)
    return 1 if failed else 0


def measure_row(argv: list[str]) -> int:
    """The worker: `python -m bench.reading_sweep SPEC.json RESULT.json` measures one row."""
    if len(argv) != 2:
        print("usage: python -m bench.reading_sweep SPEC.json RESULT.json", file=sys.stderr)
        return 2
    spec = SweepSpec(**json.loads(Path(argv[0]).read_text()))
    Path(argv[1]).write_text(json.dumps(measure(spec)))
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench reading", description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", type=lambda text: [m.strip() for m in text.split(",") if m.strip()],
                        default=["full", "guided"], help="comma-separated reading modes (default full,guided)")
    parser.add_argument("--model", default="arch:base",
                        help="checkpoint, local folder, 'demo', or 'arch:base'/'arch:large' (default arch:base)")
    parser.add_argument("--profile", default="cpu", help="the profile every row runs (default cpu)")
    parser.add_argument("--doc-tokens", type=positive_int_list, default=DEFAULT_DOC_TOKENS,
                        help="document lengths in tokens (default 10000,100000,500000,2000000)")
    parser.add_argument("--max-full-tokens", type=positive_int, default=DEFAULT_MAX_FULL_TOKENS,
                        help="full reads of longer documents are predicted from the largest measured, not run "
                             "(default 100000)")
    parser.add_argument("--out", default="bench-results", help="output folder (default bench-results/)")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(measure_row(sys.argv[1:]))
