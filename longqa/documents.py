"""Reading user documents (.txt, .md, .pdf, .html) into exact, cleaned text, with errors a user can act on.

It decides encodings and extracts text; it does not split, tokenize or render anything: answer offsets point into
`Document.text`, and Markdown or HTML inside a text file stays literal text (the UI escapes it).
"""

from __future__ import annotations

import codecs
import contextlib
import io
import logging
import os
import re
import stat
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from pypdf import PasswordType, PdfReader
from pypdf.errors import DependencyError

from longqa.errors import DocumentError

DEFAULT_MAX_FILE_BYTES = 50 * 1024 * 1024
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
_CONTROL_AND_ZERO_WIDTH = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200d\u2060\ufeff]")


@dataclass(frozen=True)
class Document:
    name: str
    text: str = field(repr=False)  # can be a million characters: keep it out of reprs and test reports

    @property
    def n_chars(self) -> int:
        return len(self.text)


def read_document(
    source: str | os.PathLike | bytes, name: str | None = None, *, max_bytes: int = DEFAULT_MAX_FILE_BYTES
) -> Document:
    """Read a path, or raw bytes whose file `name` picks the reader; raise DocumentError on unusable input."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        if not name:
            raise DocumentError("An uploaded document needs a file name (such as 'notes.txt') to choose a reader.")
        data = bytes(source)
        extension = _supported_extension(name)
        _check_size(name, len(data), max_bytes)
    else:
        path = Path(source)
        size = _file_size(path, shown_name=name or str(path))
        name = name or path.name
        extension = _supported_extension(name if Path(name).suffix else path.name, shown_name=name)
        _check_size(name, size, max_bytes)
        data = _read_bytes(path, name) if size else b""
    if not data:
        raise DocumentError(f"'{name}' is empty.")
    text = _READERS[extension](data, name)
    if not text.strip():
        raise DocumentError(f"'{name}' contains only whitespace, no text.")
    return Document(name=name, text=text)


def from_text(text: str, name: str = "pasted text") -> Document:
    """Wrap pasted text as a document, cleaned like a file's text."""
    text = clean_text(text)
    if not text.strip():
        raise DocumentError(f"'{name}' is empty: paste or upload some text.")
    return Document(name=name, text=text)


def clean_text(text: str) -> str:
    """Normalise line breaks to "\\n" and drop control characters (except tab) and zero-width characters."""
    # Vertical tab, form feed and NEL separate lines (form feeds end pages in license texts): removing them
    # would glue two words together, so they become line breaks like CR does.
    text = _LINE_BREAKS.sub("\n", text)
    return _CONTROL_AND_ZERO_WIDTH.sub("", text)


def decode_text(data: bytes) -> str:
    """Decode bytes of unknown encoding: BOMs first, then UTF-16 by its NULs, UTF-8, mixed, cp1252/latin-1."""
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]  # then as UTF-8 below: a file with a BOM can still hold stray latin-1
    else:
        for bom, encoding in _BOM_ENCODINGS:
            if data.startswith(bom):
                return data[len(bom) :].decode(encoding, errors="replace")
        utf16_text = _decode_utf16_without_bom(data)
        if utf16_text is not None:
            return utf16_text
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    if _is_mostly_utf8(data):
        return data.decode("utf-8", errors=_CP1252_FALLBACK)
    return _decode_cp1252(data)


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


def _check_size(name: str, n_bytes: int, max_bytes: int) -> None:
    if n_bytes > max_bytes:
        raise DocumentError(
            f"'{name}' is {_format_mb(n_bytes)} ({n_bytes:,} bytes), over the {_format_mb(max_bytes)} file size limit."
        )


def _format_mb(n_bytes: int) -> str:
    n_mb = n_bytes / _MB
    return f"{n_mb:.1f} MB" if n_mb >= 0.1 else f"{n_mb:.4f} MB"


def _read_plain_text(data: bytes, name: str) -> str:
    return clean_text(_decode_non_binary(data, name))


def _read_html(data: bytes, name: str) -> str:
    parser = _VisibleTextParser()
    parser.feed(_decode_non_binary(data, name))
    parser.close()
    return clean_text(parser.text())


def _decode_non_binary(data: bytes, name: str) -> str:
    text = decode_text(data)
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


def _read_pdf(data: bytes, name: str) -> str:
    with _quiet_pypdf():
        reader = _open_pdf(data, name)
        try:
            pages = [page.extract_text() or "" for page in reader.pages]
        except Exception as exc:  # pypdf raises many exception types on damaged content streams
            raise DocumentError(f"'{name}' could not be read as a PDF (the file may be damaged).") from exc
    if not pages:
        raise DocumentError(f"'{name}' is a PDF without pages.")
    text = clean_text("\n\n".join(pages))
    if not text.strip():
        raise DocumentError(
            f"'{name}': no text found (scanned PDF? Its {len(pages)} page(s) have no text layer; run OCR on it first)."
        )
    return text


def _open_pdf(data: bytes, name: str) -> PdfReader:
    try:
        reader = PdfReader(io.BytesIO(data))
        is_encrypted = reader.is_encrypted
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


_SKIPPED_TAGS = frozenset({"script", "style", "noscript", "template"})
_BLOCK_TAGS = frozenset(
    {
        "address", "article", "aside", "blockquote", "caption", "dd", "details", "div", "dl", "dt", "fieldset",
        "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li",
        "main", "nav", "ol", "p", "pre", "section", "summary", "table", "title", "tr", "ul",
    }
)  # fmt: skip
_HTML_WHITESPACE = re.compile(r"[ \t\n\r\f]+")  # HTML's own whitespace: a non-breaking space is kept


class _VisibleTextParser(HTMLParser):
    """Collects the text a browser shows: whitespace collapsed as in HTML, block elements on their own lines."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self._parts: list[str] = []
        self._skip_depth = 0
        self._pre_depth = 0

    def text(self) -> str:
        text = "".join(self._parts).strip(" \n")
        return re.sub(r"\n{3,}", "\n\n", text)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in _SKIPPED_TAGS:
            self._skip_depth += 1
        elif self._skip_depth:
            return
        elif tag == "br":
            self._trim_trailing_space()
            self._parts.append("\n")
        elif tag in _BLOCK_TAGS:
            self._break_line()
        if tag == "pre":
            self._pre_depth += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED_TAGS:
            self._skip_depth = max(self._skip_depth - 1, 0)
        elif not self._skip_depth and tag in _BLOCK_TAGS:
            self._break_line()
        if tag == "pre":
            self._pre_depth = max(self._pre_depth - 1, 0)

    def handle_data(self, data: str) -> None:
        if self._skip_depth:
            return
        if self._pre_depth:
            self._parts.append(data)
            return
        data = _HTML_WHITESPACE.sub(" ", data)
        if not self._parts or self._parts[-1].endswith((" ", "\n")):
            data = data.lstrip(" ")
        if data:
            self._parts.append(data)

    def _break_line(self) -> None:
        self._trim_trailing_space()
        if self._parts and not self._parts[-1].endswith("\n"):
            self._parts.append("\n")

    def _trim_trailing_space(self) -> None:
        if self._parts and self._parts[-1].endswith(" ") and not self._pre_depth:
            self._parts[-1] = self._parts[-1].rstrip(" ")
            if not self._parts[-1]:
                self._parts.pop()


_READERS = {
    ".txt": _read_plain_text,
    ".md": _read_plain_text,
    ".pdf": _read_pdf,
    ".html": _read_html,
    ".htm": _read_html,
}
