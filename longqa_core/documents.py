"""What a document is: its cleaned text as a person reads it (`clean_text`, the cleaning every reader's text and a
question go through; `flowing_text`, wrapped lines joined as `text_flow` joins every reader's), where a stretch of it stands as people find it (`Location`: the page of a PDF or of a text whose form
feeds end pages, the nearest heading of a page or Markdown file, a text's line), one document's reading limits
(`ReadLimits`: characters, PDF pages and seconds of extraction, the request's stop check, and how a reader hears that
it waits), and a document made from pasted text.

It reads no file (`files` picks the reader of a file's kind: `text_files`, `pdf_files`, `html_files`, each within
the `ReadLimits` it is handed); it does not split, tokenize or render anything: answer offsets point into
`Document.text`, and Markdown or HTML inside a text stays literal text (the UI escapes it). How many characters a
request may have is the limits' rule (`limits.max_chars_for`).
"""

from __future__ import annotations

import bisect
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, NamedTuple

from longqa_core.errors import CharLimitError, DocumentError
from longqa_core.text_flow import Flow, LineMap, flow_text

if TYPE_CHECKING:
    from longqa_core.pdf_layout import PdfPlaces

DEFAULT_MAX_FILE_BYTES = 50 * 1024 * 1024

_MB = 1024 * 1024
# A book of 5,000 pages holds far more text than the default token limit lets through (about 3,000 pages of
# prose); more pages than that is a file built to make extraction slow.
DEFAULT_MAX_PAGES = 5_000
# Extracting one document, or all of one request's documents together, may take this long: enough for a genuine
# book, not for a PDF whose pages share one huge content stream (docs/results/measure-serving.json has what that costs).
DEFAULT_MAX_READ_S = 30.0

_LINE_BREAKS = re.compile(r"\r\n?|[\v\f\x85]")
# Bidirectional embeddings, overrides and isolates (U+202A-E, U+2066-9) reorder what a reader sees without changing
# what the model reads: a question or document could show one thing and mean another ("Trojan Source").
_CONTROL_AND_ZERO_WIDTH = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200d\u2060\ufeff\u202a-\u202e\u2066-\u2069]"
)
_LONE_SURROGATES = re.compile(r"[\ud800-\udfff]")  # half a UTF-16 pair: no text encoding can hold one


def clean_text(text: str) -> str:
    """Normalise line breaks to "\\n"; drop control characters (except tab), zero-width characters and
    bidirectional overrides and isolates; replace lone surrogates (which no tokenizer can encode) with U+FFFD."""
    # Vertical tab, form feed and NEL separate lines (form feeds end pages in license texts): removing them
    # would glue two words together, so they become line breaks like CR does.
    text = _LINE_BREAKS.sub("\n", _LONE_SURROGATES.sub("\ufffd", text))
    return _CONTROL_AND_ZERO_WIDTH.sub("", text)


def paged_text(text: str) -> tuple[str, tuple[int, ...]]:
    """`text` cleaned (`clean_text`: the same text), and where each page starts when form feeds end its pages, as
    pdftotext writes a PDF's pages and license texts and manual pages have them: no pages with fewer than two, nor
    with more than a PDF may have (`DEFAULT_MAX_PAGES`: a text of form feeds is cleaned in one pass, as any text)."""
    if not 0 < text.count("\f") <= DEFAULT_MAX_PAGES:
        return clean_text(text), ()
    pages = [clean_text(page) for page in text.split("\f")]  # each form feed a line break, as `clean_text` makes it
    starts, start = [], 0
    for page in pages:
        starts.append(start)
        start += len(page) + 1
    text = "\n".join(pages)
    starts = tuple(s for s in starts if s < len(text))  # a last form feed ends a page: none begins after it
    return text, starts if len(starts) > 1 else ()


