"""Measures the "not found" rule of the bundled demo model (issue 38): the best span's score of questions the
documents answer and of questions they do not, on data the model's training never saw.

Usage: python -m evals no-answer [--n 40] [--seed 38] [--profile baseline-fp32] [--profile cpu]
                                 [--questions lowercase] [--kinds answerable,...] [--no-handwritten]
                                 [--out docs/results/no-answer-eval.json]
Items from `evals.no_answer_eval` (the independent generator's documents of 600 to 40,000 characters and
the hand-written template and prose notes), read whole with windows of 4,096 tokens, top answer only. Per item it
keeps the top answer's text, score and place, whether it is the gold answer, the question's words its sentence (and
the one before) lacks (`longqa_core.no_answer.Evidence`), and the readout's `found` under the registry's rule, with
what decided it (the asked attribute absent, the question outside the demo model's form, the verdict's confidence
word; `no_answer_eval.before_and_after` compares it with issue 38's rule). Per
profile: the scores of each kind, and for a grid of thresholds, with the score alone and with the evidence check,
the share of answerable questions still found with the right answer (recall) and the share of unanswerable ones said
not found; the threshold the registry records is chosen from these numbers by `choose_threshold` (with the evidence
check) and printed with them. `--questions lowercase` asks every question in lower case, as people type them. `--reading guided`
(or `auto`) reads as guided reading does, and `--passage-window-tokens N` in windows sized to the ranked passage
(each record keeps how it was read: `read`, `sized_windows`). `--layout hard-wrapped` writes each
document as a text file hard-wrapped at 72 columns (paragraphs kept) and reads it as an upload is read
(`documents.from_text`: its wrapped lines joined); `--layout hard-wrapped-unjoined` reads those same lines as they
stand, as the reader did before issue 57 (each line break kept).
"""

from __future__ import annotations

import argparse
import json
import platform
import textwrap
import time
from dataclasses import replace
from pathlib import Path

from evals import no_answer_eval
from evals.layout_answers import commit, cpu_kind
from longqa.loader import load_model
from longqa.models import NO_ANSWER_RULES
from longqa_core.answering import answer
from longqa_core.documents import Document, from_text
from longqa_core.no_answer import Evidence
from longqa_core.reading import READING_MODES

ROOT = Path(__file__).resolve().parents[1]

HANDWRITTEN = ROOT / "tests" / "data" / "handwritten_qa.json"
HANDWRITTEN_PROSE = ROOT / "tests" / "data" / "handwritten_prose_qa.json"
GRID = [10.0 ** (e / 4) for e in range(-40, 1)]  # 1e-10 .. 1, four steps a decade


LAYOUTS = ("as-written", "hard-wrapped", "hard-wrapped-unjoined")


def hard_wrapped(text: str, width: int = 72) -> str:
    """Each paragraph (a line of `text`) wrapped at `width` columns, as plain-text files are."""
    return "\n".join(textwrap.fill(line, width) if line.strip() else line for line in text.split("\n"))


def document_of(item, layout: str) -> Document:
    """The item's document as the reader gives it in `layout`."""
    if layout == "as-written":
        return Document(item.name, item.text)
    if layout == "hard-wrapped":
        return from_text(hard_wrapped(item.text), item.name)
    return Document(item.name, hard_wrapped(item.text))


def run_item(loaded, item, settings, layout: str = "as-written", reading: str = "full") -> dict:
    document = document_of(item, layout)
    result = answer(loaded.runner, loaded.tokenizer, [document], item.question, settings,
                    batch_state=loaded.batch_state, reading_mode=reading)
    best = result.answers[0] if result.answers else None
    missing = None if best is None else \
        Evidence(item.question, [document.text]).missing(0, best.start_char, best.end_char)
    return {"kind": item.kind, "source": item.source, "name": item.name, "question": item.question,
            "gold": item.answer, "top": None if best is None else best.text,
            "score": None if best is None else best.score,
            "start_char": None if best is None else best.start_char, "missing_words": missing,
            "right": best is not None and item.answer is not None and best.text == item.answer,
            "found": result.found, "windows": result.windows, "read": result.reading.mode,
            "sized_windows": result.reading.narrowed,
            "absent_words": result.verdict.absent, "outside_form": result.verdict.outside_form,
            "verdict_confidence": result.verdict.confidence}


