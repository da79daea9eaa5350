"""What reading a 100-page PDF costs, the reader of a checkout against this one, side by side (issue 57 item 6).

Usage: python scripts/measure_pdf_reading.py --before /tmp/old [--rounds 5] [--out docs/results/pdf-reading-cost.json]
`--before` is a checkout of the commit to compare with (`git worktree add /tmp/old <commit>`). Each round reads the
same PDFs with `longqa_core.files.read_document` (the child process, its memory cap and limits, as an upload is
read) in a fresh interpreter of each checkout, alternating; the medians and their ratio are written. The PDFs: 100
pages of wrapped prose from the independent evaluation generator with a running header and a page-number footer
(reportlab), and `bench.first_answer`'s 100 pages of one long line each.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from reportlab.pdfbase.pdfmetrics import stringWidth
from reportlab.pdfgen import canvas

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.first_answer import make_pdf  # noqa: E402
from evals import eval_task  # noqa: E402

PAGES = 100
_TIMER = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from longqa_core.files import read_document
data = open(sys.argv[2], "rb").read()
read_document(data, name="warm.pdf")  # the first child's imports warm the disk cache
began = time.perf_counter()
document = read_document(data, name="report.pdf")
print(json.dumps({"seconds": time.perf_counter() - began, "chars": len(document.text)}))
"""


def wrapped_pdf(path: Path, pages: int = PAGES) -> None:
    """`pages` pages of 11-point Helvetica prose wrapped at 468 points, a header and 'Page N of M' on each."""
    words = eval_task.make_document(57, pages * 480).text.split()
    pdf = canvas.Canvas(str(path), pagesize=(612, 792))
    page, y, line = 1, 720.0, []

    def frame() -> None:
        pdf.setFont("Helvetica", 9)
        pdf.drawString(72, 760, "Harbour Records: the annual report")
        pdf.drawString(280, 40, f"Page {page} of {pages}")
        pdf.setFont("Helvetica", 11)

    frame()
    for word in words:
        if stringWidth(" ".join(line + [word]), "Helvetica", 11) <= 468:
            line.append(word)
            continue
        pdf.drawString(72, y, " ".join(line))
        line, y = [word], y - 14
        if y < 70:
            if page == pages:
                break
            pdf.showPage()
            page, y = page + 1, 720.0
            frame()
    pdf.drawString(72, y, " ".join(line))
    pdf.showPage()
    pdf.save()


def timed(checkout: Path, pdf: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", _TIMER, str(checkout), str(pdf)], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)


def cpu_kind() -> str:
    flags = Path("/proc/cpuinfo").read_text()
    return "amx_bf16" if "amx_bf16" in flags else "avx512_bf16" if "avx512_bf16" in flags else "avx2 only"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "pdf-reading-cost.json")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    pdfs = {"wrapped prose, header and footer": folder / "wrapped.pdf", "one long line a page": folder / "lines.pdf"}
    wrapped_pdf(pdfs["wrapped prose, header and footer"])
    pdfs["one long line a page"].write_bytes(make_pdf(PAGES)[0])
    results = {}
    for label, pdf in pdfs.items():
        runs = {"before": [], "after": []}
        for _ in range(args.rounds):
            for side, checkout in (("before", args.before), ("after", ROOT)):
                runs[side].append(timed(checkout, pdf))
        before = statistics.median(r["seconds"] for r in runs["before"])
        after = statistics.median(r["seconds"] for r in runs["after"])
        results[label] = {"pages": PAGES, "bytes": pdf.stat().st_size, "before_s": before, "after_s": after,
                          "ratio": after / before, "chars_before": runs["before"][0]["chars"],
                          "chars_after": runs["after"][0]["chars"]}
        print(f"| {label} | {before:.2f} s | {after:.2f} s | {after / before:.2f}x |")
    before_commit = subprocess.run(["git", "-C", str(args.before), "rev-parse", "--short", "HEAD"],
                                   capture_output=True, text=True).stdout.strip()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "command": f"python scripts/measure_pdf_reading.py --before CHECKOUT_OF_{before_commit} --rounds {args.rounds}",
        "measures": "seconds to read one PDF with read_document (child process, memory cap, default limits), "
                    "median of the rounds, each checkout in its own interpreter, alternating",
        "machine": {"cpu": platform.processor() or platform.machine(), "cpu_kind": cpu_kind(), "cores": 2},
        "before_commit": before_commit, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
