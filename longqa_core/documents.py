"""Reading user documents (.txt, .md, .pdf, .html) into exact, cleaned text, with errors a user can act on.

It decides encodings and extracts text within size, character, page and time limits; it does not split, tokenize or
render anything: answer offsets point into `Document.text`, and Markdown or HTML inside a text file stays literal
text (the UI escapes it). How many characters a request may have is the limits' rule (`limits.max_chars_for`).
"""

from __future__ import annotations

import codecs
import contextlib
import io
import logging
import os
import re
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import charset_normalizer
from pypdf import PasswordType, PdfReader
from pypdf.errors import DependencyError, LimitReachedError

from longqa_core.errors import CharLimitError, DocumentError

DEFAULT_MAX_FILE_BYTES = 50 * 1024 * 1024
# A book of 5,000 pages holds far more text than the default token limit lets through (about 3,000 pages of
# prose); more pages than that is a file built to make extraction slow.
DEFAULT_MAX_PAGES = 5_000
# Extracting one document, or all of one request's documents together, may take this long: enough for a genuine
# book, not for a PDF whose pages share one huge content stream (docs/serving.json has what that costs).
DEFAULT_MAX_READ_S = 30.0
SUPPORTED_EXTENSIONS = (".txt", ".md", ".pdf", ".html", ".htm")

_MB = 1024 * 1024
# Random bytes decoded as cp1252 are about 12% control characters and real text about 0%, so "mostly
# non-printable" has to mean a share well below one half to catch binaries that happen to hold no NUL byte.
_BINARY_CONTROL_SHARE = 0.05
_NON_PRINTABLE = re.compile(r"[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f-\x9f\ufffd]")  # ESC left out: colour codes in logs
_UTF16_NUL_SHARE = 0.4  # UTF-16 of Latin-script text has a NUL in nearly every other byte

_BOM_ENCODINGS = (  # UTF-32 first: its little-endian BOM starts with the UTF-16 one
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_UTF8_MULTIBYTE = re.compile(
    rb"[\xc2-\xdf][\x80-\xbf]"
    rb"|\xe0[\xa0-\xbf][\x80-\xbf]|[\xe1-\xef][\x80-\xbf]{2}"
    rb"|\xf0[\x90-\xbf][\x80-\xbf]{2}|[\xf1-\xf3][\x80-\xbf]{3}|\xf4[\x80-\x8f][\x80-\xbf]{2}"
)
_ASCII_BYTES = bytes(range(128))

_LINE_BREAKS = re.compile(r"\r\n?|[\v\f\x85]")
# Bidirectional embeddings, overrides and isolates (U+202A-E, U+2066-9) reorder what a reader sees without changing
# what the model reads: a question or document could show one thing and mean another ("Trojan Source").
_CONTROL_AND_ZERO_WIDTH = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200d\u2060\ufeff\u202a-\u202e\u2066-\u2069]"
)


@dataclass(frozen=True)
class Document:
    name: str
    text: str = field(repr=False)  # can be a million characters: keep it out of reprs and test reports

    @property
    def n_chars(self) -> int:
        return len(self.text)


class UnknownEncodingError(ValueError):
    """`decode_text` found no text encoding that fits the bytes with confidence."""


def read_document(
    source: str | os.PathLike | bytes,
    name: str | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_FILE_BYTES,
    max_chars: int | None = None,
    max_pages: int = DEFAULT_MAX_PAGES,
    max_read_s: float | None = DEFAULT_MAX_READ_S,
    read_began: float | None = None,
) -> Document:
    """Read a path, or raw bytes whose file `name` picks the reader; raise DocumentError on unusable input.

    Limits, each refusal naming the limit and the measured size: `max_bytes` of file, `max_chars` characters of
    text (None: no cap; a PDF stops extracting as soon as it passes), `max_pages` pages of a PDF (checked before
    extracting), and `max_read_s` seconds of extraction (None: no limit), counted from `read_began` (a
    `time.perf_counter()` value) when given, so that one request's documents can share one time budget.
    Messages name the file, never the folder it is in (a server's paths are nobody's business).
    """
    limits = _ReadLimits(max_chars, max_pages, max_read_s, read_began)
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
    text = _READERS[extension](data, name, limits)
    if not text.strip():
        raise DocumentError(f"'{name}' contains only whitespace, no text.")
    limits.check_chars(name, len(text))
    return Document(name=name, text=text)


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
    _ReadLimits(max_chars).check_chars(name, len(text))
    return Document(name=name, text=text)


class _ReadLimits:
    """One document's reading limits, the time limit counted from when reading began."""

    def __init__(self, max_chars: int | None = None, max_pages: int = DEFAULT_MAX_PAGES,
                 max_read_s: float | None = None, began: float | None = None):
        self.max_chars = max_chars
        self.max_pages = max_pages
        self.max_read_s = max_read_s
        self.began = time.perf_counter() if began is None else began

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


