"""PDF files: their text layer, page by page, with pypdf, stopping as soon as a character, page or time limit is
passed, and errors a user can act on (damaged, encrypted, scanned, a decompression bomb).

It does not run OCR, keep layout, or pick readers by extension (`documents`).
"""

from __future__ import annotations

import contextlib
import io
import logging

from pypdf import PasswordType, PdfReader
from pypdf.errors import DependencyError, LimitReachedError

from longqa_core.document_limits import ReadLimits
from longqa_core.errors import CharLimitError, DocumentError
from longqa_core.text_files import clean_text


@contextlib.contextmanager
def _quiet_pypdf():
    """pypdf logs each repair it attempts on a damaged file ("EOF marker not found"): our DocumentError already
    says what a user can act on, and the CLI promises one line on stderr."""
    logger = logging.getLogger("pypdf")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


class _StopReading(Exception):
    """Raised from inside pypdf's text extraction when a limit is passed in the middle of a page."""


def read_pdf_file(data: bytes, name: str, limits: ReadLimits) -> str:
    with _quiet_pypdf():
        reader = _open_pdf(data, name)
        try:
            n_pages = len(reader.pages)
        except LimitReachedError as exc:
            raise _pypdf_limit_error(name, exc) from exc
        except Exception as exc:  # pypdf raises many exception types on damaged page trees
            raise DocumentError(f"'{name}' could not be read as a PDF (the file may be damaged).") from exc
        if not n_pages:
            raise DocumentError(f"'{name}' is a PDF without pages.")
        if n_pages > limits.max_pages:
            raise DocumentError(f"'{name}' has {n_pages:,} pages, over the limit of {limits.max_pages:,} pages.")
        pages = _extract_pages(reader, n_pages, name, limits)
    text = clean_text("\n\n".join(pages))
    if not text.strip():
        raise DocumentError(
            f"'{name}': no text found (scanned PDF? Its {n_pages} page(s) have no text layer; run OCR on it first)."
        )
    return text


def _extract_pages(reader: PdfReader, n_pages: int, name: str, limits: ReadLimits) -> list[str]:
    """Each page's text; stops as soon as the characters read pass `max_chars` or the time passes `max_read_s`,
    checked between pages and, through pypdf's visitor callbacks, between the operators of one page."""
    pages: list[str] = []
    n_chars = 0  # pages before this one (each joined by a blank line) plus this page's text seen so far
    page_chars = 0

    def count_text(text, *_):
        nonlocal page_chars
        page_chars += len(text)
        if limits.is_over_chars(n_chars + page_chars):
            raise _StopReading

    def check_time(*_):
        if limits.is_over_time():
            raise _StopReading

    for number in range(n_pages):
        page_chars = 0
        check_time()
        try:
            page_text = reader.pages[number].extract_text(visitor_text=count_text,
                                                         visitor_operand_before=check_time) or ""
        except _StopReading:
            progress = f"{number + 1:,} of {n_pages:,} pages"
            if limits.is_over_chars(n_chars + page_chars):
                raise CharLimitError(f"'{name}': read {n_chars + page_chars:,} characters from {progress}, over "
                                     f"the limit of {limits.max_chars:,} characters.", n_chars=n_chars + page_chars,
                                     partial=True) from None
            raise limits.time_error(name, f"on page {progress}, {n_chars + page_chars:,} characters read") from None
        except LimitReachedError as exc:
            raise _pypdf_limit_error(name, exc) from exc
        except Exception as exc:  # pypdf raises many exception types on damaged content streams
            raise DocumentError(f"'{name}' could not be read as a PDF (the file may be damaged).") from exc
        pages.append(page_text)
        n_chars += len(page_text) + 2
        if limits.is_over_chars(n_chars - 2):
            raise CharLimitError(f"'{name}': read {n_chars - 2:,} characters from {number + 1:,} of {n_pages:,} "
                                 f"pages, over the limit of {limits.max_chars:,} characters.", n_chars=n_chars - 2,
                                 partial=number + 1 < n_pages)
    return pages


def _pypdf_limit_error(name: str, exc: LimitReachedError) -> DocumentError:
    """pypdf refuses streams that decompress past its limits (a "decompression bomb") and oversized structures."""
    return DocumentError(f"'{name}' was refused: part of it is over one of pypdf's safety limits against files "
                         f"that expand to huge sizes when read ({exc}).")


def _open_pdf(data: bytes, name: str) -> PdfReader:
    try:
        reader = PdfReader(io.BytesIO(data))
        is_encrypted = reader.is_encrypted
    except LimitReachedError as exc:
        raise _pypdf_limit_error(name, exc) from exc
    except Exception as exc:  # pypdf raises many exception types on damaged or non-PDF files
        raise DocumentError(f"'{name}' could not be read as a PDF (the file may be damaged or not a PDF).") from exc
    if is_encrypted and not _decrypt_with_empty_password(reader, name):
        raise DocumentError(f"'{name}' is a password-protected PDF: remove the password and upload it again.")
    return reader


def _decrypt_with_empty_password(reader: PdfReader, name: str) -> bool:
    """Many PDFs are encrypted only against editing and open with the empty password."""
    try:
        return reader.decrypt("") != PasswordType.NOT_DECRYPTED
    except DependencyError:
        raise DocumentError(
            f"'{name}' is an AES-encrypted PDF, which needs the 'cryptography' package to open."
        ) from None
    except Exception:  # a damaged encryption dictionary: as good as a password we do not have
        return False
