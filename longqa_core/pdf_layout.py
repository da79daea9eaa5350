"""A PDF page's text in reading order, from where its pieces of text stand: pieces on one baseline made into lines
(cut where a gutter separates them), columns read left before right between the full-width lines that cross them,
running headers, footers and page numbers found across pages, paragraphs by the space between lines, headings by
their size.

Pure geometry on `Segment`s in PDF points (y grows upwards), so it is tested without PDFs; `pdf_files` extracts the
segments (PDFium) and `text_flow` joins the lines it returns.
"""

from __future__ import annotations

import base64
import bisect
import statistics
from array import array
from dataclasses import dataclass, replace

from longqa_core.text_flow import Line, edge_indices, running_lines

GUTTER_EM = 0.8  # a horizontal gap this many font sizes wide (of the smaller) cuts a baseline's pieces apart (LaTeX's
# two columns stand 10 points apart in 10-point text; a justified line's widest word spaces stay under this)
ROW_EM = 0.45  # pieces whose middles lie this many font sizes apart share a baseline
SPACE_EM = 0.2  # a gap this wide between two pieces of one line is a space between words (a ligature drawn apart,
# "ﬁ" then "rmed", stands 0.15 em off; the narrowest justified space, TeX's, is 0.22 em)
PARAGRAPH_PITCH = 1.45  # a gap between lines of this many times the page's usual line pitch starts a paragraph
HEADING_SIZE = 1.18  # a line this much larger than the document's body text is a heading
HEADING_MAX_CHARS = 120
TABLE_CELL_GAP = "   "  # between the cells of a row, as a text table aligns them (`text_flow` keeps such a row whole)
COLUMN_MIN_LINES = 3  # lines each side of a gutter needs before a page is read as columns
COLUMN_MIN_WIDTH = 0.3  # of the text's width: the median line of a column of text is at least this wide
GUTTER_SAMPLES = 800  # places across the text's width where a gutter is looked for, at most
GUTTER_CROSSINGS = 0.05  # of a page's narrow pieces that may cross its gutter (captions, formulas, page numbers)
_NO_SPACE_AFTER = (" ", "\t", "\u2018", "\u201c", "(", "[", "{")  # an opening quote or bracket holds on to its word
_NO_SPACE_BEFORE = (" ", "\t", "\u2019", "\u201d", ")", "]", "}", ",", ".", ";", ":", "!", "?")
RUNNING_PLACE_PT = 12.0  # a running header or footer stands at the same height on every page, to a line or so


@dataclass(frozen=True, slots=True)  # a page of glyphs drawn one by one has thousands
class Segment:
    """A run of text drawn as one piece: its text, its box in PDF points (x0 < x1, y0 < y1, y upwards) and its
    font size in points."""

    text: str
    x0: float
    y0: float
    x1: float
    y1: float
    size: float

    @property
    def middle_y(self) -> float:
        return (self.y0 + self.y1) / 2


def baseline_pieces(segments: list[Segment]) -> list[Segment]:
    """The page's segments made into line pieces: those on one baseline, left to right, joined (with a space where
    they stand apart), cut where a gap of GUTTER_EM font sizes separates them; top to bottom, then left to right."""
    rows: list[list[Segment]] = []
    for segment in sorted((s for s in segments if s.text.strip()), key=lambda s: (-s.middle_y, s.x0)):
        row = rows[-1] if rows else None
        if row and _same_row(row[0], segment):
            row.append(segment)
        else:
            rows.append([segment])
    pieces: list[Segment] = []
    for row in rows:
        row.sort(key=lambda s: s.x0)
        current = row[0]
        for segment in row[1:]:
            gap = segment.x0 - current.x1
            size = max(current.size, segment.size)
            if gap > GUTTER_EM * min(current.size, segment.size):
                pieces.append(current)
                current = segment
                continue
            space = "" if current.text.endswith(_NO_SPACE_AFTER) or segment.text.startswith(_NO_SPACE_BEFORE) or \
                gap < SPACE_EM * size else " "
            current = Segment(current.text + space + segment.text, min(current.x0, segment.x0),
                              min(current.y0, segment.y0), max(current.x1, segment.x1), max(current.y1, segment.y1),
                              size)
        pieces.append(current)
    return [Segment(" ".join(p.text.split()), p.x0, p.y0, p.x1, p.y1, p.size) for p in pieces]