def clean_text(text: str) -> str:
    """Normalise line breaks to "\\n"; drop control characters (except tab), zero-width characters and
    bidirectional overrides and isolates."""
    # Vertical tab, form feed and NEL separate lines (form feeds end pages in license texts): removing them
    # would glue two words together, so they become line breaks like CR does.
    text = _LINE_BREAKS.sub("\n", text)
    return _CONTROL_AND_ZERO_WIDTH.sub("", text)


def decode_text(data: bytes, declared_encoding: str | None = None) -> str:
    """Decode bytes of unknown encoding; UnknownEncodingError when no encoding fits them with confidence.

    In order: a BOM; UTF-16 by its NULs; UTF-8 (valid UTF-8 with non-ASCII bytes is UTF-8 whatever a page
    declares: a legacy-encoded paragraph is practically never valid UTF-8, while pages saved as UTF-8 often keep
    a stale declaration); the `declared_encoding` (an HTML page's charset label) where it decodes the bytes;
    UTF-8 with stray latin-1 bytes; then charset-normalizer's guess, where cp1252 (latin-1) wins whenever it
    fits, because Western text is what a guess on short input gets wrong most often.
    """
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]  # then as UTF-8 below: a file with a BOM can still hold stray latin-1
        declared_encoding = None
    else:
        for bom, encoding in _BOM_ENCODINGS:
            if data.startswith(bom):
                return data[len(bom) :].decode(encoding, errors="replace")
        utf16_text = _decode_utf16_without_bom(data)
        if utf16_text is not None:
            return utf16_text
    try:
        text = data.decode("utf-8")
        if declared_encoding is None or not data.isascii():
            return text
    except UnicodeDecodeError:
        pass
    if declared_encoding is not None:
        declared_text = _decode_declared(data, declared_encoding)
        if declared_text is not None:
            return declared_text
    if _is_mostly_utf8(data):
        return data.decode("utf-8", errors=_CP1252_FALLBACK)
    return _decode_detected(data)


def _decode_declared(data: bytes, label: str) -> str | None:
    """The text in the encoding an HTML page names, or None when the label is unknown or does not decode it."""
    encoding = _codec_for_label(label)
    if encoding is None:
        return None
    if encoding == "cp1252":
        return _decode_cp1252(data)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError:
        return None


# Labels whose meaning on the web (the WHATWG Encoding standard) is a superset of Python's codec of that name.
_WEB_LABELS = {
    **dict.fromkeys(["iso-8859-1", "iso8859-1", "latin1", "l1", "ascii", "us-ascii", "windows-1252"], "cp1252"),
    **dict.fromkeys(["gb2312", "gbk", "x-gbk", "chinese", "csgb2312", "gb_2312-80"], "gb18030"),
    **dict.fromkeys(["shift_jis", "shift-jis", "sjis", "x-sjis", "ms_kanji", "csshiftjis", "windows-31j"], "cp932"),
    **dict.fromkeys(["euc-kr", "ks_c_5601-1987", "csksc56011987"], "cp949"),
    **dict.fromkeys(["iso-8859-9", "latin5"], "cp1254"),
    **dict.fromkeys(["tis-620", "iso-8859-11"], "cp874"),
    "big5": "big5hkscs",
    # A page that can be prescanned for its meta tag is not UTF-16: the standard reads such a label as UTF-8.
    **dict.fromkeys(["utf-16", "utf-16le", "utf-16be"], "utf-8"),
}


def _codec_for_label(label: str) -> str | None:
    label = label.strip().lower()
    try:
        return codecs.lookup(_WEB_LABELS.get(label, label)).name
    except LookupError:
        return None


_WESTERN_ENCODINGS = frozenset({"cp1252", "latin_1", "iso8859_15"})
# Fewer non-ASCII bytes than this (four CJK or eight Cyrillic letters) is too little evidence for any guess but
# the Western default: on "caf\xe9 \x81" the detector's candidates are cp1125, cp1251 and the like.
_MIN_NON_ASCII_TO_GUESS = 8


def _decode_detected(data: bytes) -> str:
    """charset-normalizer's guess, cp1252 first whenever it fits; UnknownEncodingError when nothing fits.

    UTF-16 and UTF-32 guesses are ignored: their BOM or NUL pattern was already checked, and on short input the
    detector proposes them for bytes that are nothing of the kind.
    """
    matches = [match for match in charset_normalizer.from_bytes(data)
               if not match.encoding.startswith(("utf_16", "utf_32"))]
    if not matches:
        raise UnknownEncodingError("no text encoding fits these bytes with confidence")
    n_non_ascii = len(data) - len(data.translate(None, bytes(range(128, 256))))
    if n_non_ascii < _MIN_NON_ASCII_TO_GUESS or any(
        _WESTERN_ENCODINGS.intersection(match.could_be_from_charset) for match in matches
    ):
        return _decode_cp1252(data)
    # The detector checks samples of a large file, not every byte: a bad byte further on becomes U+FFFD, which
    # the binary check counts.
    return data.decode(matches[0].encoding, errors="replace")


