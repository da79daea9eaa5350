"""Exact match of the bundled demo model on four evaluation sets, through the engine, under one or more profiles.

Usage: python -m evals demo-model [--model demo] [--profile baseline-fp32] [--profile cpu] [--n 200]
                                  [--questions as-written|lowercase|uppercase] [--sets independent,handwritten]
                                  [--out docs/results/demo-model-eval.json]
Windows of 4,096 tokens overlapping by 128, top answer only. The sets, and what each measures:
- training-generator: documents from `training.demo_task`, the generator the model was trained on (held-out seeds and
  held-out filler sentences, but the same names, attributes, values and kind of prose): how well the model learned
  that generator, not the task (the one module of evals/ that imports the training tasks, for this set alone).
- independent: documents from `evals.eval_task`, a second generator that shares no word list, name code or prose
  with training, 300 to 40,000 tokens: the task itself on facts, names, values and prose never seen in training.
- independent-notes: short notes (20 to 100 words) from the same independent generator.
- handwritten: the hand-written natural documents of tests/data/handwritten_qa.json.
`--questions lowercase` (or `uppercase`) asks every question so written, as people type them (results keyed
'PROFILE, lowercase questions'). An answer is exact when the top answer's text equals the fact's value, character
for character. Each profile's top
answer (text and place) is kept per document and compared with baseline-fp32's ("same_top_answer_as_fp32"). Results
are merged into --out by profile, so profiles can be run one at a time.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from evals import eval_task
from evals.layout_answers import commit, cpu_kind
from longqa.loader import load_model
from longqa_core.answering import answer
from longqa_core.documents import Document
from strategies.hardware import hardware_for
from training import demo_task

ROOT = Path(__file__).resolve().parents[1]

HELD_OUT_SEED_BASE = 1_000_000_000  # training draws random 48-bit seeds and only ever the other filler split
INDEPENDENT_SEED_BASE = 5_000_000
NOTE_SEED_BASE = 6_000_000
HANDWRITTEN = ROOT / "tests" / "data" / "handwritten_qa.json"
MEASURES = {
    "training-generator": "Documents from training/demo_task.py, the generator the model was trained on "
                          "(held-out seeds and filler sentences, but the same names, attributes, values and kind of "
                          "prose), 287 to "
                          "about 40,000 tokens: how well the model learned that generator, not the task.",
    "independent": "Documents from evals/eval_task.py, a generator that shares no word list, name "
                   "code or prose with training (its own names of many shapes, attributes, values and ten registers of prose), 300 to "
                   "40,000 tokens, fact anywhere including the first and last sentence: the task on data never seen.",
    "independent-notes": "Short notes of 20 to 100 words from the same independent generator.",
    "handwritten": "Hand-written natural documents (letters, notices, logs, manuals, reports) with distractors, "
                   "tests/data/handwritten_qa.json.",
}


@dataclass
class Item:
    name: str
    text: str
    question: str
    answer: str
    answer_start: int
    detail: dict


def training_generator_items(n: int, seed: int, tokenizer) -> list[Item]:
    """The evaluation this script always ran (same seeds and lengths), so its numbers stay comparable."""
    sample = demo_task.make_example(HELD_OUT_SEED_BASE - 1, 20000).text
    ratio = len(sample) / len(tokenizer(sample, add_special_tokens=False)["input_ids"])
    rng = random.Random(seed)
    items = []
    for i in range(n):
        target_tokens = int(math.exp(rng.uniform(math.log(200), math.log(40000))))
        example = demo_task.make_example(HELD_OUT_SEED_BASE + seed * 10_000 + i, int(target_tokens * ratio),
                                         split="test", n_distractors=(rng.randint(1, 4), rng.randint(1, 3),
                                                                      rng.randint(0, 4)))
        items.append(Item(f"demo_task seed {HELD_OUT_SEED_BASE + seed * 10_000 + i}", example.text, example.question,
                          example.answer, example.answer_start, {}))
    return items


def independent_items(n: int, seed: int, tokenizer) -> list[Item]:
    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    lo, hi = eval_task.DOCUMENT_TOKENS
    rng = random.Random(seed)
    items = []
    for i in range(n):
        doc_seed = INDEPENDENT_SEED_BASE + seed * 10_000 + i
        document = eval_task.document_of_tokens(doc_seed, int(math.exp(rng.uniform(math.log(lo), math.log(hi)))),
                                                count)
        items.append(Item(f"eval_task seed {doc_seed}", document.text, document.question, document.answer,
                          document.answer_start, {"placement": document.placement}))
    return items


def note_items(n: int, seed: int) -> list[Item]:
    items = []
    for i in range(n):
        note = eval_task.make_note(NOTE_SEED_BASE + seed * 10_000 + i)
        items.append(Item(f"eval_task note {NOTE_SEED_BASE + seed * 10_000 + i}", note.text, note.question,
                          note.answer, note.answer_start, {"placement": note.placement}))
    return items


def handwritten_items() -> list[Item]:
    return [Item(entry["id"], entry["text"], entry["question"], entry["answer"], entry["answer_start"], {})
            for entry in json.loads(HANDWRITTEN.read_text())]


QUESTION_CASES = {"as-written": lambda question: question, "lowercase": str.lower, "uppercase": str.upper}


def run_set(loaded, items: list[Item], settings) -> dict:
    """Numbers for one set under one loaded model: exact match, where the misses went, tokens and time."""
    began = time.perf_counter()
    hits = at_fact = 0
    tokens, windows, misses, tops = [], [], [], []
    groups: dict[str, list[int]] = {}  # "windows 1", "windows 2+", "placement first", ...: [exact, n]
    for item in items:
        result = answer(loaded.runner, loaded.tokenizer, [Document(item.name, item.text)], item.question, settings,
                        batch_state=loaded.batch_state)
        best = result.answers[0] if result.answers else None
        exact = best is not None and best.text == item.answer
        tops.append(None if best is None else [best.text, best.start_char])
        hits += exact
        at_fact += exact and best.start_char == item.answer_start
        tokens.append(result.tokens)
        windows.append(result.windows)
        in_groups = [f"windows {'1' if result.windows == 1 else '2+'}"]
        if "placement" in item.detail:
            in_groups.append(f"placement {item.detail['placement']}")
        for group in in_groups:
            groups.setdefault(group, [0, 0])
            groups[group][0] += exact
            groups[group][1] += 1
        if not exact:
            misses.append({"document": item.name, "question": item.question, "expected": item.answer,
                           "got": [a.text for a in result.answers], "tokens": result.tokens,
                           "windows": result.windows, **item.detail,
                           "around_the_fact": item.text[max(0, item.answer_start - 120): item.answer_start + 60]})
    n = len(items)
    return {"n": n, "exact": hits, "exact_match": round(hits / n, 4), "exact_at_the_fact": round(at_fact / n, 4),
            "min_tokens": min(tokens), "max_tokens": max(tokens), "mean_tokens": round(sum(tokens) / n),
            "max_windows": max(windows), "exact_by_group": {g: f"{e}/{n}" for g, (e, n) in sorted(groups.items())},
            "seconds": round(time.perf_counter() - began, 1), "misses": len(misses),
            "miss_examples": misses[:12], "top_answers": tops}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals demo-model", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="demo", help="'demo' or a local checkpoint folder")
    parser.add_argument("--profile", action="append", help="repeatable; default baseline-fp32 and cpu")
    parser.add_argument("--n", type=int, default=200, help="documents per generated set (notes: a quarter)")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--sets", default=",".join(MEASURES), help="comma-separated subset of " + ", ".join(MEASURES))
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "demo-model-eval.json")
    parser.add_argument("--cpu-kind", choices=["detected", "avx2", "avx512-bf16"], default="detected",
                        help="resolve the profiles as on a CPU without native bf16 (avx2: the cpu profile is int8 + "
                             "fast attention) or with it, whatever this CPU is; results are keyed 'PROFILE@KIND'")
    parser.add_argument("--questions", choices=list(QUESTION_CASES), default="as-written",
                        help="ask every question as written, or all in lower or upper case")
    args = parser.parse_args(argv)
    hardware = hardware_for(args.cpu_kind)

    wanted = args.sets.split(",")
    report = json.loads(args.out.read_text()) if args.out.exists() else {}
    if "sets" not in report:  # an older report: start over
        report = {}
    report.update({"model": args.model, "max_seq_len": 4096, "doc_stride": 128, "seed": args.seed,
                   "exact_match": "the top answer's text equals the fact's value, character for character"})
    made = {"command": " ".join(["python -m evals demo-model", *(argv if argv is not None else sys.argv[1:])]),
            "commit": commit(), "cpu_kind": cpu_kind()}  # per profile: the profiles of one file may differ in each
    report.setdefault("sets", {})
    for profile in args.profile or ["baseline-fp32", "cpu"]:
        loaded = load_model(args.model, profile, hardware=hardware)
        settings = replace(loaded.settings, max_seq_len=4096, doc_stride=128, top_k=3)
        builders = {"training-generator": lambda: training_generator_items(args.n, args.seed, loaded.tokenizer),
                    "independent": lambda: independent_items(args.n, args.seed, loaded.tokenizer),
                    "independent-notes": lambda: note_items(max(1, args.n // 4), args.seed),
                    "handwritten": handwritten_items}
        written = QUESTION_CASES[args.questions]
        for name in wanted:
            items = [replace(item, question=written(item.question)) for item in builders[name]()]
            numbers = run_set(loaded, items, settings)
            numbers.update(resolved_profile=loaded.profile.name, strategies=loaded.readout.strategies,
                           dtype=loaded.readout.dtype,
                           cpu=platform.processor() or platform.machine(), has_avx512_bf16=_has_avx512_bf16(),
                           **made)
            entry = report["sets"].setdefault(name, {})
            entry["measures"] = MEASURES[name]
            key = profile if args.cpu_kind == "detected" else f"{profile}@{args.cpu_kind}"
            key += "" if args.questions == "as-written" else f", {args.questions} questions"
            entry.setdefault("profiles", {})[key] = numbers
            reference = entry["profiles"].get("baseline-fp32", {}).get("top_answers")
            for other in entry["profiles"].values():  # each profile's top answers against fp32's, item by item
                if reference and other.get("top_answers") and len(other["top_answers"]) == len(reference):
                    same = sum(a == b for a, b in zip(other["top_answers"], reference))
                    other["same_top_answer_as_fp32"] = f"{same}/{len(reference)}"
            print(f"{key:28s} {name:19s} exact match {numbers['exact_match']:.3f} ({numbers['exact']}/"
                  f"{numbers['n']}), {numbers['min_tokens']}-{numbers['max_tokens']} tokens, {numbers['seconds']} s",
                  flush=True)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
        loaded.unload()
    return 0


def _has_avx512_bf16() -> bool | None:
    try:
        return "avx512_bf16" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return None