def flowing_text(text: str) -> Flow:
    """A text file's or pasted text's text as a person reads it: cleaned and cut into pages (`paged_text`), its
    wrapped lines joined and its running headers, footers and page numbers left out (`text_flow.flow_text`)."""
    return flow_text(*paged_text(text))


class Heading(NamedTuple):
    """A heading of a document's text: where it starts (a character offset), its level (1 for a title) and text."""

    start_char: int
    level: int
    title: str


@dataclass(frozen=True)
class Document:
    """A document's name and text, and what its reader kept of its places: where each PDF page starts, where the
    headings of an HTML page or Markdown file stand, and whether its lines are the file's own (text and
    Markdown files, pasted text). The places do not take part in comparisons: the text is the document."""

    name: str
    text: str = field(repr=False)  # can be a million characters: keep it out of reprs and test reports
    # a PDF's, or a text's whose form feeds end pages (`paged_text`), in characters
    page_starts: tuple[int, ...] = field(default=(), repr=False, compare=False)
    headings: tuple[Heading, ...] = field(default=(), repr=False, compare=False)  # in order of `start_char`
    has_lines: bool = field(default=True, repr=False, compare=False)
    # where the file's lines start in `text` once its reader joined wrapped lines (None: a line is a "\n" of `text`)
    lines: LineMap | None = field(default=None, repr=False, compare=False)
    # a PDF's: where each line of `text` was drawn on its page (what marks an answer there: `pdf_pages`)
    places: PdfPlaces | None = field(default=None, repr=False, compare=False)
    source: str | None = field(default=None, repr=False, compare=False)  # the path it was read from, where it was

    @property
    def n_chars(self) -> int:
        return len(self.text)


@dataclass(frozen=True)
class Location:
    """Where a stretch of a document's text stands: the document, its characters, and as people find it there: the
    page (1-based, as a PDF viewer counts), the nearest heading before it, or the line (1-based); None where the
    document has no such thing."""

    document: str
    start_char: int
    end_char: int
    page: int | None = None
    heading: str | None = None
    line: int | None = None
    marks: tuple = ()  # a PDF's: where it stands on its page(s) (`pdf_pages.PageMark`s), once it is marked

    def __str__(self) -> str:
        return format_location(self)


def locate(document: Document, start_char: int, end_char: int) -> Location:
    """Where `document.text[start_char:end_char]` stands: its page, nearest heading and line, as the document has
    them (a binary search each; a line is counted only where it is asked)."""
    page = bisect.bisect_right(document.page_starts, start_char) if document.page_starts else None
    heading = None
    if document.headings:
        before = bisect.bisect_right([h.start_char for h in document.headings], start_char)
        heading = document.headings[before - 1].title if before else None
    line = None
    if document.lines:
        line = document.lines.line_at(start_char)
    elif document.has_lines:  # each form feed that ended a page before it became one more line break (`paged_text`)
        line = document.text.count("\n", 0, start_char) + 1 - (page - 1 if page else 0)
    return Location(document.name, start_char, end_char, page, heading, line)


def heading_path(document: Document, offset: int) -> list[str]:
    """The headings `offset` stands under, outermost first: the nearest before it of each level above the next."""
    path: list[Heading] = []
    for heading in document.headings:
        if heading.start_char > offset:
            break
        while path and path[-1].level >= heading.level:
            path.pop()
        path.append(heading)
    return [heading.title for heading in path]


def passage_place(document: Document, start: int, end: int) -> str | None:
    """Where the passage `document.text[start:end]` stands, to find it in the file: its lines ("notes.txt, lines
    408–416") where the document has lines of its own, its pages in a PDF, else the headings it stands under
    ("page.html, § Results › Altitude"); None where it has none of these."""
    first, last = locate(document, start, start), locate(document, max(start, end - 1), end)
    if first.line is not None and last.line is not None:
        lines = f"line {first.line}" if first.line == last.line else f"lines {first.line}–{last.line}"
        return f"{document.name}, {lines}"
    if first.page is not None and last.page is not None:
        pages = f"page {first.page}" if first.page == last.page else f"pages {first.page}–{last.page}"
        return f"{document.name}, {pages}"
    path = heading_path(document, start)
    return f"{document.name}, § {' › '.join(path)}" if path else None


