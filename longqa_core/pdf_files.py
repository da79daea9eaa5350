"""PDF files: their text layer as a person reads it, with where each page starts in it and the headings; the pieces of
text and where they stand come from PDFium (`pypdfium2`), `pdf_layout` puts them in reading order and `text_flow`
joins them. Extracted in a child process (`reader_children.READERS`, shared with HTML reading) that the time limit
and a cancel stop and whose memory is capped, stopping as soon as a character, page or time limit is passed; errors
a user can act on (damaged, encrypted, scanned, too large to read).

It does not run OCR or pick readers by extension (`files`).
"""

from __future__ import annotations

import ctypes
import json
import math
from typing import NamedTuple

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

from longqa_core.documents import Heading, ReadLimits, clean_text
from longqa_core.errors import CharLimitError, DocumentError
from longqa_core.pdf_layout import PdfPlaces, Segment, baseline_pieces, placed_lines
from longqa_core.reader_children import OUT_OF_MEMORY_EXIT, READERS, ReaderChildren, read_in_child
from longqa_core.text_flow import flow_lines

MIB = 2**20
# PDFium parses a page's whole content stream before its text can be read: a 200 KB page that inflates to 70 MB of
# text operators needs hundreds of MB and its parsing cannot be interrupted, which is why it runs in a child. A
# child's address space may hold the interpreter, PDFium and a page's objects, and this many bytes per byte of the
# file (a 3,000-page text PDF of 1 MB, or of 9.8 MB uncompressed, reads within its cap).
PDF_BASE_MEMORY_BYTES = 256 * MIB
PDF_MEMORY_PER_BYTE = 32
# The child checks the time limit itself between pages and a page's pieces of text, with a message naming the page; the
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
    text, page_starts, headings, places = extract_pdf_text(sys.stdin.buffer.read(), name, limits)
    head = {{"page_starts": page_starts, "headings": headings, "places": places.to_json()}}
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


class PdfText(NamedTuple):
    """What reading a PDF keeps: its flowing text, the character offset where each page starts, the headings, and
    where each line was drawn (`PdfPlaces`: what marks an answer on its page)."""

    text: str
    page_starts: list[int]
    headings: list
    places: PdfPlaces


def read_pdf_file(data: bytes, name: str, limits: ReadLimits) -> PdfText:
    """The flowing text of every page (`extract_pdf_text`), extracted by `_PDF_WORKER` within the limits, in a turn
    of `READERS`."""
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
    return PdfText(text, parts["page_starts"], [Heading(*heading) for heading in parts["headings"]],
                   PdfPlaces.from_json(parts["places"]))


class _StopReading(Exception):
    """Raised between a page's pieces of text when a limit is passed in the middle of the page."""


def extract_pdf_text(data: bytes, name: str, limits: ReadLimits) -> PdfText:
    """`read_pdf_file`'s text, page starts, headings (offset, level, title) and places, extracted in this process:
    what its child runs."""
    document = open_pdf(data, name)
    try:
        n_pages = len(document)
        if not n_pages:
            raise DocumentError(f"'{name}' is a PDF without pages.")
        if n_pages > limits.max_pages:
            raise DocumentError(f"'{name}' has {n_pages:,} pages, over the limit of {limits.max_pages:,} pages.")
        pages, turns = _extract_pages(document, n_pages, name, limits)
    finally:
        document.close()
    lines, places = placed_lines(pages)
    flow = flow_lines(lines, n_pages)
    if not flow.text.strip():
        raise DocumentError(
            f"'{name}': no text found (scanned PDF? Its {n_pages} page(s) have no text layer; run OCR on it first)."
        )
    return PdfText(flow.text, list(flow.page_starts or (0,)), [list(heading) for heading in flow.headings],
                   PdfPlaces.of(flow.lines, places, lines, turns))


