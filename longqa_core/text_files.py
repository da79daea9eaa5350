"""Plain text files (.txt, .md): deciding their encoding, refusing binaries, and a Markdown file's headings; their
text then goes through `documents.clean_text`, as every reader's does, and flows as a person reads it
(`documents.flowing_text`: wrapped lines joined, pages where form feeds end them, running headers left out).

Encodings are decided from a BOM, UTF-16 NULs, UTF-8 validity, a declared label, then charset-normalizer's guess.
It does not pick a reader by extension or check file sizes (`files`), and parses no markup: Markdown stays
literal text (the UI escapes it; only its headings are found, to say where an answer stands); HTML pages are
`html_files`' job, which decodes them with `decode_non_binary`.
"""

from __future__ import annotations

import bisect
import codecs
import re

import charset_normalizer

from longqa_core.documents import Heading, ReadLimits, flowing_text
from longqa_core.errors import DocumentError
from longqa_core.text_flow import LineMap

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

class UnknownEncodingError(ValueError):
    """`decode_text` found no text encoding that fits the bytes with confidence."""


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


def decode_non_binary(data: bytes, name: str, declared_encoding: str | None = None) -> str:
    """`decode_text`'s text, or a DocumentError a user can act on for a binary file or an encoding nothing fits."""
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


def read_text_file(data: bytes, name: str, limits: ReadLimits) -> tuple[str, tuple[int, ...], LineMap | None]:
    """A .txt or .md file's decoded, cleaned, flowing text (`documents.flowing_text`: wraps joined, running lines of
    its pages left out), within the character limit, where its pages start where form feeds end them, and where each
    of its lines starts in that text (None: where they stand in the file)."""
    text = decode_non_binary(data, name)
    # flowing never lengthens a text but by a line break a page: a text past the cap so is refused before it flows
    limits.check_chars(name, len(text) - text.count("\f"))
    flow = flowing_text(text)
    limits.check_chars(name, len(flow.text))
    return flow.text, flow.page_starts, flow.lines


# ATX headings ("## Results", closing hashes dropped) and setext ones (a line underlined with "=" or "-").
_ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$", re.MULTILINE)
_SETEXT_HEADING = re.compile(r"^ {0,3}(\S[^\n]*)\n {0,3}(=+|-+)[ \t]*$", re.MULTILINE)
_CODE_FENCE = re.compile(r"^ {0,3}(```|~~~)", re.MULTILINE)


def markdown_headings(text: str) -> list[Heading]:
    """A Markdown text's headings in order, outside fenced code blocks."""
    fences = [match.start() for match in _CODE_FENCE.finditer(text)]
    found = [Heading(m.start(2), len(m.group(1)), m.group(2)) for m in _ATX_HEADING.finditer(text) if m.group(2)]
    found += [Heading(m.start(1), 1 if m.group(2)[0] == "=" else 2, m.group(1).strip())
              for m in _SETEXT_HEADING.finditer(text) if not m.group(1).lstrip().startswith(("#", "-", "*", ">"))]
    return sorted(h for h in found if not _is_fenced(h.start_char, fences))


def _is_fenced(position: int, fences: list[int]) -> bool:
    """Whether `position` falls inside a fenced code block: after an odd number of fence lines."""
    return bisect.bisect_left(fences, position) % 2 == 1
