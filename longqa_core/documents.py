"""Reading user documents (.txt, .md, .pdf, .html) into exact, cleaned text, with errors a user can act on, and
where a stretch of that text stands in the document as people find it (`Location`: a PDF's page, the nearest
heading of a page or Markdown file, a text's line).

It checks a file's size and extension and hands its bytes to the reader of its kind (`text_files`, `pdf_files`,
`html_files`), within the character, page and time limits of `document_limits`; it does not split, tokenize or
render anything: answer offsets point into `Document.text`, and Markdown or HTML inside a text file stays literal
text (the UI escapes it). How many characters a request may have is the limits' rule (`limits.max_chars_for`).
"""

from __future__ import annotations

import bisect
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from longqa_core.document_limits import DEFAULT_MAX_PAGES, DEFAULT_MAX_READ_S, ReadLimits
from longqa_core.errors import DocumentError
from longqa_core.html_files import read_html_file
from longqa_core.pdf_files import read_pdf_file
from longqa_core.text_files import Heading, clean_text, markdown_headings, read_text_file

DEFAULT_MAX_FILE_BYTES = 50 * 1024 * 1024
SUPPORTED_EXTENSIONS = (".txt", ".md", ".pdf", ".html", ".htm")

_MB = 1024 * 1024


@dataclass(frozen=True)
class Document:
    """A document's name and text, and what its reader kept of its places: where each PDF page starts, where the
    headings of an HTML page or Markdown file stand, and whether its lines are the file's own (text and
    Markdown files, pasted text). The places do not take part in comparisons: the text is the document."""

    name: str
    text: str = field(repr=False)  # can be a million characters: keep it out of reprs and test reports
    page_starts: tuple[int, ...] = field(default=(), repr=False, compare=False)  # a PDF's, in characters
    headings: tuple[Heading, ...] = field(default=(), repr=False, compare=False)  # in order of `start_char`
    has_lines: bool = field(default=True, repr=False, compare=False)

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
    line = document.text.count("\n", 0, start_char) + 1 if document.has_lines else None
    return Location(document.name, start_char, end_char, page, heading, line)


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


def read_document(
    source: str | os.PathLike | bytes,
    name: str | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_FILE_BYTES,
    max_chars: int | None = None,
    max_pages: int = DEFAULT_MAX_PAGES,
    max_read_s: float | None = DEFAULT_MAX_READ_S,
    read_began: float | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_wait: Callable[[int], None] | None = None,
) -> Document:
    """Read a path, or raw bytes whose file `name` picks the reader; raise DocumentError on unusable input.

    Limits, each refusal naming the limit and the measured size: `max_bytes` of file, `max_chars` characters of
    text (None: no cap; a PDF stops extracting as soon as it passes), `max_pages` pages of a PDF (checked before
    extracting), and `max_read_s` seconds of extraction (None: no limit), counted from `read_began` (a
    `time.perf_counter()` value) when given, so that one request's documents can share one time budget.
    `should_stop` ends a read that waits for a reader or runs one (Cancelled); `on_wait(ahead)` hears how many
    reads are ahead of it while it waits.
    Messages name the file, never the folder it is in (a server's paths are nobody's business).
    """
    limits = ReadLimits(max_chars, max_pages, max_read_s, read_began, should_stop=should_stop, on_wait=on_wait)
    if isinstance(source, (bytes, bytearray, memoryview)):
        if not name:
            raise DocumentError("An uploaded document needs a file name (such as 'notes.txt') to choose a reader.")
        data = bytes(source)
        extension = _supported_extension(name)
        _check_size(name, len(data), max_bytes)
    else:
        path = Path(source)
        size = _file_size(path, shown_name=name or path.name)
        name = name or path.name
        extension = _supported_extension(name if Path(name).suffix else path.name, shown_name=name)
        _check_size(name, size, max_bytes)
        data = _read_bytes(path, name) if size else b""
    if not data:
        raise DocumentError(f"'{name}' is empty.")
    if limits.is_over_time():  # the documents before it used the request's time budget
        raise limits.time_error(name, "before reading it")
    page_starts, headings = (), ()
    if extension == ".pdf":
        text, page_starts = read_pdf_file(data, name, limits)
    elif extension in (".html", ".htm"):
        text, headings = read_html_file(data, name, limits)
    else:
        text = read_text_file(data, name, limits)
        if extension == ".md":
            headings = markdown_headings(text)
    if not text.strip():
        raise DocumentError(f"'{name}' contains only whitespace, no text.")
    limits.check_chars(name, len(text))
    return Document(name, text, tuple(page_starts), tuple(headings), has_lines=extension in (".txt", ".md"))


def from_text(text: str, name: str = "pasted text", *, max_bytes: int = DEFAULT_MAX_FILE_BYTES,
              max_chars: int | None = None) -> Document:
    """Wrap pasted text as a document, cleaned like a file's text, within the limits an uploaded file has.

    `max_bytes` counts the text's UTF-8 bytes, as if it had been uploaded as a UTF-8 file.
    """
    n_bytes = len(text) if text.isascii() else len(text.encode("utf-8", errors="surrogatepass"))
    _check_size(name, n_bytes, max_bytes, what="size limit")
    text = clean_text(text)
    if not text.strip():
        raise DocumentError(f"'{name}' is empty: paste or upload some text.")
    ReadLimits(max_chars).check_chars(name, len(text))
    return Document(name=name, text=text)


def _supported_extension(name: str, shown_name: str | None = None) -> str:
    """The lower-case extension of `name`, or DocumentError naming the supported ones."""
    extension = Path(name).suffix.lower()
    if extension not in SUPPORTED_EXTENSIONS:
        kind = f"'{extension}' files are" if extension else "files without an extension are"
        raise DocumentError(
            f"'{shown_name or name}' cannot be read: {kind} not supported (use {', '.join(SUPPORTED_EXTENSIONS)})."
        )
    return extension


def _file_size(path: Path, shown_name: str) -> int:
    try:
        info = path.stat()
    except FileNotFoundError:
        raise DocumentError(f"'{shown_name}' was not found.") from None
    except OSError as exc:
        raise DocumentError(f"'{shown_name}' could not be opened ({exc.strerror}).") from None
    if not stat.S_ISREG(info.st_mode):
        raise DocumentError(f"'{shown_name}' is not a regular file.")
    return info.st_size


def _read_bytes(path: Path, name: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise DocumentError(f"'{name}' could not be read ({exc.strerror}).") from None


def _check_size(name: str, n_bytes: int, max_bytes: int, what: str = "file size limit") -> None:
    if n_bytes > max_bytes:
        raise DocumentError(
            f"'{name}' is {_format_mb(n_bytes)} ({n_bytes:,} bytes), over the {_format_mb(max_bytes)} {what}."
        )


def _format_mb(n_bytes: int) -> str:
    n_mb = n_bytes / _MB
    return f"{n_mb:.1f} MB" if n_mb >= 0.1 else f"{n_mb:.4f} MB"