def _decode_utf16_without_bom(data: bytes) -> str | None:
    """The text if `data` is clearly UTF-16 (NULs in one byte position of nearly every pair), else None."""
    if len(data) < 4 or len(data) % 2:
        return None
    n_pairs = len(data) // 2
    even_nul_share = data[0::2].count(0) / n_pairs
    odd_nul_share = data[1::2].count(0) / n_pairs
    if odd_nul_share >= _UTF16_NUL_SHARE and even_nul_share < 0.05:
        encoding = "utf-16-le"
    elif even_nul_share >= _UTF16_NUL_SHARE and odd_nul_share < 0.05:
        encoding = "utf-16-be"
    else:
        return None
    try:
        return data.decode(encoding)
    except UnicodeDecodeError:
        return None


def _is_mostly_utf8(data: bytes) -> bool:
    """Whether valid UTF-8 characters outnumber the stray bytes that are not UTF-8 (a "mixed encoding" file)."""
    without_utf8, n_utf8_chars = _UTF8_MULTIBYTE.subn(b"", data)
    n_stray_bytes = len(without_utf8.translate(None, _ASCII_BYTES))
    return n_utf8_chars >= max(n_stray_bytes, 1)


def _decode_cp1252(data: bytes) -> str:
    """cp1252 where it decodes; its five undefined bytes fall back to latin-1."""
    return data.decode("cp1252", errors=_LATIN1_FALLBACK)


def _latin1_fallback(error: UnicodeDecodeError) -> tuple[str, int]:
    return error.object[error.start : error.end].decode("latin-1"), error.end


def _cp1252_fallback(error: UnicodeDecodeError) -> tuple[str, int]:
    # Per invalid byte rather than per line: UTF-8 on the same line as a latin-1 byte stays right too.
    return _decode_cp1252(error.object[error.start : error.end]), error.end


_LATIN1_FALLBACK = "longqa-latin1-fallback"
_CP1252_FALLBACK = "longqa-cp1252-fallback"
codecs.register_error(_LATIN1_FALLBACK, _latin1_fallback)
codecs.register_error(_CP1252_FALLBACK, _cp1252_fallback)


def _is_binary_text(text: str) -> bool:
    """Whether decoded text is really a binary file: NUL characters, or too many control characters."""
    if not text:
        return False
    if "\x00" in text:
        return True
    n_non_printable = len(text) - len(_NON_PRINTABLE.sub("", text))
    return n_non_printable / len(text) > _BINARY_CONTROL_SHARE


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


def _read_plain_text(data: bytes, name: str, limits: _ReadLimits) -> str:
    # No character can take less than a byte, so the character cap can be passed only by more bytes than that.
    text = clean_text(_decode_non_binary(data, name))
    limits.check_chars(name, len(text))
    return text


def _read_html(data: bytes, name: str, limits: _ReadLimits) -> str:
    """The page's title, then its visible text: block elements on their own lines, paragraphs and headings
    followed by a blank line, whitespace collapsed as a browser does outside `<pre>`."""
    source = _decode_non_binary(data, name, declared_encoding=_declared_charset(data))
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


def _extract_html_text(source: str, name: str, limits: _ReadLimits) -> tuple[str, str]:
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


def _decode_non_binary(data: bytes, name: str, declared_encoding: str | None = None) -> str:
    try:
        text = decode_text(data, declared_encoding)
    except UnknownEncodingError:
        if _is_binary_text(_decode_cp1252(data)):
            raise DocumentError(f"'{name}' looks like a binary file, not text.") from None
        raise DocumentError(
            f"'{name}' could not be read: its text encoding is not UTF-8 and no other encoding fits it with "
            f"confidence. Save it as UTF-8 and upload it again."
        ) from None
    if _is_binary_text(text):
        raise DocumentError(f"'{name}' looks like a binary file, not text.")
    return text


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


def _read_pdf(data: bytes, name: str, limits: _ReadLimits) -> str:
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


def _extract_pages(reader: PdfReader, n_pages: int, name: str, limits: _ReadLimits) -> list[str]:
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


_READERS = {
    ".txt": _read_plain_text,
    ".md": _read_plain_text,
    ".pdf": _read_pdf,
    ".html": _read_html,
    ".htm": _read_html,
}
