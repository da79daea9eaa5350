"""Where an answer stands on its PDF page, and the page drawn with it marked: the answer's characters found on the
page from the places its reading kept (`pdf_layout.PdfPlaces`: the piece of each line, its box on its page), their
boxes from PDFium's own character positions (`PageMark`, in PDF points), and the page rendered as a PNG with the
marks drawn on it. Both run in the reading children (`reader_children.READERS`), under the same memory cap, time
limit and Stop as reading; a page too large to draw is refused in words.

It does not read the text (`pdf_files`), choose which answers to mark (`answering`) nor show the image (the page).
"""

from __future__ import annotations

import ctypes
import difflib
import io
import json
from dataclasses import dataclass

import pypdfium2.raw as pdfium_c
from PIL import Image, ImageDraw

from longqa_core.documents import Document, ReadLimits
from longqa_core.errors import DocumentError
from longqa_core.pdf_files import open_pdf, pdf_memory_cap, upright
from longqa_core.pdf_layout import ROW_EM, PiecePart
from longqa_core.reader_children import OUT_OF_MEMORY_EXIT, READERS, read_in_child

MAX_PAGE_SIDE_PT = 5_000.0  # a side longer than this (about 1.8 m) is not a page people read: refused, not drawn
PAGE_IMAGE_WIDTH_PX = 1_000  # a page is drawn this wide (a letter page at about 118 dots per inch)...
PAGE_IMAGE_MAX_PIXELS = 4_000_000  # ...and never with more pixels than this (16 MB as RGBA): a tall page, narrower
MARK_SECONDS = 10.0  # finding the marks of a request's answers, or drawing one page, may take this long
_CHILD_GRACE_S = 1.0
_MARK_FILL = (255, 214, 0, 96)  # the highlighter's yellow, see-through
_MARK_EDGE = (214, 120, 0, 255)


@dataclass(frozen=True)
class PageMark:
    """Where (part of) an answer stands on one page: the page (1-based), its size as shown (width and height in
    points, its /Rotate applied) and the answer's boxes, one per line it covers, in PDF points twice: `boxes` in the
    page's own space (x0, y0, x1, y1, y upwards, as PDF and PDFium give character positions) and `view_boxes` from
    the top-left corner of the page as shown (left, top, right, bottom, y downwards: what a client scales onto a
    picture of the page)."""

    page: int
    width: float
    height: float
    boxes: tuple[tuple[float, float, float, float], ...]
    view_boxes: tuple[tuple[float, float, float, float], ...]

    def to_json(self) -> dict:
        return {"page": self.page, "width": self.width, "height": self.height,
                "boxes": [list(box) for box in self.boxes], "view_boxes": [list(box) for box in self.view_boxes]}

    @classmethod
    def from_json(cls, data: dict) -> "PageMark":
        return cls(data["page"], data["width"], data["height"], tuple(tuple(b) for b in data["boxes"]),
                   tuple(tuple(b) for b in data["view_boxes"]))


_WORKER = f"""
import json
from longqa_core.documents import ReadLimits
from longqa_core.errors import DocumentError
from longqa_core import pdf_pages
job, name, request, max_read_s, began = json.loads(args[0])
limits = ReadLimits(max_read_s=max_read_s, began=began)
try:
    out = getattr(pdf_pages, job)(sys.stdin.buffer.read(), name, request, limits)
except DocumentError as exc:
    out = json.dumps({{"error": str(exc)}}).encode("utf-8")
except MemoryError:
    sys.exit({OUT_OF_MEMORY_EXIT})
sys.stdout.buffer.write(out)
"""


def _run(job: str, source: str, name: str, request, limits: ReadLimits, doing: str) -> bytes:
    """`job` (`marks_in_child` or `render_in_child`) run on the PDF file `source` (shown as `name`) in a reading
    child."""
    data = _source_bytes(source, name)
    cap_bytes = pdf_memory_cap(len(data), READERS) + PAGE_IMAGE_MAX_PIXELS * 8  # the reader's, and the bitmap
    arguments = json.dumps([job, name, request, limits.max_read_s, limits.began])
    try:
        out = read_in_child(READERS, _WORKER, data, cap_bytes, name, limits, doing, kind="PDF",
                            unit="file", args=(arguments,), grace_s=_CHILD_GRACE_S)
    except DocumentError as exc:
        raise DocumentError(str(exc).replace("could not be read", f"could not be {doing}", 1)) from None
    if out.startswith(b"{"):
        error = json.loads(out).get("error")
        if error:
            raise DocumentError(error)
    return out