def format_location(location: Location) -> str:
    """A location for people: "report.pdf, page 37", "page.html, § 3.2 Results", "notes.txt, line 120"."""
    parts = [location.document]
    if location.page is not None:
        parts.append(f"page {location.page}")
    if location.line is not None:
        parts.append(f"line {location.line:,}")
    if location.heading:
        parts.append(f"§ {location.heading}")
    return ", ".join(parts)


class ReadLimits:
    """One document's reading limits, the time limit counted from when reading began. `should_stop` says when the
    request was abandoned (a reader that waits or runs a child polls it); `on_wait(ahead)` hears how many reads are
    ahead of this one while it waits for a reader."""

    def __init__(self, max_chars: int | None = None, max_pages: int = DEFAULT_MAX_PAGES,
                 max_read_s: float | None = None, began: float | None = None, *,
                 should_stop: Callable[[], bool] | None = None, on_wait: Callable[[int], None] | None = None):
        self.max_chars = max_chars
        self.max_pages = max_pages
        self.max_read_s = max_read_s
        self.began = time.perf_counter() if began is None else began
        self.should_stop = should_stop
        self.on_wait = on_wait

    def stopped_message(self, name: str, progress: str) -> str:
        """What a reader's Cancelled says when the request was stopped while it was `progress` `name`."""
        return f"The request was stopped while {progress} '{name}'."

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.began

    def is_over_time(self) -> bool:
        return self.max_read_s is not None and self.elapsed_s() > self.max_read_s

    def remaining_s(self) -> float | None:
        """Seconds left of the time limit (None: no limit)."""
        return None if self.max_read_s is None else max(self.max_read_s - self.elapsed_s(), 0.0)

    def is_over_chars(self, n_chars: int) -> bool:
        return self.max_chars is not None and n_chars > self.max_chars

    def check_chars(self, name: str, n_chars: int) -> None:
        if self.is_over_chars(n_chars):
            raise CharLimitError(f"'{name}' has {n_chars:,} characters, over the limit of {self.max_chars:,} "
                                 f"characters.", n_chars=n_chars)

    def time_error(self, name: str, progress: str) -> DocumentError:
        return DocumentError(f"'{name}': reading stopped after {self.elapsed_s():.1f} s ({progress}), over the "
                             f"time limit of {self.max_read_s:g} s for reading documents.")


def from_text(text: str, name: str = "pasted text", *, max_bytes: int = DEFAULT_MAX_FILE_BYTES,
              max_chars: int | None = None) -> Document:
    """Wrap pasted text as a document, cleaned like a file's text, within the limits an uploaded file has.

    `max_bytes` counts the text's UTF-8 bytes, as if it had been uploaded as a UTF-8 file.
    """
    n_bytes = len(text) if text.isascii() else len(text.encode("utf-8", errors="surrogatepass"))
    check_size(name, n_bytes, max_bytes, what="size limit")
    flow = flowing_text(text)
    if not flow.text.strip():
        raise DocumentError(f"'{name}' is empty: paste or upload some text.")
    ReadLimits(max_chars).check_chars(name, len(flow.text))
    return Document(name=name, text=flow.text, page_starts=flow.page_starts, lines=flow.lines)


def check_size(name: str, n_bytes: int, max_bytes: int, what: str = "file size limit") -> None:
    if n_bytes > max_bytes:
        raise DocumentError(
            f"'{name}' is {_format_mb(n_bytes)} ({n_bytes:,} bytes), over the {_format_mb(max_bytes)} {what}."
        )


def _format_mb(n_bytes: int) -> str:
    n_mb = n_bytes / _MB
    return f"{n_mb:.1f} MB" if n_mb >= 0.1 else f"{n_mb:.4f} MB"

