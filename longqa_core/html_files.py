"""HTML pages (.html, .htm): their title and visible text, extracted by resiliparse in a child process that the
time limit stops and whose memory is capped.

It decodes a page by its `<meta charset>` (through `text_files`) and cleans the text; it does not render HTML,
keep links or tables, or pick readers by extension (`documents`).
"""

from __future__ import annotations

import re
import subprocess
import sys

from longqa_core.document_limits import ReadLimits
from longqa_core.errors import DocumentError
from longqa_core.text_files import clean_text, decode_non_binary


def read_html_file(data: bytes, name: str, limits: ReadLimits) -> str:
    """The page's title, then its visible text: block elements on their own lines, paragraphs and headings
    followed by a blank line, whitespace collapsed as a browser does outside `<pre>`."""
    source = decode_non_binary(data, name, declared_encoding=_declared_charset(data))
    title, body = _extract_html_text(source, name, limits)
    text = "\n\n".join(part for part in (title, body) if part)
    # Per line, not with a regular expression: " +\n" would rescan a long run of spaces from each of its starts.
    text = "\n".join(line.rstrip(" ") for line in text.split("\n"))
    return clean_text(_BLANK_LINES.sub("\n\n", text).strip("\n"))


_BLANK_LINES = re.compile(r"\n{3,}")

# resiliparse's HTML engine (lexbor) reads in linear time the pages that made the standard library's HTMLParser
# quadratic, but it holds the interpreter lock, is itself quadratic on misnested formatting tags, and needs about
# 20 bytes of memory per byte of an ordinary page, 200 of dense markup (docs/html-readers.md). So it runs in a
# child process: the time limit stops it, its memory is capped, and the server's interpreter waits on a pipe.
_HTML_MAX_MEMORY_BYTES = 4 * 1024**3  # a 50 MB page of ordinary markup (the file size limit) peaks at 1.1 GB
_HTML_OUT_OF_MEMORY_EXIT = 3
_HTML_WORKER = f"""
import resource, sys
max_memory_bytes = int(sys.argv[1])
sys.path[:] = sys.argv[2:]  # the server's own: the child runs without site-packages set up (-S), to start fast
resource.setrlimit(resource.RLIMIT_AS, (max_memory_bytes, max_memory_bytes))
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLParserException, HTMLTree
try:
    tree = HTMLTree.parse(sys.stdin.buffer.read().decode("utf-8"))
    body = extract_plain_text(tree, list_bullets=False, alt_texts=False)
    sys.stdout.buffer.write(((tree.title or "") + "\\0" + body).encode("utf-8"))
except (HTMLParserException, MemoryError):  # lexbor reports a failed allocation as a parser error
    sys.exit({_HTML_OUT_OF_MEMORY_EXIT})
"""


def _extract_html_text(source: str, name: str, limits: ReadLimits) -> tuple[str, str]:
    """The page's title and its visible text (no script, style, head, template, noscript or form controls),
    extracted by `_HTML_WORKER` within the time left of `limits`."""
    if limits.is_over_time():
        raise limits.time_error(name, "after decoding it")
    command = [sys.executable, "-I", "-S", "-c", _HTML_WORKER, str(_HTML_MAX_MEMORY_BYTES), *sys.path]
    try:
        # "replace": a lone surrogate, which none of our decoders produces, would become "?" rather than an error.
        done = subprocess.run(command, input=source.encode("utf-8", errors="replace"), capture_output=True,
                              timeout=limits.remaining_s())
    except subprocess.TimeoutExpired:  # subprocess.run has killed the child
        raise limits.time_error(name, f"parsing {len(source):,} characters of HTML") from None
    if done.returncode == _HTML_OUT_OF_MEMORY_EXIT:
        raise DocumentError(f"'{name}' could not be read: its HTML needs more than the "
                            f"{_HTML_MAX_MEMORY_BYTES / 2**30:g} GB of memory that reading one document may use.")
    if done.returncode < 0:
        raise DocumentError(f"'{name}' could not be read: the HTML reader stopped on it "
                            f"(signal {-done.returncode}).")
    if done.returncode:
        raise RuntimeError(f"the HTML reader failed: {done.stderr.decode('utf-8', errors='replace').strip()}")
    title, _, body = done.stdout.decode("utf-8").partition("\0")
    return title, body


_META_CHARSET = re.compile(rb"""<meta\b[^>]*?\bcharset\s*=\s*["']?\s*([A-Za-z0-9_.:+-]+)""", re.IGNORECASE)
# The HTML standard's prescan reads the first 1,024 bytes; pages with a long head before the meta tag exist.
_CHARSET_PRESCAN_BYTES = 8192


def _declared_charset(data: bytes) -> str | None:
    """The charset label of a `<meta charset>` or `<meta http-equiv="Content-Type" content="...; charset=">`."""
    match = _META_CHARSET.search(data[:_CHARSET_PRESCAN_BYTES])
    return match.group(1).decode("ascii") if match else None