def edge_pieces(pieces: list[Segment]) -> list[int]:
    """Indices of the pieces on the page's first and last baselines that may be running ones (`text_flow.edge_indices`;
    `baseline_pieces`' order is top to bottom)."""
    rows: list[list[int]] = []
    for index, piece in enumerate(pieces):
        if rows and abs(pieces[rows[-1][0]].middle_y - piece.middle_y) <= ROW_EM * piece.size:
            rows[-1].append(index)
        else:
            rows.append([index])
    return [index for row in edge_indices(len(rows)) for index in rows[row]]


def without_running(pages: list[list[Segment]]) -> list[list[Segment]]:
    """Each page's pieces without its running headers, footers and page numbers (`text_flow.running_lines` on the
    pieces of each page's top and bottom baselines, a line repeated at the same height)."""
    edges = [edge_pieces(pieces) for pieces in pages]
    running = running_lines([[pieces[i].text for i in edge] for pieces, edge in zip(pages, edges)],
                            [[round(pieces[i].middle_y / RUNNING_PLACE_PT) for i in edge]
                             for pieces, edge in zip(pages, edges)])
    return [[piece for index, piece in enumerate(pieces) if index not in {edge[i] for i in found}]
            for pieces, edge, found in zip(pages, edges, running)]


def reading_order(pieces: list[Segment]) -> list[Segment]:
    """A page's pieces as a person reads them: where a gutter splits the page into columns, the full-width pieces
    that cross it in their place and, between two of them, the left column's pieces before the right column's (each
    column read the same way, for three columns); elsewhere top to bottom, left to right."""
    gutter = find_gutter(pieces)
    if gutter is None:
        return top_to_bottom(pieces)
    ordered: list[Segment] = []
    band: list[Segment] = []

    def flush() -> None:
        lefts = [p for p in band if p.x1 <= gutter]
        ordered.extend(reading_order(lefts))
        ordered.extend(reading_order([p for p in band if p.x1 > gutter]))
        band.clear()

    for piece in sorted(pieces, key=lambda p: (-p.middle_y, p.x0)):
        if piece.x0 < gutter < piece.x1:
            flush()
            ordered.append(piece)
        else:
            band.append(piece)
    flush()
    return ordered


def top_to_bottom(pieces: list[Segment]) -> list[Segment]:
    """Pieces row by row from the top, each row left to right (a row's pieces share a baseline: their middles differ
    by a descender at most)."""
    rows: list[list[Segment]] = []
    for piece in sorted(pieces, key=lambda p: -p.middle_y):
        if rows and _same_row(rows[-1][0], piece):
            rows[-1].append(piece)
        else:
            rows.append([piece])
    return [piece for row in rows for piece in sorted(row, key=lambda p: p.x0)]


def find_gutter(pieces: list[Segment]) -> float | None:
    """The x of a gap between columns: the middle of the widest clear stretch, in the middle half of the text's
    width and at least GUTTER_EM wide, that the fewest pieces narrower than half that width cross (at most
    GUTTER_CROSSINGS of them: a centred caption or a short formula crosses it and reads as full width), with
    COLUMN_MIN_LINES pieces on each side side by side and the right side's pieces starting at one margin; None for
    a page of one column."""
    if len(pieces) < 2 * COLUMN_MIN_LINES:
        return None
    left, right = min(p.x0 for p in pieces), max(p.x1 for p in pieces)
    width = right - left
    narrow = [p for p in pieces if p.x1 - p.x0 < 0.55 * width]
    if len(narrow) < max(2 * COLUMN_MIN_LINES, 0.5 * len(pieces)):  # a page of columns is mostly narrow lines
        return None
    size = max(statistics.median(p.size for p in narrow), 1.0)
    step = max(size / 4, width / GUTTER_SAMPLES)
    xs = [left + 0.25 * width + step * i for i in range(int(0.5 * width / step) + 1)]
    crossings = [sum(p.x0 < x < p.x1 for p in narrow) for x in xs]
    fewest = min(crossings)
    if fewest > max(1, GUTTER_CROSSINGS * len(narrow)):
        return None
    best: tuple[int, int] | None = None  # the widest run of xs crossed by the fewest pieces: (first, last)
    first = None
    for i, count in enumerate(crossings + [fewest + 1]):
        if count == fewest and first is None:
            first = i
        elif count != fewest and first is not None:
            if best is None or i - 1 - first > best[1] - best[0]:
                best = (first, i - 1)
            first = None
    if best is None or (best[1] - best[0]) * step < GUTTER_EM * size - step:
        return None
    gutter = (xs[best[0]] + xs[best[1]]) / 2
    return gutter if _is_column_split(narrow, gutter, size, width) else None


