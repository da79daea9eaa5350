"""HTML pages (.html, .htm): their title, visible text and where its headings stand, extracted by resiliparse in a
child process that the time limit and a cancel stop, whose memory is capped in proportion to the page, taking turns
with the other reads of this process (`reader_children.READERS`, shared with PDF reading).

It decodes a page by its `<meta charset>` (through `text_files`) and cleans the text; it does not render HTML,
keep links or tables, or pick readers by extension (`files`).
"""

from __future__ import annotations

import json
import re

from longqa_core.reader_children import OUT_OF_MEMORY_EXIT, READERS, ReaderChildren, read_in_child
from longqa_core.documents import Heading, ReadLimits, clean_text
from longqa_core.text_files import decode_non_binary


def read_html_file(data: bytes, name: str, limits: ReadLimits) -> tuple[str, list[Heading]]:
    """The page's title, then its visible text: block elements on their own lines, paragraphs and headings
    followed by a blank line, whitespace collapsed as a browser does outside `<pre>`; and where its h1-h6
    headings stand in that text."""
    source = decode_non_binary(data, name, declared_encoding=_declared_charset(data))
    title, body, headings = _extract_html_text(source, name, limits)
    text = "\n\n".join(part for part in (title, body) if part)
    # Per line, not with a regular expression: " +\n" would rescan a long run of spaces from each of its starts.
    text = "\n".join(line.rstrip(" ") for line in text.split("\n"))
    text = clean_text(_BLANK_LINES.sub("\n\n", text).strip("\n"))
    body_start = text.find("\n\n") + 2 if title and body else 0  # a heading that repeats the title is the body's
    return text, locate_headings(text, headings, body_start)


_BLANK_LINES = re.compile(r"\n{3,}")

# resiliparse's HTML engine (lexbor) reads in linear time the pages that made the standard library's HTMLParser
# quadratic, but it holds the interpreter lock, is itself quadratic on misnested formatting tags, and needs about
# 20 bytes of memory per byte of an ordinary page, 200 of dense markup (docs/html-readers.md). So it runs in a
# child process of `reader_children.READERS`, which HTML and PDF reading share.
MIB = 2**20
# A child's address space may hold the interpreter and resiliparse (about 21 MB measured) and this many bytes per
# byte of its page: dense markup (`'<p><b><i><u><s>x</p>'` repeated) measured 190, ordinary pages about 25.
HTML_BASE_MEMORY_BYTES = 64 * MIB
HTML_MEMORY_PER_BYTE = 256
# The child writes one line of JSON (the title, and each h1-h6 heading's level and text in document order), then the
# visible text.
_HTML_WORKER = f"""
import json
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLParserException, HTMLTree
try:
    tree = HTMLTree.parse(sys.stdin.buffer.read().decode("utf-8"))
    body = extract_plain_text(tree, list_bullets=False, alt_texts=False)
    # values(), not iterating the collection: that looks each item up afresh, in time quadratic in their number
    headings = [(int(e.tag[1]), " ".join(e.text.split()))
                for e in tree.document.query_selector_all("h1, h2, h3, h4, h5, h6").values()]
    head = json.dumps({{"title": tree.title or "", "headings": headings}})
    sys.stdout.buffer.write((head + "\\n" + body).encode("utf-8"))
except (HTMLParserException, MemoryError):  # lexbor reports a failed allocation as a parser error
    sys.exit({OUT_OF_MEMORY_EXIT})
"""


def html_memory_cap(n_bytes: int, readers: ReaderChildren | None = None) -> int:
    """The address space a child reading `n_bytes` of page may have: in proportion to the page, at most all."""
    return (readers or READERS).memory_cap(HTML_BASE_MEMORY_BYTES, HTML_MEMORY_PER_BYTE, n_bytes)


def _extract_html_text(source: str, name: str, limits: ReadLimits) -> tuple[str, str, list[tuple[int, str]]]:
    """The page's title, its visible text (no script, style, head, template, noscript or form controls) and its
    headings (level, text) in document order, extracted by `_HTML_WORKER` within the time left of `limits`, in a
    turn of `READERS`."""
    if limits.is_over_time():
        raise limits.time_error(name, "after decoding it")
    # "replace": a lone surrogate, which none of our decoders produces, would become "?" rather than an error.
    page = source.encode("utf-8", errors="replace")
    cap_bytes = html_memory_cap(len(page), READERS)
    stdout = read_in_child(READERS, _HTML_WORKER, page, cap_bytes, name, limits,
                           f"parsing {len(source):,} characters of HTML", kind="HTML", unit="page")
    if not stdout:  # nothing written: no title, no text
        return "", "", []
    head, _, body = stdout.decode("utf-8").partition("\n")
    parts = json.loads(head)
    return parts["title"], body, [(int(level), title) for level, title in parts["headings"]]


def locate_headings(text: str, headings: list[tuple[int, str]], start: int = 0) -> list[Heading]:
    """Where each heading (level, text), in document order, stands in the page's final `text`: searched for in
    order from `start`, each after the one before. A heading not found (hidden, or cut by cleaning) is left out;
    the searches for missing ones stop once they have scanned the text a few times over, so a page of hidden
    headings costs linear time."""
    located, position, missed_budget = [], start, 4 * len(text)
    for level, title in headings:
        title = clean_text(title).strip()
        if not title:
            continue
        found = text.find(title, position)
        if found < 0:
            missed_budget -= len(text) - position
            if missed_budget < 0:
                break
            continue
        located.append(Heading(found, level, title))
        position = found + len(title)
    return located


_META_CHARSET = re.compile(rb"""<meta\b[^>]*?\bcharset\s*=\s*["']?\s*([A-Za-z0-9_.:+-]+)""", re.IGNORECASE)
# The HTML standard's prescan reads the first 1,024 bytes; pages with a long head before the meta tag exist.
_CHARSET_PRESCAN_BYTES = 8192


def _declared_charset(data: bytes) -> str | None:
    """The charset label of a `<meta charset>` or `<meta http-equiv="Content-Type" content="...; charset=">`."""
    match = _META_CHARSET.search(data[:_CHARSET_PRESCAN_BYTES])
    return match.group(1).decode("ascii") if match else None