def _extract_pages(document: pdfium.PdfDocument, n_pages: int, name: str,
                   limits: ReadLimits) -> tuple[list[list[Segment]], list[int]]:
    """Each page's pieces of text, and the quarter turns that made each upright (`page_segments`); stops as soon as
    the characters read pass `max_chars` or the time passes `max_read_s`, checked between pages and between the
    pieces of one page."""
    pages: list[list[Segment]] = []
    turns: list[int] = []
    n_chars = 0  # the pieces read so far, each counted with the break after it

    def count(segment: Segment) -> None:
        nonlocal n_chars
        n_chars += len(segment.text) + 1
        if limits.is_over_chars(n_chars) or limits.is_over_time():
            raise _StopReading

    def check_time() -> None:
        if limits.is_over_time():
            raise _StopReading

    def count_page(n_page_chars: int) -> None:
        nonlocal n_chars
        # PDFium counts a page's characters once its text is indexed: a page past the limit goes unread
        if limits.is_over_chars(n_chars + n_page_chars):
            n_chars += n_page_chars
            raise _StopReading

    for number in range(n_pages):
        try:
            if limits.is_over_time():
                raise _StopReading
            segments, turn = page_segments(document, number, count, count_page, check_time)
            pages.append(baseline_pieces(segments))
            turns.append(turn)
        except _StopReading:
            progress = f"{number + 1:,} of {n_pages:,} pages"
            if limits.is_over_chars(n_chars):
                raise CharLimitError(f"'{name}': read {n_chars:,} characters from {progress}, over the limit of "
                                     f"{limits.max_chars:,} characters.", n_chars=n_chars,
                                     partial=number + 1 < n_pages) from None
            raise limits.time_error(name, f"on page {progress}, {n_chars:,} characters read") from None
        except MemoryError:
            raise
        except pdfium.PdfiumError as exc:
            raise DocumentError(f"'{name}' could not be read as a PDF (the file may be damaged).") from exc
    return pages, turns


_MAX_FORM_DEPTH = 8  # forms inside forms: deeper ones are a file built to be slow, not text
# PDFium finds a text object's text by searching the page's characters: past this many objects on a page (one a
# glyph, as some writers draw them), one pass over the characters gives every object its text instead.
_MANY_OBJECTS = 400


def page_segments(document: pdfium.PdfDocument, number: int, heard=lambda segment: None,
                  heard_chars=lambda n_chars: None, tick=lambda: None) -> tuple[list[Segment], int]:
    """The pieces of text of page `number` (0-based), each with its box in page points and font size (its text
    matrix's scale included), in the order the page draws them, text inside forms (XObjects) included, turned so
    that the page's text reads left to right (a landscape page drawn sideways: `upright`), and the quarter turns
    that took; `heard_chars` hears how many characters the page has before they are read, `heard` each piece as it
    is read, `tick` now and then while a page's characters are gone through one by one (any of them may raise to
    stop)."""
    page = document[number]
    textpage = page.get_textpage()
    try:
        heard_chars(pdfium_c.FPDFText_CountChars(textpage))
        objects = _text_objects(page)
        texts = _texts_by_character(textpage, tick) if len(objects) > _MANY_OBJECTS else None
        segments, turns = [], []
        left, bottom, right, top = (ctypes.c_float() for _ in range(4))
        size, matrix = ctypes.c_float(), pdfium_c.FS_MATRIX()
        for obj, transform in objects:
            text = texts.get(ctypes.cast(obj, ctypes.c_void_p).value, "") if texts is not None else \
                _object_text(obj, textpage)
            if not text.strip() or not pdfium_c.FPDFPageObj_GetBounds(obj, left, bottom, right, top):
                continue
            x0, y0, x1, y1 = _transformed(transform, left.value, bottom.value, right.value, top.value)
            pdfium_c.FPDFPageObj_GetMatrix(obj, matrix)
            own = _compose((matrix.a, matrix.b, matrix.c, matrix.d, 0.0, 0.0), transform)
            font = size.value if pdfium_c.FPDFTextObj_GetFontSize(obj, size) and size.value > 0 else 0.0
            scale = math.hypot(own[2], own[3])
            segment = Segment(clean_text(text), x0, y0, x1, y1, font * scale if font * scale >= 1 else
                              max(min(x1 - x0, y1 - y0), 1.0))
            heard(segment)
            segments.append(segment)
            turns.append(round(math.atan2(own[1], own[0]) / (math.pi / 2)) % 4)
    finally:
        textpage.close()
        page.close()
    turn = upright_turn(segments, turns)
    return [Segment(s.text, *upright(turn, (s.x0, s.y0, s.x1, s.y1)), s.size) for s in segments], turn


def _text_objects(page) -> list[tuple]:
    """The page's text objects, with the matrix of the forms they are drawn in (None: the page's own)."""
    found: list[tuple] = []
    matrix = pdfium_c.FS_MATRIX()

    def walk(count: int, get, transform, depth: int) -> None:
        for index in range(count):
            obj = get(index)
            kind = pdfium_c.FPDFPageObj_GetType(obj)
            if kind == pdfium_c.FPDF_PAGEOBJ_TEXT:
                found.append((obj, transform))
            elif kind == pdfium_c.FPDF_PAGEOBJ_FORM and depth < _MAX_FORM_DEPTH:
                pdfium_c.FPDFPageObj_GetMatrix(obj, matrix)
                inner = (matrix.a, matrix.b, matrix.c, matrix.d, matrix.e, matrix.f)
                walk(pdfium_c.FPDFFormObj_CountObjects(obj),
                     lambda i, form=obj: pdfium_c.FPDFFormObj_GetObject(form, i), _compose(inner, transform), depth + 1)

    walk(pdfium_c.FPDFPage_CountObjects(page), lambda i: pdfium_c.FPDFPage_GetObject(page, i), None, 0)
    return found


