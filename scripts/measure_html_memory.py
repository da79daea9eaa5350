"""The address space resiliparse's child needs per byte of page, by kind of markup: the numbers behind the HTML
children's memory cap (`longqa_core.html_files.HTML_MEMORY_PER_BYTE`, docs/html-readers.md).

Usage: python scripts/measure_html_memory.py [--mb 1 5 10]
Each page is read in a fresh child, as the server reads it but without a cap; the child reports its peak address
space (VmPeak, what RLIMIT_AS bounds) and peak resident memory (VmHWM). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

MIB = 2**20
WORKER = """
import sys
sys.path[:] = sys.argv[1:]
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLTree
extract_plain_text(HTMLTree.parse(sys.stdin.buffer.read().decode("utf-8")), list_bullets=False, alt_texts=False)
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
print(int(status["VmPeak"].split()[0]) * 1024, int(status["VmHWM"].split()[0]) * 1024)
"""
PAGES = {  # a repeated unit, by kind of markup
    "dense formatting `<p><b><i><u><s>x</p>`": "<p><b><i><u><s>x</p>",
    "nested `<div>`s": "<div>",
    "`<p>` repeated": "<p>",
    "`<br>` repeated": "<br>",
    "`<i>x` repeated (unclosed formatting)": "<i>x",
    "ordinary paragraphs": "<p>The harbour was quiet that <b>morning</b> and the boats stayed in.</p>\n",
}


def peak_bytes(page: bytes) -> tuple[int, int]:
    done = subprocess.run([sys.executable, "-I", "-S", "-c", WORKER, *sys.path], input=page, capture_output=True,
                          check=True)
    peak, resident = done.stdout.split()
    return int(peak), int(resident)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, nargs="+", default=[1.0, 5.0])
    args = parser.parse_args(argv)
    empty, _ = peak_bytes(b"<p>x</p>")
    print(f"empty page: {empty / MIB:.0f} MB of address space\n")
    print("| page | size | address space (VmPeak) | resident (VmHWM) | address space per byte of page |\n"
          "|---|---:|---:|---:|---:|")
    for name, unit in PAGES.items():
        for mb in args.mb:
            page = (unit * int(mb * MIB / len(unit))).encode()
            peak, resident = peak_bytes(page)
            print(f"| {name} | {len(page) / MIB:.1f} MB | {peak / MIB:,.0f} MB | {resident / MIB:,.0f} MB | "
                  f"{(peak - empty) / len(page):.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
