"""Reading a user's file (.txt, .md, .pdf, .html) into a `Document`, with errors a user can act on: its size and
extension checked, and its bytes handed to the reader of its kind (`text_files`, `pdf_files`, `html_files`) within
one document's `ReadLimits`. What a document is, and pasted text, are `documents`' job.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Callable

from longqa_core.documents import (DEFAULT_MAX_FILE_BYTES, DEFAULT_MAX_PAGES, DEFAULT_MAX_READ_S, Document, ReadLimits,
                                   check_size)
from longqa_core.errors import DocumentError
from longqa_core.html_files import read_html_file
from longqa_core.pdf_files import read_pdf_file
from longqa_core.text_files import markdown_headings, read_text_file

SUPPORTED_EXTENSIONS = (".txt", ".md", ".pdf", ".html", ".htm")


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
        check_size(name, len(data), max_bytes)
    else:
        path = Path(source)
        size = _file_size(path, shown_name=name or path.name)
        name = name or path.name
        extension = _supported_extension(name if Path(name).suffix else path.name, shown_name=name)
        check_size(name, size, max_bytes)
        data = _read_bytes(path, name) if size else b""
    if not data:
        raise DocumentError(f"'{name}' is empty.")
    if limits.is_over_time():  # the documents before it used the request's time budget
        raise limits.time_error(name, "before reading it")
    page_starts, headings, lines, places = (), (), None, None
    if extension == ".pdf":
        text, page_starts, headings, places = read_pdf_file(data, name, limits)
    elif extension in (".html", ".htm"):
        text, headings = read_html_file(data, name, limits)
    else:
        text, page_starts, lines = read_text_file(data, name, limits)
        if extension == ".md":
            headings = markdown_headings(text)
    if not text.strip():
        raise DocumentError(f"'{name}' contains only whitespace, no text.")
    limits.check_chars(name, len(text))
    return Document(name, text, tuple(page_starts), tuple(headings), has_lines=extension in (".txt", ".md"),
                    lines=lines, places=places, source=None if isinstance(source, (bytes, bytearray, memoryview))
                    else os.fspath(source))


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