def is_found(record: dict, threshold: float, evidence: bool) -> bool:
    """Whether a record's best answer is found at `threshold`, with the evidence check or by its score alone."""
    return (record["score"] or 0.0) >= threshold and not (evidence and record["missing_words"])


def rates(records: list[dict], threshold: float, evidence: bool = True) -> dict:
    """At `threshold` (and the evidence check, unless `evidence` is False): answerable questions answered right and
    still found; unanswerable ones said not found."""
    answerable = [r for r in records if r["gold"] is not None]
    right = [r for r in answerable if r["right"]]
    unanswerable = [r for r in records if r["gold"] is None]
    found = [r for r in records if is_found(r, threshold, evidence)]
    return {"threshold": threshold, "evidence": evidence,
            "right_still_found": sum(is_found(r, threshold, evidence) for r in right) / max(1, len(right)),
            "answerable_found": sum(is_found(r, threshold, evidence) for r in answerable) / max(1, len(answerable)),
            "unanswerable_not_found": sum(not is_found(r, threshold, evidence) for r in unanswerable)
            / max(1, len(unanswerable)),
            "precision_found": sum(r["gold"] is not None for r in found) / max(1, len(found)),
            "recall_found": sum(r["gold"] is not None for r in found) / max(1, len(answerable))}


KEEP_RIGHT = 0.95  # issue 38: at least this share of the right answers must still be found


def choose_threshold(records: list[dict], evidence: bool = True) -> float:
    """The geometric middle of the grid's thresholds that keep at least KEEP_RIGHT of the right answers found and
    say not found for the most unanswerable questions (within 1.5 points of the best), so that the rule sits in the
    middle of that range, not on its edge; the grid's lowest when none keeps that many."""
    kept = [rates(records, t, evidence) for t in GRID if rates(records, t, evidence)["right_still_found"] >= KEEP_RIGHT]
    if not kept:  # no threshold keeps that many (questions the model barely scores): the grid's lowest
        return GRID[0]
    best = max(r["unanswerable_not_found"] for r in kept)
    near = [r["threshold"] for r in kept if r["unanswerable_not_found"] >= best - 0.015]
    return (near[0] * near[-1]) ** 0.5


def not_found_by_kind(records: list[dict], threshold: float, evidence: bool) -> dict:
    """Per kind and source: how many questions are said not found, of how many."""
    table = {}
    for kind in no_answer_eval.KINDS:
        for source in ("generated", "handwritten"):
            chosen = [r for r in records if r["kind"] == kind and r["source"] == source]
            if chosen:
                table[f"{kind} ({source})"] = {"n": len(chosen), "right": sum(r["right"] for r in chosen),
                                               "not_found": sum(not is_found(r, threshold, evidence) for r in chosen),
                                               "right_and_found": sum(r["right"] and is_found(r, threshold, evidence)
                                                                      for r in chosen)}
    return table


def score_profile(records: list[dict]) -> dict:
    """Everything the report says about one profile's records: the threshold chosen with the evidence check, the
    numbers there with and without it, and the threshold the score alone would choose."""
    threshold = choose_threshold(records)
    alone = choose_threshold(records, evidence=False)
    return {"by_kind": summary(records), "chosen_threshold": threshold, "at_chosen": rates(records, threshold),
            "not_found_by_kind": not_found_by_kind(records, threshold, True),
            "score_alone": {"at_chosen": rates(records, threshold, False),
                            "not_found_by_kind": not_found_by_kind(records, threshold, False),
                            "its_own_threshold": alone, "at_its_own": rates(records, alone, False)},
            "before_and_after": no_answer_eval.before_and_after(records, NO_ANSWER_RULES["demo"].threshold),
            "engine_found": {"found": sum(r["found"] is True for r in records),
                             "agrees_at_chosen": sum(r["found"] is is_found(r, threshold, True) for r in records),
                             "records": len(records)},
            "grid": [rates(records, t, e) for e in (True, False) for t in GRID]}