def _source_bytes(source: str, name: str) -> bytes:
    """The PDF file a document was read from (DocumentError when it is gone)."""
    try:
        with open(source, "rb") as file:
            return file.read()
    except OSError:
        raise DocumentError(f"'{name}' is no longer on this server: upload it again to see its page.") from None


def answer_marks(document: Document, spans: list[tuple[int, int]], limits: ReadLimits | None = None
                 ) -> list[tuple[PageMark, ...]]:
    """Where each of `spans` (start and end characters of the document's text) stands on its pages: one `PageMark`
    per page it covers (an answer across a page break has two), found in one child for all of them."""
    if document.source is None or document.places is None:
        raise DocumentError(f"'{document.name}' has no pages to mark: only a PDF read from a file has.")
    limits = limits or ReadLimits(max_read_s=MARK_SECONDS)
    parts = [document.places.parts(document.text, start, end) for start, end in spans]
    request = [[[p.page, p.turn, list(p.box), p.size, p.text, p.start, p.end] for p in span] for span in parts]
    marks = json.loads(_run("marks_in_child", document.source, document.name, request, limits, "marked"))
    return [tuple(PageMark.from_json(mark) for mark in span) for span in marks]


def render_page(source: str, name: str, mark: PageMark, limits: ReadLimits | None = None) -> bytes:
    """The page of `mark` in the PDF file `source` (shown as `name`: `Document.source` and `name`) drawn as a PNG,
    PAGE_IMAGE_WIDTH_PX wide (fewer pixels for a tall page), with the mark's boxes highlighted; a page over
    MAX_PAGE_SIDE_PT a side is refused in words."""
    limits = limits or ReadLimits(max_read_s=MARK_SECONDS)
    return _run("render_in_child", source, name, mark.to_json(), limits, "drawn")


# ------------------------------------------------------------------------------------------ in the child
def marks_in_child(data: bytes, name: str, request: list, limits: ReadLimits) -> bytes:
    """`answer_marks` in the child: the parts of each span found among their page's characters."""
    pdf = open_pdf(data, name)
    pages: dict[int, _PageCharacters] = {}
    out = []
    try:
        for span in request:
            by_page: dict[int, list] = {}
            for page, turn, box, size, text, start, end in span:
                if limits.is_over_time():
                    raise limits.time_error(name, f"marking the answer on page {page + 1}")
                if page not in pages:
                    pages[page] = _PageCharacters(pdf, page)
                found = pages[page].boxes_of(PiecePart(page, turn, tuple(box), size, text, start, end))
                if found is not None:
                    by_page.setdefault(page, []).append(found)
            out.append([{**pages[page].size_json(), "page": page + 1, "boxes": boxes,
                         "view_boxes": [pages[page].view_box(box) for box in boxes]}
                        for page, boxes in by_page.items()])
    finally:
        for page in pages.values():
            page.close()
        pdf.close()
    return json.dumps(out).encode("utf-8")


def render_in_child(data: bytes, name: str, request: dict, limits: ReadLimits) -> bytes:
    """`render_page` in the child."""
    mark = PageMark.from_json(request)
    pdf = open_pdf(data, name)
    try:
        if not 1 <= mark.page <= len(pdf):
            raise DocumentError(f"'{name}' has no page {mark.page}.")
        page = pdf[mark.page - 1]
        width, height = shown_size(page)
        if max(width, height) > MAX_PAGE_SIDE_PT:
            raise DocumentError(f"Page {mark.page} of '{name}' is {width:,.0f} × {height:,.0f} points, over the "
                                f"{MAX_PAGE_SIDE_PT:,.0f} points a side a page may have to be drawn here.")
        scale = min(PAGE_IMAGE_WIDTH_PX / width, (PAGE_IMAGE_MAX_PIXELS / (width * height)) ** 0.5)
        image = page.render(scale=scale, may_draw_forms=True).to_pil().convert("RGB")
        if limits.is_over_time():
            raise limits.time_error(name, f"drawing page {mark.page}")
        overlay = Image.new("RGBA", image.size, (0, 0, 0, 0))
        draw = ImageDraw.Draw(overlay)
        sx, sy = image.width / width, image.height / height  # the bitmap is whole pixels: a little over `scale`
        pad = max(2.0, 1.5 * scale)
        edge = max(3, round(2 * scale))  # seen on a phone, where the page shows at a third of its pixels
        for left, top, right, bottom in mark.view_boxes:
            draw.rectangle((left * sx - pad, top * sy - pad, right * sx + pad, bottom * sy + pad),
                           fill=_MARK_FILL, outline=_MARK_EDGE, width=edge)
        image = Image.alpha_composite(image.convert("RGBA"), overlay).convert("RGB")
        page.close()
    finally:
        pdf.close()
    png = io.BytesIO()
    image.save(png, format="PNG")
    return png.getvalue()


