"""Layout evaluation (issue 57): the demo task's documents laid out as people's files are (`evals.layouts`: lines
wrapped inside the fact, hyphenated, broken over a page past a running footer and header, two columns drawn out of
reading order, hard-wrapped, paged and Markdown text, and two controls), each read as an upload and asked as
`longqa ask` asks it: the readers, the model and the not-found rule together.

Usage: python -m evals layouts [--n 20] [--label before] [--layouts wrapped-pdf,paged-txt,...]
                               [--model demo] [--profile cpu] [--reading auto] [--out FILE]
Per layout: the fact read whole (the reader's text holds the fact sentence with its words apart by single spaces: the
reader's part, apart from the model's), right answer (the top answer's text, stripped of surrounding spaces and
punctuation, is the value),
said found (the verdict's found is True), right place (the top answer's page is the value's page in a PDF; its line
the value's line in a text file) and all three at once. Writes docs/results/layout-eval-<label>.json (per-item
records, per-layout rates, the CPU kind and the command) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import time
from pathlib import Path

from evals.layouts import LAYOUTS, SEED_BASE, LayoutItem, make_items
from longqa.session import Session, read_documents
from longqa_core.errors import LongQAError
from longqa_core.limits import validate_request
from longqa_core.reading import DEFAULT_READING, READING_MODES

ROOT = Path(__file__).resolve().parents[1]

SURROUNDING = " \t\n\r\f\v.,;:!?\"'()[]"  # what may stand around an answer in prose without changing it
MEASURES = ("read_whole", "right", "found", "right_place", "all_three")


def cpu_kind() -> str:
    """The CPU's bf16 kind as the project's measurements name it: avx512_bf16 or amx_bf16, else "avx2 only"."""
    try:
        flags = re.search(r"avx512_bf16|amx_bf16", Path("/proc/cpuinfo").read_text())
    except OSError:
        flags = None
    return flags.group() if flags else "avx2 only"


def is_right(answer: str | None, value: str) -> bool:
    return answer is not None and answer.strip(SURROUNDING) == value.strip(SURROUNDING)


def read_whole(item: LayoutItem, text: str) -> bool:
    """Whether the reader's text holds the fact sentence whole, its words apart by single spaces: its parts as drawn
    joined with a space, or at a hyphen ending a part, without it (a typesetter's) or with it (a compound's)."""
    fact = ""
    for part in (p.strip() for p in item.fact_lines):
        if fact.endswith("-") and part[:1].isalnum():
            fact = fact[:-1] + part if fact[:-1] + part in text else fact + part
        else:
            fact = f"{fact} {part}".strip()
    return fact in text


def ask_item(session: Session, item: LayoutItem, reading: str) -> dict:
    """One item read as an upload and asked as `longqa ask` asks it, and what came back."""
    record = {"layout": item.layout, "seed": item.seed, "file": item.name, "question": item.question,
              "value": item.answer, "fact_break": item.fact_break, "fact_lines": list(item.fact_lines),
              "expected_page": item.page, "expected_line": item.line}
    began = time.perf_counter()
    try:
        documents, extract_s = read_documents([(item.name, item.data)])
        record["read_whole"] = read_whole(item, documents[0].text)
        plan = session.plan(documents, validate_request(documents, item.question), reading)
        result = session.ask(plan, extract_s=extract_s).result
    except LongQAError as exc:
        return {**record, "error": str(exc), "answer": None, "found": None, "right": False, "right_place": False,
                "all_three": False, "seconds": round(time.perf_counter() - began, 2)}
    best = result.answers[0] if result.answers else None
    location = best.location if best is not None else None
    page = location.page if location else None
    line = location.line if location else None
    is_pdf = item.name.endswith(".pdf")
    right, found = is_right(best and best.text, item.answer), result.found is True
    right_place = (page == item.page) if is_pdf else (line == item.line)
    return {**record, "answer": best.text if best else None, "score": best.score if best else None,
            "found": result.found, "verdict": result.verdict.message if result.verdict else None,
            "answer_page": page, "answer_line": line, "right": right, "right_place": right_place,
            "all_three": right and found and right_place, "seconds": round(time.perf_counter() - began, 2)}


def rates(records: list[dict]) -> dict:
    """Per measure, the share of records that meet it, and the counts."""
    n = len(records)
    counts = {"read_whole": sum(bool(r.get("read_whole")) for r in records),
              "right": sum(r["right"] for r in records), "found": sum(r["found"] is True for r in records),
              "right_place": sum(r["right_place"] for r in records), "all_three": sum(r["all_three"] for r in records)}
    return {"n": n, **{name: round(count / max(n, 1), 3) for name, count in counts.items()},
            "counts": counts, "errors": sum("error" in r for r in records)}


def markdown_table(report: dict) -> str:
    """The per-layout rates as a markdown table, each rate with its count."""
    lines = ["| layout | n | fact read whole | right answer | said found | right page/line | all three |",
             "|---|---|---|---|---|---|---|"]
    for name, entry in report["layouts"].items():
        cells = [f"{entry[m]:.2f} ({entry['counts'][m]})" for m in MEASURES]
        lines.append(f"| {name} | {entry['n']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def commit() -> str | None:
    shown = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return shown.stdout.strip() or None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals layouts", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20, help="items per layout (the same documents in every layout)")
    parser.add_argument("--label", default="before", help="names the output: docs/results/layout-eval-LABEL.json")
    parser.add_argument("--layouts", default=",".join(LAYOUTS), help="comma-separated, of: " + ", ".join(LAYOUTS))
    parser.add_argument("--model", default="demo")
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--reading", choices=READING_MODES, default=DEFAULT_READING, help="as `longqa ask --reading`")
    parser.add_argument("--out", type=Path, help="default: docs/results/layout-eval-LABEL.json")
    args = parser.parse_args(argv)
    out = args.out or ROOT / "docs" / "results" / f"layout-eval-{args.label}.json"
    session = Session()
    session.load(args.model, args.profile)
    report = {"label": args.label, "command": " ".join(["python -m evals layouts", *(argv or [])]),
              "commit": commit(), "cpu": cpu_kind(), "processor": platform.processor() or platform.machine(),
              "model": args.model, "profile": args.profile, "resolved_profile": session.profile_name,
              "reading": args.reading, "n": args.n, "first_seed": SEED_BASE, "layouts": {}, "records": []}
    began = time.perf_counter()
    for name in args.layouts.split(","):
        layout_began = time.perf_counter()
        records = [ask_item(session, item, args.reading) for item in make_items(name, args.n)]
        report["layouts"][name] = {"description": LAYOUTS[name].description, **rates(records),
                                   "seconds": round(time.perf_counter() - layout_began, 1)}
        report["records"] += records
        print(f"{name}: {report['layouts'][name]['counts']} in {report['layouts'][name]['seconds']} s", flush=True)
    report["seconds"] = round(time.perf_counter() - began, 1)
    session.close()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    print(markdown_table(report))
    print(f"{len(report['records'])} items in {report['seconds']} s; written to {out}")
    return 0