def summary(records: list[dict]) -> dict:
    by_kind: dict[str, dict] = {}
    for kind in no_answer_eval.KINDS:
        for source in ("generated", "handwritten"):
            chosen = [r for r in records if r["kind"] == kind and r["source"] == source]
            if not chosen:
                continue
            scores = sorted(r["score"] or 0.0 for r in chosen)
            by_kind[f"{kind} ({source})"] = {
                "n": len(chosen), "right": sum(r["right"] for r in chosen),
                "min_score": scores[0], "median_score": scores[len(scores) // 2], "max_score": scores[-1]}
    return by_kind


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals no-answer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="demo")
    parser.add_argument("--profile", action="append", help="repeatable; default baseline-fp32 and cpu")
    parser.add_argument("--n", type=int, default=40, help="generated items of each kind")
    parser.add_argument("--seed", type=int, default=38)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "no-answer-eval.json")
    parser.add_argument("--rescore", action="store_true", help="recompute the numbers from the records in --out")
    parser.add_argument("--questions", choices=["as-written", "lowercase"], default="as-written",
                        help="ask every question as written or in lower case")
    parser.add_argument("--layout", choices=LAYOUTS, default="as-written",
                        help="each document as written, or hard-wrapped at 72 columns and read joined or unjoined")
    parser.add_argument("--reading", choices=READING_MODES, default="full",
                        help="how each document is read, as `longqa ask --reading` (default: whole)")
    parser.add_argument("--passage-window-tokens", type=int, default=None,
                        help="guided reads in windows of N tokens sized to the ranked passage (issue 60; "
                             "without it, whole windows, the reference the sized reads are measured against)")
    parser.add_argument("--document-chars", default=",".join(map(str, no_answer_eval.DOCUMENT_CHARS)),
                        help="LOW,HIGH: the generated documents' length in characters, drawn log-uniformly "
                             "(default %(default)s; guided reading reads whole any document of two windows or less)")
    parser.add_argument("--kinds", default=",".join(no_answer_eval.KINDS),
                        help="comma-separated subset of " + ", ".join(no_answer_eval.KINDS))
    parser.add_argument("--handwritten", action=argparse.BooleanOptionalAction, default=True,
                        help="also ask the hand-written template and prose notes (--no-handwritten: generated only)")
    args = parser.parse_args(argv)
    kinds = args.kinds.split(",")
    try:
        chars = tuple(int(c) for c in args.document_chars.split(","))
    except ValueError:
        chars = ()
    if len(chars) != 2 or not 0 < chars[0] <= chars[1]:
        parser.error("--document-chars takes two counts, LOW,HIGH, with 0 < LOW <= HIGH")
    if args.handwritten:
        items = no_answer_eval.make_items(args.n, args.seed, json.loads(HANDWRITTEN.read_text()),
                                          json.loads(HANDWRITTEN_PROSE.read_text()), chars)
    else:
        items = no_answer_eval.make_items(args.n, args.seed, chars=chars)
    items = [item for item in items if item.kind in kinds]
    if args.questions == "lowercase":
        items = [replace(item, question=item.question.lower()) for item in items]
    report = {"model": args.model, "n_per_kind": args.n, "seed": args.seed, "items": len(items),
              "questions": args.questions, "layout": args.layout, "reading": args.reading,
              "document_chars": list(chars),
              "passage_window_tokens": args.passage_window_tokens,
              "command": " ".join(["python -m evals no-answer", *(argv or [])]),
              "cpu": platform.processor() or platform.machine(), "cpu_kind": cpu_kind(), "commit": commit(),
              "profiles": {}}
    if args.rescore:  # recompute the numbers from the records kept in --out, without the model
        report = json.loads(args.out.read_text())
        for entry in report["profiles"].values():
            entry.update(score_profile(entry["records"]))
    for profile in [] if args.rescore else args.profile or ["baseline-fp32", "cpu"]:
        loaded = load_model(args.model, profile)
        settings = replace(loaded.settings, max_seq_len=4096, doc_stride=128, top_k=3,
                           passage_window_tokens=args.passage_window_tokens or None)
        began = time.perf_counter()
        records = [run_item(loaded, item, settings, args.layout, args.reading) for item in items]
        report["profiles"][profile] = {"resolved_profile": loaded.profile.name,
                                       "seconds": round(time.perf_counter() - began, 1),
                                       **score_profile(records), "records": records}
        loaded.unload()
    for profile, entry in report["profiles"].items():
        print(json.dumps({"profile": profile, "chosen_threshold": entry["chosen_threshold"],
                          "at_chosen": entry["at_chosen"], "not_found_by_kind": entry["not_found_by_kind"],
                          "before_and_after": entry.get("before_and_after")},
                         indent=1), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    return 0
