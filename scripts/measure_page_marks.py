"""What marking an answer on its PDF page and drawing the page cost (issue 62), and hostile pages' bounds.

Usage: python scripts/measure_page_marks.py [--rounds 5] [--out docs/results/page-marks.json]

1. A 100-page report written by matplotlib (the fact wrapped inside its name on page 87), asked with the bundled
   demo model as `longqa ask` asks (its default profile, guided reading): per round, the answer with its marks and
   the same answer with its document's file unknown (no marks), alternating; the medians, their difference, and the
   "mark" stage's own seconds. Then drawing the top answer's page (what opening "See it on the page" costs).
2. Hostile PDFs, drawn as the page would: a page of 10,000 × 10,000 points (refused), an image of 30,000 × 30,000
   pixels under the text (PDFium draws it at the page's size), and 3,000 pages (marked and drawn on the last one):
   each one's seconds and message, and this process's RSS before, after and the difference (the children do the
   work and hand their memory back when they exit).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from longqa.bench.report import cpu_kind  # noqa: E402
from longqa.bench.runner import machine_info  # noqa: E402
from longqa.session import Session  # noqa: E402
from longqa_core import pdf_pages  # noqa: E402
from longqa_core.errors import DocumentError  # noqa: E402
from longqa_core.files import read_document  # noqa: E402
from longqa_core.limits import validate_request  # noqa: E402
from strategies.hardware import detect_hardware  # noqa: E402
from tests.generated_pdfs import (WRAPPED_QUESTION, canvas_pdf, image_bomb_pdf, text_pdf,  # noqa: E402
                                  wrapped_matplotlib_pdf)


def rss() -> int:
    return psutil.Process().memory_info().rss


def answer_costs(folder: Path, rounds: int) -> dict:
    path = folder / "report.pdf"
    path.write_bytes(wrapped_matplotlib_pdf(n_pages=100, fact_page=87))
    document = read_document(path)
    unmarked = dataclasses.replace(document, source=None)
    session = Session()
    session.load("demo", "auto")  # as `longqa ask` loads it
    question = validate_request([document], WRAPPED_QUESTION)
    with_marks, without, mark_stage = [], [], []
    best = None
    for _ in range(rounds + 1):  # the first round warms up and is dropped
        for docs, into in (([document], with_marks), ([unmarked], without)):
            began = time.perf_counter()
            readout = session.ask(session.plan(docs, question, "auto"))
            into.append(time.perf_counter() - began)
            if docs[0] is document:
                mark_stage.append(readout.result.latency_s.get("mark", 0.0))
                best = readout.result.answers[0]
    with_marks, without, mark_stage = with_marks[1:], without[1:], mark_stage[1:]
    mark = best.location.marks[0]
    draws = []
    for _ in range(rounds):
        began = time.perf_counter()
        png = pdf_pages.render_page(document.source, document.name, mark)
        draws.append(time.perf_counter() - began)
    return {"pdf_pages": 100, "profile": session.profile_name, "answer": best.text, "page": best.location.page,
            "answer_with_marks_s": statistics.median(with_marks), "answer_without_marks_s": statistics.median(without),
            "marks_add_s": statistics.median(with_marks) - statistics.median(without),
            "mark_stage_s": statistics.median(mark_stage), "draw_page_s": statistics.median(draws),
            "page_image_bytes": len(png), "rounds": rounds}


def hostile(folder: Path) -> list[dict]:
    def huge(canvas):
        canvas.setFont("Helvetica", 40)
        canvas.drawString(100, 5000, "The altitude of Vesmira Quonthal is 2250.")

    cases = {"a page of 10,000 x 10,000 points": canvas_pdf([huge], size=(10_000, 10_000)),
             "an image of 30,000 x 30,000 pixels (2.7 GB decoded) under the text": image_bomb_pdf(),
             "3,000 pages, the answer on the last": text_pdf(*(["Nothing here but prose."] * 2_999 +
                                                              ["The altitude of Vesmira Quonthal is 2250."]))}
    out = []
    for name, data in cases.items():
        path = folder / "hostile.pdf"
        path.write_bytes(data)
        before = rss()
        began = time.perf_counter()
        row = {"case": name, "file_bytes": len(data)}
        try:
            document = read_document(path)
            start = document.text.index("2250")
            (mark,) = pdf_pages.answer_marks(document, [(start, start + 4)])[0]
            png = pdf_pages.render_page(document.source, document.name, mark)
            row["outcome"] = f"drawn: {len(png):,} bytes of PNG, page {mark.page}"
        except DocumentError as exc:
            row["outcome"] = f"refused: {exc}"
        row["seconds"] = time.perf_counter() - began
        after = rss()
        row.update(rss_before_bytes=before, rss_after_bytes=after, rss_change_bytes=after - before)
        out.append(row)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "docs" / "results" / "page-marks.json"))
    args = parser.parse_args()
    machine = machine_info(detect_hardware())
    with tempfile.TemporaryDirectory() as folder:
        results = {"command": "python scripts/measure_page_marks.py", "cpu_kind": cpu_kind(machine),
                   "cpu_cores": machine["cpu_cores_logical"], "python": platform.python_version(),
                   "answer": answer_costs(Path(folder), args.rounds), "hostile": hostile(Path(folder))}
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