def _is_column_split(narrow: list[Segment], gutter: float, size: float, width: float) -> bool:
    """Whether the pieces each side of `gutter` are columns: enough of them, one side's as wide as lines of text (a
    table's cells are not), side by side (their heights overlap),
    half the right side's starting at one margin or a third of the left side's ending at one edge."""
    lefts = [p for p in narrow if p.x1 <= gutter]
    rights = [p for p in narrow if p.x0 >= gutter]
    if len(lefts) < COLUMN_MIN_LINES or len(rights) < COLUMN_MIN_LINES:
        return False
    if max(statistics.median(p.x1 - p.x0 for p in side) for side in (lefts, rights)) < COLUMN_MIN_WIDTH * width:
        return False  # a table's cells, not columns of text (one column of text beside a listing is)
    overlap = min(max(p.y1 for p in lefts), max(p.y1 for p in rights)) - \
        max(min(p.y0 for p in lefts), min(p.y0 for p in rights))
    if overlap < 2 * size:
        return False
    margin = min(p.x0 for p in rights)
    if sum(abs(p.x0 - margin) <= size for p in rights) >= 0.5 * len(rights):
        return True
    edge = max(p.x1 for p in lefts)  # or a left column whose lines end at one edge (justified), beside a listing
    return sum(edge - p.x1 <= 1.5 * size for p in lefts) >= 0.3 * len(lefts)


def body_size(pages: list[list[Segment]]) -> float:
    """The font size of most of the document's characters."""
    weight: dict[float, int] = {}
    for pieces in pages:
        for piece in pieces:
            weight[round(piece.size, 1)] = weight.get(round(piece.size, 1), 0) + len(piece.text)
    return max(weight, key=weight.get) if weight else 0.0


def page_lines(pages: list[list[Segment]]) -> list[Line]:
    """The document's lines in reading order (`text_flow.Line`): running lines left out, columns in order, a
    paragraph boundary where the gap to the line before is PARAGRAPH_PITCH times the column's usual pitch, headings
    by size. A page's first line starts no paragraph: a sentence may run on from the page before."""
    return placed_lines(pages)[0]


def placed_lines(pages: list[list[Segment]]) -> tuple[list[Line], list[list[tuple[int, Segment]]]]:
    """`page_lines`, each line numbered by its index (`Line.source_line`, so that `text_flow.flow_lines` says where
    each starts in the flowing text), and where each was drawn: its pieces, each with where it starts in the line
    (a table's row has several)."""
    pages = without_running([baseline_pieces(segments) for segments in pages])
    body = body_size(pages)
    lines: list[Line] = []
    places: list[list[tuple[int, Segment]]] = []
    for number, pieces in enumerate(pages):
        ordered = reading_order(pieces)
        pitch = _usual_pitch(ordered)
        for index, piece in enumerate(ordered):
            before = ordered[index - 1] if index else None
            if before is not None and _same_row(before, piece) and piece.x0 > before.x1 and lines:
                # a table's row: its cells apart by a gutter, kept on one line as a text table sets them
                places[-1].append((len(lines[-1].text) + len(TABLE_CELL_GAP), piece))
                lines[-1] = replace(lines[-1], text=f"{lines[-1].text}{TABLE_CELL_GAP}{piece.text}")
                continue
            # the step from the line before, in the same column (a column's first line follows the other's last)
            step = before.middle_y - piece.middle_y if before is not None else None
            apart = step is not None and pitch is not None and step > PARAGRAPH_PITCH * pitch
            heading = body > 0 and piece.size >= HEADING_SIZE * body and len(piece.text) <= HEADING_MAX_CHARS
            lines.append(Line(piece.text, number, apart, heading, source_line=len(lines)))
            places.append([(0, piece)])
    return lines, places


