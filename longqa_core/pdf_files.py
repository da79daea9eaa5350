"""PDF files: their text layer, page by page, with pypdf, and where each page starts in it; extracted in a child
process (`reader_children.READERS`, shared with HTML reading) that the time limit and a cancel stop and whose memory
is capped, stopping as soon as a character, page or time limit is passed; errors a user can act on (damaged,
encrypted, scanned, a decompression bomb).

It does not run OCR, keep layout, or pick readers by extension (`files`).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging

from pypdf import PasswordType, PdfReader
from pypdf.errors import DependencyError, LimitReachedError

from longqa_core.documents import ReadLimits, clean_text
from longqa_core.errors import CharLimitError, DocumentError
from longqa_core.reader_children import OUT_OF_MEMORY_EXIT, READERS, ReaderChildren, read_in_child

MIB = 2**20
# pypdf parses a page's whole content stream into Python objects before its text callbacks run: a 200 KB page that
# inflates to 70 MB of text operators needs about 0.45 GB of memory and its parsing cannot be interrupted, which is
# why it runs in a child. A child's address space may hold the interpreter, pypdf and one stream at pypdf's own
# decompression limit (75 MB: a stream past it is refused by pypdf, with its own message, within 256 MB), and this
# many bytes per byte of the file (a 3,000-page text PDF of 1 MB, or of 9.8 MB uncompressed, reads within its cap).
PDF_BASE_MEMORY_BYTES = 256 * MIB
PDF_MEMORY_PER_BYTE = 32
# The child checks the time limit itself between pages and pypdf's operators, with a message naming the page; the
# parent kills it this much later, for a child stuck inside one step (parsing one page's content stream).
PDF_GRACE_S = 1.0
# The child gets the limits as JSON and writes one line of JSON (where each page starts, or the error that stopped
# it), then the text.
_PDF_WORKER = f"""
import json
from longqa_core.documents import ReadLimits
from longqa_core.errors import CharLimitError, DocumentError
from longqa_core.pdf_files import extract_pdf_text
name, max_chars, max_pages, max_read_s, began = json.loads(args[0])
limits = ReadLimits(max_chars, max_pages, max_read_s, began)
text = ""
try:
    text, page_starts = extract_pdf_text(sys.stdin.buffer.read(), name, limits)
    head = {{"page_starts": page_starts}}
except CharLimitError as exc:
    head = {{"error": str(exc), "n_chars": exc.n_chars, "partial": exc.partial}}
except DocumentError as exc:
    head = {{"error": str(exc)}}
except MemoryError:
    sys.exit({OUT_OF_MEMORY_EXIT})
sys.stdout.buffer.write((json.dumps(head) + "\\n" + text).encode("utf-8"))
"""


def pdf_memory_cap(n_bytes: int, readers: ReaderChildren | None = None) -> int:
    """The address space a child reading a PDF of `n_bytes` may have: in proportion to the file, at most all."""
    return (readers or READERS).memory_cap(PDF_BASE_MEMORY_BYTES, PDF_MEMORY_PER_BYTE, n_bytes)


def read_pdf_file(data: bytes, name: str, limits: ReadLimits) -> tuple[str, list[int]]:
    """The text of every page, pages joined by a blank line, and the character offset where each page starts,
    extracted by `_PDF_WORKER` within the limits, in a turn of `READERS`."""
    cap_bytes = pdf_memory_cap(len(data), READERS)
    # The time limit counts from when reading began in this process: perf_counter is the system's monotonic clock,
    # the same in the child, so the child counts the wait for its turn too.
    request = json.dumps([name, limits.max_chars, limits.max_pages, limits.max_read_s, limits.began])
    stdout = read_in_child(READERS, _PDF_WORKER, data, cap_bytes, name, limits, "extracting its text", kind="PDF",
                           unit="file", args=(request,), grace_s=PDF_GRACE_S)
    head, _, text = stdout.decode("utf-8").partition("\n")
    parts = json.loads(head)
    if "n_chars" in parts:
        raise CharLimitError(parts["error"], n_chars=parts["n_chars"], partial=parts["partial"])
    if "error" in parts:
        raise DocumentError(parts["error"])
    return text, parts["page_starts"]


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


def extract_pdf_text(data: bytes, name: str, limits: ReadLimits) -> tuple[str, list[int]]:
    """`read_pdf_file`'s text and page starts, extracted in this process: what its child runs."""
    with _quiet_pypdf():
        reader = _open_pdf(data, name)
        try:
            n_pages = len(reader.pages)
        except LimitReachedError as exc:
            raise _pypdf_limit_error(name, exc) from exc
        except MemoryError:
            raise
        except Exception as exc:  # pypdf raises many exception types on damaged page trees
            raise DocumentError(f"'{name}' could not be read as a PDF (the file may be damaged).") from exc
        if not n_pages:
            raise DocumentError(f"'{name}' is a PDF without pages.")
        if n_pages > limits.max_pages:
            raise DocumentError(f"'{name}' has {n_pages:,} pages, over the limit of {limits.max_pages:,} pages.")
        pages = [clean_text(page) for page in _extract_pages(reader, n_pages, name, limits)]
    text = "\n\n".join(pages)
    if not text.strip():
        raise DocumentError(
            f"'{name}': no text found (scanned PDF? Its {n_pages} page(s) have no text layer; run OCR on it first)."
        )
    page_starts, start = [], 0
    for page in pages:
        page_starts.append(start)
        start += len(page) + 2
    return text, page_starts


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
        try:
            check_time()  # inside: between pages, as between a page's operators, the time error names the page
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
        except MemoryError:
            raise
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
    except MemoryError:
        raise
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