def _texts_by_character(textpage, tick) -> dict[int, str]:
    """Every text object's text (keyed by its address), from one pass over the page's characters (`tick` called
    every 4,096); the characters PDFium adds between objects (spaces, line breaks) belong to none."""
    chars: dict[int, list[str]] = {}
    for index in range(pdfium_c.FPDFText_CountChars(textpage)):
        if not index % 4096:
            tick()
        obj = pdfium_c.FPDFText_GetTextObject(textpage, index)
        key = ctypes.cast(obj, ctypes.c_void_p).value
        if key:
            chars.setdefault(key, []).append(chr(pdfium_c.FPDFText_GetUnicode(textpage, index) or 0xFFFD))
    return {key: "".join(text).translate(_LINE_END_HYPHENS) for key, text in chars.items()}


def upright_turn(segments: list[Segment], turns: list[int]) -> int:
    """The quarter turns (0-3) to the frame where most of the page's text reads left to right: a page whose text is
    drawn a quarter or half turn round (a landscape table on a portrait page) is turned back."""
    weight = [0, 0, 0, 0]
    for segment, turn in zip(segments, turns):
        weight[turn] += len(segment.text)
    return max(range(4), key=weight.__getitem__) if segments else 0


def upright(turn: int, box: tuple[float, float, float, float]) -> tuple[float, float, float, float]:
    """A box (x0, y0, x1, y1) in the frame `turn` quarter turns upright (`upright_turn`)."""
    x0, y0, x1, y1 = box
    return ((x0, y0, x1, y1), (y0, -x1, y1, -x0), (-x1, -y1, -x0, -y0), (-y1, x0, -y0, x1))[turn]


# PDFium marks a hyphen that ends a line as U+0002 (and some fonts map it to U+FFFE): a hyphen for `text_flow` to
# join or keep, not a control character for `clean_text` to drop.
_LINE_END_HYPHENS = str.maketrans({"\x02": "-", "\ufffe": "-"})


def _object_text(obj, textpage) -> str:
    """A text object's text as PDFium reads it (its font's Unicode map), its line-end hyphen marks as hyphens."""
    n_bytes = pdfium_c.FPDFTextObj_GetText(obj, textpage, None, 0)
    if n_bytes <= 2:
        return ""
    buffer = ctypes.create_string_buffer(n_bytes)
    pdfium_c.FPDFTextObj_GetText(obj, textpage, ctypes.cast(buffer, ctypes.POINTER(pdfium_c.FPDF_WCHAR)), n_bytes)
    return buffer.raw[: n_bytes - 2].decode("utf-16-le", errors="replace").translate(_LINE_END_HYPHENS)


def _compose(inner: tuple, outer: tuple | None) -> tuple:
    """The matrix of `inner` followed by `outer` (PDF's a b c d e f); None is the identity."""
    if outer is None:
        return inner
    a, b, c, d, e, f = inner
    A, B, C, D, E, F = outer
    return (a * A + b * C, a * B + b * D, c * A + d * C, c * B + d * D, e * A + f * C + E, e * B + f * D + F)


def _transformed(transform: tuple | None, x0: float, y0: float, x1: float, y1: float) -> tuple[float, ...]:
    """A box in a form's space as a box in the page's (the bounds of its four corners)."""
    if transform is None:
        return x0, y0, x1, y1
    a, b, c, d, e, f = transform
    xs, ys = [], []
    for x, y in ((x0, y0), (x0, y1), (x1, y0), (x1, y1)):
        xs.append(a * x + c * y + e)
        ys.append(b * x + d * y + f)
    return min(xs), min(ys), max(xs), max(ys)


def open_pdf(data: bytes, name: str) -> pdfium.PdfDocument:
    """The PDF opened with PDFium, which opens files encrypted only against editing (the empty password)."""
    try:
        return pdfium.PdfDocument(data)
    except MemoryError:
        raise
    except pdfium.PdfiumError as exc:
        if getattr(exc, "err_code", None) == pdfium_c.FPDF_ERR_PASSWORD:
            raise DocumentError(
                f"'{name}' is a password-protected PDF: remove the password and upload it again.") from None
        if getattr(exc, "err_code", None) == pdfium_c.FPDF_ERR_SECURITY:
            raise DocumentError(f"'{name}' uses a PDF encryption that cannot be opened here.") from None
        raise DocumentError(f"'{name}' could not be read as a PDF (the file may be damaged or not a PDF).") from exc