@dataclass(frozen=True)
class PiecePart:
    """Part of a stretch of the flowing text, as it was drawn: the piece of a line that holds it (its page, 0-based,
    its box and font size as `Segment`s have them, the page turned upright by `turn` quarter turns, and its text
    as the flowing text has it) and which of the piece's characters the stretch covers."""

    page: int
    turn: int
    box: tuple[float, float, float, float]
    size: float
    text: str
    start: int
    end: int


_ARRAYS = {"starts": "q", "pages": "i", "first": "i", "offsets": "i", "lengths": "i", "boxes": "f", "sizes": "f",
           "turns": "b"}


@dataclass(frozen=True)
class PdfPlaces:
    """Where each line of a PDF's flowing text was drawn, kept beside the text by the reading that made it: line i
    starts at `starts[i]` in the text, on page `pages[i]`; its pieces are those from `first[i]` to `first[i + 1]`,
    each starting `offsets[j]` characters into the line, `lengths[j]` long, drawn in `boxes[4j:4j + 4]` (x0, y0, x1,
    y1 in points, y upwards, on the page turned `turns[page]` quarter turns upright) at font size `sizes[j]`.
    Arrays, not objects: a book has a hundred thousand lines."""

    starts: array
    pages: array
    first: array
    offsets: array
    lengths: array
    boxes: array
    sizes: array
    turns: array

    @classmethod
    def of(cls, line_starts, places: list[list[tuple[int, Segment]]], lines: list[Line],
           turns: list[int]) -> "PdfPlaces":
        """The places of `placed_lines`' lines, where `text_flow.flow_lines` started them (`line_starts`: its
        `LineMap`, whose numbers are the lines' indices), and each page's turn."""
        built = {name: array(code) for name, code in _ARRAYS.items()}
        built["turns"].extend(turns)
        for start, index in zip(line_starts.starts, line_starts.numbers):
            built["starts"].append(start)
            built["pages"].append(lines[index].page)
            built["first"].append(len(built["offsets"]))
            for offset, piece in places[index]:
                built["offsets"].append(offset)
                built["lengths"].append(len(piece.text))
                built["boxes"].extend((piece.x0, piece.y0, piece.x1, piece.y1))
                built["sizes"].append(piece.size)
        built["first"].append(len(built["offsets"]))
        return cls(**built)

    def to_json(self) -> dict:
        return {name: base64.b64encode(getattr(self, name).tobytes()).decode("ascii") for name in _ARRAYS}

    @classmethod
    def from_json(cls, data: dict) -> "PdfPlaces":
        built = {}
        for name, code in _ARRAYS.items():
            built[name] = array(code)
            built[name].frombytes(base64.b64decode(data[name]))
        return cls(**built)

    def parts(self, text: str, start: int, end: int) -> list[PiecePart]:
        """Where `text[start:end]` (the flowing text these places are of) was drawn: one part per piece of a line
        it covers, in reading order."""
        found: list[PiecePart] = []
        line = max(bisect.bisect_right(self.starts, start) - 1, 0)
        while line < len(self.starts) and self.starts[line] < end:
            line_start = self.starts[line]
            line_end = self.starts[line + 1] if line + 1 < len(self.starts) else len(text)
            for j in range(self.first[line], self.first[line + 1]):
                piece_start = line_start + self.offsets[j]
                piece_end = min(piece_start + self.lengths[j], line_end)  # a hyphen joined away is not there
                if piece_start < end and start < piece_end:
                    page = self.pages[line]
                    found.append(PiecePart(page, self.turns[page], tuple(self.boxes[4 * j:4 * j + 4]), self.sizes[j],
                                           text[piece_start:piece_end], max(start, piece_start) - piece_start,
                                           min(end, piece_end) - piece_start))
            line += 1
        return found


def _same_row(a: Segment, b: Segment) -> bool:
    """Whether two pieces share a baseline: their middles differ by a descender at most."""
    return abs(a.middle_y - b.middle_y) <= ROW_EM * min(a.size, b.size)


def _usual_pitch(ordered: list[Segment]) -> float | None:
    """The distance between one line's middle and the next's that most of a page's lines keep."""
    steps = [a.middle_y - b.middle_y for a, b in zip(ordered, ordered[1:]) if 0 < a.middle_y - b.middle_y]
    return statistics.median(steps) if steps else None
