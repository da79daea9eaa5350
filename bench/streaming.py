"""`python -m bench stream [--pairs N] [--out DIR]`: what streaming the best answer so far costs and gains (issue 50 item 2), with
the bundled demo model on the `cpu` profile, on a pasted text of about 1.5 MB and a 100-page PDF made from the demo
model's generator with the fact late in the first tenth: the full read's seconds with a listener and without, side by
side (alternating, so a changing load falls on both), and when the right answer first showed as the best so far,
as a share of the read. docs/streaming.md keeps the numbers.

Measuring here (`measure`), the table apart (`report_lines`); it writes nothing but its JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from training.demo_task import make_example
from longqa.models import DEMO_MODEL_DIR
from longqa.session import read_documents, Session

PASTED_CHARS = 1_500_000
PDF_PAGES = 100
PDF_PAGE_CHARS = 2_000
# The fact lies between these shares of the text: late in the first tenth of the windows, not in the first batch.
FACT_FROM, FACT_TO = 0.08, 0.10


def document_with_early_fact(seed: int, n_chars: int) -> tuple[str, str, str, int]:
    """About `n_chars` of the demo generator's text whose asked fact lies between FACT_FROM and FACT_TO of it:
    (text, question, answer, where the answer starts). Before and after it, other generated documents (other
    names)."""
    before = make_example(seed + 7907, int(n_chars * FACT_FROM))
    fact = make_example(seed, int(n_chars * (FACT_TO - FACT_FROM)))
    after = make_example(seed + 7919, n_chars - len(before.text) - len(fact.text))
    text = " ".join((before.text, fact.text, after.text))
    return text, fact.question, fact.answer, len(before.text) + 1 + fact.answer_start


def pdf_bytes(pages: list[str]) -> bytes:
    """A plain PDF with one line of Helvetica text a page (Latin-1), written by hand: pypdf reads but never writes
    text."""
    def escaped(text: str) -> bytes:
        raw = text.encode("latin-1", errors="replace")
        return raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")

    page_ids = [4 + 2 * i for i in range(len(pages))]
    objects = {1: b"<< /Type /Catalog /Pages 2 0 R >>",
               2: b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % i for i in page_ids),
                                                                len(page_ids)),
               3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"}
    for page_id, text in zip(page_ids, pages):
        stream = b"BT /F1 12 Tf 72 720 Td (%s) Tj ET" % escaped(text)
        objects[page_id] = (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R "
                            b">> >> /Contents %d 0 R >>" % (page_id + 1))
        objects[page_id + 1] = b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream)
    out, offsets = bytearray(b"%PDF-1.4\n"), {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += b"%d 0 obj\n%s\nendobj\n" % (number, objects[number])
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offsets[n] for n in sorted(objects))
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def timed_read(session: Session, plan, listen: bool) -> dict:
    """One full read of `plan`: its seconds, and with a listener, when each best answer so far came."""
    heard: list[tuple[float, str, int]] = []
    began, cpu_began = time.perf_counter(), time.process_time()
    on_candidate = (lambda best: heard.append((time.perf_counter() - began, best.answer.text, best.windows_read))
                    if listen else None)
    readout = session.ask(plan, on_candidate=on_candidate)
    result = readout.result
    return {"read_s": time.perf_counter() - began, "cpu_s": time.process_time() - cpu_began, "heard": heard,
            "answer": result.answers[0].text, "windows": result.windows, "decode_s": result.latency_s["decode"]}


def measure_case(session: Session, name: str, documents, question: str, answer: str, pairs: int) -> dict:
    """`pairs` full reads with a listener and without, alternating, after one read that is not counted (the first
    read of a document paid about 1.8x the others' time on a quiet machine, which fell on one side); when the right
    answer first showed."""
    plan = session.plan(documents, question, "full")
    timed_read(session, plan, listen=False)  # warm-up, not counted
    runs = {"with": [], "without": []}
    for index in range(pairs):
        for listen in ((True, False) if index % 2 == 0 else (False, True)):
            runs["with" if listen else "without"].append(timed_read(session, plan, listen))
    firsts = [next((t for t, text, _ in run["heard"] if text == answer), None) for run in runs["with"]]
    shares = [first / run["read_s"] for first, run in zip(firsts, runs["with"]) if first is not None]
    first_windows = [next((n for _, text, n in run["heard"] if text == answer), None) for run in runs["with"]]
    with_s = statistics.median(r["read_s"] for r in runs["with"])
    without_s = statistics.median(r["read_s"] for r in runs["without"])
    cpu_ratio = (statistics.median(r["cpu_s"] for r in runs["with"]) /
                 statistics.median(r["cpu_s"] for r in runs["without"]))
    # With a listener the windows are decoded between batches instead of at the end, never twice
    # (`answering.BestSoFar`): the final decode's share of a read without one is the work that moves, a bound on
    # what the listener could add whatever the load does to the side-by-side ratio.
    decode_share = statistics.median(r["decode_s"] / r["read_s"] for r in runs["without"])
    return {"case": name, "chars": sum(d.n_chars for d in documents), "windows": runs["with"][0]["windows"],
            "answer": answer, "answered": [r["answer"] for r in runs["with"] + runs["without"]],
            "with_s": [r["read_s"] for r in runs["with"]], "without_s": [r["read_s"] for r in runs["without"]],
            "overhead_ratio": with_s / without_s, "cpu_ratio": cpu_ratio, "decode_share": decode_share,
            "with_cpu_s": [r["cpu_s"] for r in runs["with"]], "without_cpu_s": [r["cpu_s"] for r in runs["without"]],
            "first_right_s": firsts, "first_right_window": first_windows,
            "first_right_share": shares}


def measure(pairs: int) -> dict:
    session = Session()
    session.load(str(DEMO_MODEL_DIR), "cpu")
    text, question, answer, _ = document_with_early_fact(50, PASTED_CHARS)
    pasted, _ = read_documents([], text)
    pdf_text, pdf_question, pdf_answer, _ = document_with_early_fact(51, PDF_PAGES * PDF_PAGE_CHARS)
    pages = [pdf_text[i: i + PDF_PAGE_CHARS] for i in range(0, len(pdf_text), PDF_PAGE_CHARS)]
    pdf, _ = read_documents([(f"stream-{len(pages)}-pages.pdf", pdf_bytes(pages))])
    return {"load": os.getloadavg(), "cpus": os.cpu_count(),
            "cases": [measure_case(session, "pasted 1.5 MB", pasted, question, answer, pairs),
                      measure_case(session, f"PDF of {PDF_PAGES} pages", pdf, pdf_question, pdf_answer, pairs)]}


def report_lines(measured: dict) -> list[str]:
    lines = ["| case | windows | full read with / without a listener (median s) | ratio (wall, CPU) | decode's share "
             "(bound) | right answer first shown (s, windows read, share of the read) |", "|---|---|---|---|---|---|"]
    for case in measured["cases"]:
        firsts = ", ".join(f"{s:.1f} s, {w}, {share:.0%}" for s, w, share in
                           zip(case["first_right_s"], case["first_right_window"], case["first_right_share"]))
        lines.append(f"| {case['case']} | {case['windows']} | {statistics.median(case['with_s']):.1f} / "
                     f"{statistics.median(case['without_s']):.1f} | {case['overhead_ratio']:.3f}, "
                     f"{case['cpu_ratio']:.3f} | {case['decode_share']:.1%} | {firsts} |")
    lines.append(f"load average {measured['load'][0]:.1f} on {measured['cpus']} CPUs")
    return lines


def run(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    measured = measure(args.pairs)
    (out / "streaming.json").write_text(json.dumps(measured, indent=1))
    print("\n".join(report_lines(measured)))
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench stream", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=2, metavar="N",
                        help="reads with and without a listener, N each (default 2)")
    parser.add_argument("--out", default="bench-results", help="where streaming.json goes (default bench-results/)")
    return run(parser.parse_args(argv))
