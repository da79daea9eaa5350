"""Time HTML-to-text readers on ordinary and hostile pages; the numbers behind docs/html-readers.md.

Usage: python scripts/measure_html_readers.py [--timeout-s 60] [--readers ...] [--cases ...]
Each reader reads each page in a fresh process (so a quadratic case can be stopped and peak memory is its own);
a reader that is not installed is skipped. Prints a markdown report: the machine, then seconds, peak memory and
whether the expected text came through. Not a test: it measures, and the tests guard the chosen reader.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUSEUM_CATALOGUE = ROOT / "longqa" / "samples" / "museum_catalogue.html"
_MB = 1_000_000


def ordinary_page(n_bytes: int) -> str:
    """An article of about `n_bytes`: headings, paragraphs with inline markup, lists, a table, and a script and a
    style in every section (their text must not come through)."""
    section = (
        "<section><h2>Section {i}</h2>\n"
        "<p>The ledger of <a href=\"/wiki/harbour\">harbour {i}</a> lists <b>four hundred</b> crates of tea and "
        "<i>two hundred</i> crates of porcelain, unloaded at seven in the morning.</p>\n"
        "<ul><li>Arrival: <span class=\"date\">12 March</span></li><li>Berth: {i}</li></ul>\n"
        "<table><tr><th>Cargo</th><th>Crates</th></tr><tr><td>Tea</td><td>400</td></tr></table>\n"
        "<script>var tracker{i} = {{page: 'SCRIPT-TEXT', items: [1, 2, 3]}}; function f{i}() {{ return 1; }}"
        "</script>\n<style>.date {{ color: #336; }} /* STYLE-TEXT */</style></section>\n"
    )
    head = "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>Harbour ledger</title></head><body>\n"
    sections, size, i = [], len(head), 0
    while size < n_bytes:
        sections.append(section.format(i=i))
        size += len(sections[-1])
        i += 1
    return head + "".join(sections) + "<p>END-OF-PAGE</p></body></html>"


def repeated_documents(n_documents: int) -> str:
    """Whole `<html>` documents one after another, as concatenated or badly saved pages are."""
    return "".join(f"<!DOCTYPE html><html><head><title>Part {i}</title></head><body><p>Text of part {i}.</p>"
                   f"</body></html>\n" for i in range(1, n_documents + 1))


def nested(tag: str, depth: int, text: str) -> str:
    return f"<{tag}>" * depth + text + f"</{tag}>" * depth


@dataclass(frozen=True)
class Case:
    name: str
    source: str  # a Python expression, evaluated in the measuring process (keeps the command line short)
    expected: tuple[str, ...] = ()  # text that must come through
    unexpected: tuple[str, ...] = ()  # text that must not


CASES = (  # name, page, text that must (not) come through
    Case("museum_catalogue.html (23 KB sample)", "MUSEUM_CATALOGUE.read_text(encoding='utf-8')",
         ("The abstract base class for all I/O classes.",)),
    Case("ordinary page, 1 MB, scripts and styles", "ordinary_page(1 * _MB)",
         ("four hundred", "END-OF-PAGE"), ("SCRIPT-TEXT", "STYLE-TEXT")),
    Case("ordinary page, 50 MB (the file size limit)", "ordinary_page(50 * _MB)",
         ("four hundred", "END-OF-PAGE"), ("SCRIPT-TEXT", "STYLE-TEXT")),
    Case("'<a' * 150,000 (300 KB, unterminated tags)", "'<a' * 150_000"),
    Case("'</' * 500,000 (1 MB)", "'</' * 500_000"),
    Case("500,000 nested <div>s, text at the bottom (2.5 MB)", "nested('div', 500_000, 'BOTTOM-TEXT')",
         ("BOTTOM-TEXT",)),
    Case("3,000 nested <span>s, text at the bottom", "nested('span', 3_000, 'BOTTOM-TEXT') + '<p>AFTER</p>'",
         ("BOTTOM-TEXT", "AFTER")),
    Case("100 repeated <html> documents", "repeated_documents(100)", ("Text of part 1.", "Text of part 100.")),
    Case("'<b><i>x</b>' * 91,000 (1 MB, misnested formatting)", "'<b><i>x</b>' * (1 * _MB // 11)"),
    Case("'<a><b></a>' * 100,000 (1 MB, misnested links)", "'<a><b></a>' * (1 * _MB // 10)"),
    Case("'<b><i>x</b>' * 455,000 (5 MB)", "'<b><i>x</b>' * (5 * _MB // 11)"),
    Case("'<p><b><i><u><s>x</p>' * 250,000 (5 MB, dense markup)", "'<p><b><i><u><s>x</p>' * (5 * _MB // 20)",
         ("x",)),
)


class _TextCollector(HTMLParser):
    """The standard library's tokenizer with script and style skipped: what the reader before resiliparse did."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip_depth = 0

    def handle_starttag(self, tag, attrs):
        self.skip_depth += tag in ("script", "style")

    def handle_endtag(self, tag):
        self.skip_depth -= tag in ("script", "style") and self.skip_depth > 0

    def handle_data(self, data):
        if not self.skip_depth:
            self.parts.append(data)


def read_with_html_parser(source: str) -> str:
    collector = _TextCollector()
    collector.feed(source)
    collector.close()
    return "\n".join(collector.parts)


def read_with_resiliparse(source: str) -> str:
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree

    return extract_plain_text(HTMLTree.parse(source), list_bullets=False, alt_texts=False)


def read_with_selectolax(source: str) -> str:
    from selectolax.lexbor import LexborHTMLParser

    tree = LexborHTMLParser(source)
    tree.strip_tags(["script", "style", "noscript", "template"])
    return tree.body.text(separator="\n") if tree.body else ""


