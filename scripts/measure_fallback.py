"""What `auto` costs when its answer stays weak, against the full read, side by side in one process (issue 42): the
ranked windows are read, then only the windows not read yet, so it should cost the full read plus the ranking.

The document is the three bundled samples (`longqa/samples`) joined into one text, about 22,000 tokens, 6 windows
of the `cpu` profile. A weak answer comes from random weights (`arch:base`, every answer weak) or from a question the
document does not answer (`--model demo`, asked about an entity it never names). Rounds interleave the two modes,
alternating which goes first; each request is planned and answered from scratch (no cached index or tokens), its
wall seconds and its process CPU seconds (all threads: steadier than wall time on a busy machine) recorded, with the
window passes the model ran (counted by wrapping its forward).

    python scripts/measure_fallback.py [--model arch:base] [--profile cpu] [--rounds 4] [--out docs/reading-fallback]

Writes fallback-<model>-<profile>.json and .md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from longqa.bench.runner import measured_here, write_measurement  # noqa: E402
from longqa.loader import load_model  # noqa: E402
from longqa.session import read_documents  # noqa: E402
from longqa_core import answering  # noqa: E402
from longqa_core.documents import Document  # noqa: E402

SAMPLES = ("expedition_notes.md", "museum_catalogue.html", "harbour_records.txt")
QUESTIONS = {  # a question whose words the ranking finds; the demo model's is about an entity the text never names
    "arch:base": "What is the road of Kondthas Wamron Kailzhis?",
    "demo": "What is the road of Quillon Marsh?",
}


def joined_samples() -> Document:
    documents, _ = read_documents([str(ROOT / "longqa" / "samples" / name) for name in SAMPLES])
    return Document("samples.txt", "\n\n".join(d.text for d in documents))


def count_passes(model) -> list[int]:
    """Wrap the model's forward: the list it returns grows by each call's batch size."""
    passes: list[int] = []
    forward = model.forward

    def counting_forward(*args, **kwargs):
        passes.append(int(kwargs["input_ids"].shape[0]))
        return forward(*args, **kwargs)
    model.forward = counting_forward
    return passes


def one_request(loaded, passes: list[int], document: Document, question: str, mode: str) -> dict:
    passes.clear()
    wall, cpu = time.perf_counter(), time.process_time()
    result = answering.answer(loaded.runner, loaded.tokenizer, [document], question,
                              loaded.settings.resolved(loaded.tokenizer), batch_state=loaded.batch_state,
                              reading_mode=mode)
    return {"mode": mode, "wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
            "window_passes": sum(passes), "tokens": result.tokens, "windows_read": result.reading.windows_read,
            "windows_total": result.reading.windows_total, "read_as": result.reading.mode,
            "reason": result.reading.code, "latency_s": result.latency_s,
            "answers": [(a.text, a.score, a.start_char) for a in result.answers]}


def measure(model_ref: str, profile: str, rounds: int) -> dict:
    loaded = load_model(model_ref, profile)
    passes = count_passes(loaded.model)
    document = joined_samples()
    question = QUESTIONS["demo" if model_ref == "demo" else "arch:base"]
    one_request(loaded, passes, document, question, "full")  # warm-up: the rate, the kernels, the caches
    runs = []
    for index in range(rounds):
        for mode in (("full", "auto") if index % 2 == 0 else ("auto", "full")):
            runs.append(one_request(loaded, passes, document, question, mode))
    full = [r for r in runs if r["mode"] == "full"]
    auto = [r for r in runs if r["mode"] == "auto"]
    summary = {
        "full_wall_s_median": statistics.median(r["wall_s"] for r in full),
        "auto_wall_s_median": statistics.median(r["wall_s"] for r in auto),
        "full_cpu_s_median": statistics.median(r["cpu_s"] for r in full),
        "auto_cpu_s_median": statistics.median(r["cpu_s"] for r in auto),
        "full_window_passes": sorted({r["window_passes"] for r in full}),
        "auto_window_passes": sorted({r["window_passes"] for r in auto}),
        "auto_windows_read": sorted({r["windows_read"] for r in auto}),
        "auto_read_as": sorted({r["read_as"] for r in auto}),
        "same_answers": all(r["answers"] == full[0]["answers"] for r in runs),
        "auto_rank_s_median": statistics.median(r["latency_s"].get("rank", 0.0) for r in auto),
        "auto_tokenize_s_median": statistics.median(r["latency_s"].get("tokenize", 0.0) for r in auto),
        "full_tokenize_s_median": statistics.median(r["latency_s"].get("tokenize", 0.0) for r in full),
    }
    summary["wall_ratio"] = summary["auto_wall_s_median"] / summary["full_wall_s_median"]
    summary["cpu_ratio"] = summary["auto_cpu_s_median"] / summary["full_cpu_s_median"]
    summary["wall_ratio_per_round"] = [a["wall_s"] / f["wall_s"] for a, f in zip(auto, full)]
    return {"command": "python scripts/measure_fallback.py " + " ".join(sys.argv[1:]), "model": model_ref,
            "profile": profile, "question": question, "document_chars": len(document.text),
            "document_tokens": full[0]["tokens"], "rounds": rounds, "summary": summary, "runs": runs}


def markdown(result: dict) -> str:
    s, machine = result["summary"], result["machine"]
    load = "loaded" if machine["loaded"] else "quiet"
    return (f"# `auto` on a weak answer against the full read\n\n`{result['command']}`: {result['model']}, profile "
            f"`{result['profile']}`, the bundled samples joined ({result['document_chars']:,} characters, "
            f"{result['document_tokens']:,} tokens), "
            f"question {result['question']!r}; {result['rounds']} rounds interleaved. {machine['cpu_model']} "
            f"(kind {machine['kind']}), {load} machine (load average {machine['load_average_before'][0]:.1f} before,"
            f" {machine['load_average_after'][0]:.1f} after).\n\n"
            "| | full | auto (weak answer) | auto / full |\n|---|---|---|---|\n"
            f"| wall seconds, median | {s['full_wall_s_median']:.2f} | {s['auto_wall_s_median']:.2f} | "
            f"{s['wall_ratio']:.3f} |\n"
            f"| process CPU seconds, median | {s['full_cpu_s_median']:.2f} | {s['auto_cpu_s_median']:.2f} | "
            f"{s['cpu_ratio']:.3f} |\n"
            f"| window passes | {s['full_window_passes']} | {s['auto_window_passes']} | |\n"
            f"| windows read (readout) | | {s['auto_windows_read']} ({', '.join(s['auto_read_as'])}) | |\n"
            f"| tokenize s, median | {s['full_tokenize_s_median']:.3f} | {s['auto_tokenize_s_median']:.3f} | |\n"
            f"| rank s, median | | {s['auto_rank_s_median']:.3f} | |\n\n"
            f"Same answers and scores in every run: {s['same_answers']}. Wall ratio per round: "
            f"{', '.join(f'{r:.3f}' for r in s['wall_ratio_per_round'])}.\n")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/measure_fallback.py")
    parser.add_argument("--model", default="arch:base")
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", default="docs/reading-fallback")
    args = parser.parse_args(argv)
    result = measured_here(lambda: measure(args.model, args.profile, args.rounds))
    stem = f"fallback-{args.model.replace(':', '-')}-{args.profile}"
    write_measurement(args.out, stem, result, markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