class _PageCharacters:
    """One page's characters as PDFium places them: each one's text and box (loose: the font's full height), in the
    page's own space."""

    def __init__(self, pdf, index: int):
        self.page = pdf[index]
        textpage = self.page.get_textpage()
        try:
            rect = pdfium_c.FS_RECTF()
            self.chars: list[tuple[str, tuple[float, float, float, float]]] = []
            for i in range(pdfium_c.FPDFText_CountChars(textpage)):
                code = pdfium_c.FPDFText_GetUnicode(textpage, i)
                if pdfium_c.FPDFText_IsGenerated(textpage, i) or not pdfium_c.FPDFText_GetLooseCharBox(
                        textpage, i, rect):
                    continue
                char = "-" if code in (2, 0xFFFE) else chr(code or 0xFFFD)
                if not char.isspace():
                    self.chars.append((char, (rect.left, rect.bottom, rect.right, rect.top)))
        finally:
            textpage.close()
        self.width, self.height = shown_size(self.page)

    def boxes_of(self, part: PiecePart) -> list[float] | None:
        """The box of the characters `part` covers (the union of theirs), or None where none is found."""
        x0, y0, x1, y1 = part.box
        middle = (y0 + y1) / 2
        inside = []
        for char, box in self.chars:
            ux0, uy0, ux1, uy1 = upright(part.turn, box)
            cx, cy = (ux0 + ux1) / 2, (uy0 + uy1) / 2
            if x0 - 0.5 <= cx <= x1 + 0.5 and abs(cy - middle) <= ROW_EM * part.size:
                inside.append((ux0, char, box))
        inside.sort(key=lambda found: found[0])
        wanted = [i for i, char in enumerate(part.text) if not char.isspace()]
        first = sum(1 for i in wanted if i < part.start)
        last = sum(1 for i in wanted if i < part.end)
        chosen = _aligned("".join(part.text[i] for i in wanted), "".join(c for _, c, _ in inside), first, last)
        if not chosen:
            return None
        boxes = [inside[i][2] for i in chosen]
        return [round(edge, 2) for edge in (min(b[0] for b in boxes), min(b[1] for b in boxes),
                                            max(b[2] for b in boxes), max(b[3] for b in boxes))]

    def size_json(self) -> dict:
        return {"width": round(self.width, 2), "height": round(self.height, 2)}

    def view_box(self, box: list[float]) -> list[float]:
        """A box in the page's space as points from the top-left of the page as shown (its /Rotate applied)."""
        scale = 100  # FPDF_PageToDevice rounds to whole device units: hundredths of a point
        xs, ys = [], []
        for x, y in ((box[0], box[1]), (box[2], box[3])):
            dx, dy = ctypes.c_int(), ctypes.c_int()
            pdfium_c.FPDF_PageToDevice(self.page, 0, 0, round(self.width * scale), round(self.height * scale), 0, x, y,
                                       dx, dy)
            xs.append(dx.value / scale)
            ys.append(dy.value / scale)
        return [min(xs), min(ys), max(xs), max(ys)]

    def close(self) -> None:
        self.page.close()


def shown_size(page) -> tuple[float, float]:
    """A page's width and height in points as shown: its /Rotate applied (PDFium gives them unturned)."""
    width, height = page.get_size()
    return (height, width) if page.get_rotation() in (90, 270) else (width, height)


def _aligned(wanted: str, found: str, first: int, last: int) -> list[int]:
    """The indices in `found` (a piece's characters on the page, left to right) of `wanted[first:last]` (the piece's
    characters as the text has them, spaces left out): matched where they agree, in proportion where they differ (a
    ligature, a character the text cleaned)."""
    if first >= last or not found:
        return []
    if wanted == found:
        return list(range(first, last))
    chosen: list[int] = []
    for tag, a0, a1, b0, b1 in difflib.SequenceMatcher(None, wanted, found, autojunk=False).get_opcodes():
        lo, hi = max(a0, first), min(a1, last)
        if lo >= hi:
            continue
        if tag == "equal":
            chosen.extend(range(b0 + lo - a0, b0 + hi - a0))
        elif b1 > b0:
            span = (b1 - b0) / (a1 - a0)
            begin = b0 + int((lo - a0) * span)
            chosen.extend(range(begin, max(b0 + int((hi - a0) * span), begin + 1)))
    return sorted(set(i for i in chosen if 0 <= i < len(found)))