def read_with_html_text(source: str) -> str:
    import html_text

    return html_text.extract_text(source)


def read_with_longqa(source: str) -> str:
    """This project's reader with its default limits: a refusal is an outcome, reported as such."""
    sys.path.insert(0, str(ROOT))
    from longqa_core.documents import read_document
    from longqa_core.errors import DocumentError

    try:
        return read_document(source.encode("utf-8"), name="page.html").text
    except DocumentError as exc:
        return f"DocumentError: {exc}"


READERS = {  # name: (function, the distribution whose version is reported)
    "html.parser (stdlib)": (read_with_html_parser, None),
    "resiliparse": (read_with_resiliparse, "resiliparse"),
    "selectolax (lexbor)": (read_with_selectolax, "selectolax"),
    "html-text (lxml)": (read_with_html_text, "html-text"),
    "read_document (longqa)": (read_with_longqa, None),
}


def measure_cell(reader: str, case: Case) -> dict:
    """In this process: build the page, read it once (imports done before); seconds, characters out, peak
    memory, text checks."""
    source = eval(case.source)  # noqa: S307 - the expressions are this file's own literals
    read = READERS[reader][0]
    read("<p>warm-up</p>")  # imports are not what is measured
    began = time.perf_counter()
    text = read(source)
    seconds = time.perf_counter() - began
    peak_bytes = 1024 * max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                            resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    return dict(seconds=seconds, n_chars=len(text), peak_bytes=peak_bytes,
                refused=text.startswith("DocumentError: ") and text[len("DocumentError: "):] or None,
                missing=[s for s in case.expected if s not in text], leaked=[s for s in case.unexpected if s in text])


def is_installed(reader: str) -> bool:
    distribution = READERS[reader][1]
    if distribution is None:
        return True
    try:
        importlib.metadata.version(distribution)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def measure_all(readers: list[str], cases: list[Case], timeout_s: float) -> dict[tuple[str, str], dict]:
    """Each (reader, case) in its own process, stopped after `timeout_s`; a stopped one is `{"timeout_s": ...}`."""
    results = {}
    for case in cases:
        for reader in readers:
            command = [sys.executable, __file__, "--cell", reader, case.name]
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=True)
                results[reader, case.name] = json.loads(done.stdout)
            except subprocess.TimeoutExpired:
                results[reader, case.name] = {"timeout_s": timeout_s}
            except subprocess.CalledProcessError as exc:
                results[reader, case.name] = {"failed": exc.stderr.strip().splitlines()[-1:]}
            print(f"{case.name} / {reader}: {results[reader, case.name]}", file=sys.stderr)
    return results


def machine_description() -> dict[str, str]:
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")),
                 platform.processor())
    return {
        "CPU": model,
        "avx512_bf16 lines in /proc/cpuinfo": str(cpuinfo.count("avx512_bf16")),  # 0: an AVX2-only machine
        "cores": str(os.cpu_count()),
        "load average over the run's last 15 min": f"{os.getloadavg()[2]:.1f}",  # other work skews the seconds
        "Python": platform.python_version(),
        **{name: importlib.metadata.version(READERS[name][1]) for name in READERS
           if READERS[name][1] and is_installed(name)},
    }


REFUSALS = {  # words in a DocumentError: how a table cell names it
    "time limit": "time limit",
    "of memory": "memory limit",
    "only whitespace": "no text",
}


def format_cell(result: dict) -> str:
    if "timeout_s" in result:
        return f"> {result['timeout_s']:g} s"
    if "failed" in result:
        return "failed: " + " ".join(result["failed"])
    cell = f"{result['seconds']:.2f} s"
    if result["refused"]:
        reason = next((why for key, why in REFUSALS.items() if key in result["refused"]), result["refused"])
        cell += f" refused: {reason}"
    if result["missing"] and not result["refused"]:
        cell += " **text lost**"
    if result["leaked"]:
        cell += " **script/style leaked**"
    return cell


def format_report(machine: dict[str, str], readers: list[str], cases: list[Case],
                  results: dict[tuple[str, str], dict]) -> str:
    lines = ["Machine: " + "; ".join(f"{key} {value}" for key, value in machine.items()), "",
             "Seconds to read (in bold: what the output got wrong):", "",
             "| page | " + " | ".join(readers) + " |", "|---|" + "---:|" * len(readers)]
    for case in cases:
        lines.append(f"| {case.name} | " + " | ".join(format_cell(results[r, case.name]) for r in readers) + " |")
    lines += ["", "Peak memory of the reading process (MB):", "",
              "| page | " + " | ".join(readers) + " |", "|---|" + "---:|" * len(readers)]
    for case in cases:
        cells = [f"{results[r, case.name]['peak_bytes'] / _MB:,.0f}" if "peak_bytes" in results[r, case.name]
                 else "-" for r in readers]
        lines.append(f"| {case.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timeout-s", type=float, default=60.0, help="stop a reader after this long on one page")
    parser.add_argument("--readers", nargs="+", choices=list(READERS), default=list(READERS))
    parser.add_argument("--cases", nargs="+", metavar="SUBSTRING", help="only pages whose name contains one")
    parser.add_argument("--cell", nargs=2, metavar=("READER", "CASE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cell:
        reader, case_name = args.cell
        print(json.dumps(measure_cell(reader, next(c for c in CASES if c.name == case_name))))
        return
    readers = [reader for reader in args.readers if is_installed(reader)]
    cases = [c for c in CASES if not args.cases or any(part in c.name for part in args.cases)]
    results = measure_all(readers, cases, args.timeout_s)
    print(format_report(machine_description(), readers, cases, results))


if __name__ == "__main__":
    main()
