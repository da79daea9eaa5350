"""Pages of laid-out lines: a paragraph's lines poured into frames (a page, or one column of a page), and PDF pages
written with reportlab in the drawing order given, which need not be the reading order.

It breaks no lines (`line_breaking`) and chooses no layout (`layouts`).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Callable

from reportlab.pdfgen import canvas

from evals.line_breaking import Piece

PAGE_SIZE = (612.0, 792.0)  # US Letter, in points


@dataclass(eq=False)
class Line:
    """A laid-out line of a paragraph: its pieces, and whether it is the paragraph's last (never justified)."""

    pieces: list[Piece]
    ends_paragraph: bool

    @property
    def text(self) -> str:
        return " ".join(piece.text for piece in self.pieces)

    def holds(self, offset: int) -> bool:
        """Whether one of its pieces stands for the character at `offset` of the reading text."""
        return any(piece.start <= offset < piece.end for piece in self.pieces)


def lines_of(broken: list[list[Piece]]) -> list[Line]:
    return [Line(pieces, index == len(broken) - 1) for index, pieces in enumerate(broken)]


Frame = list  # of Line, or None for a blank line between paragraphs


def flow(paragraphs: list[list[Line]], height_of: Callable[[int], int], *, end_frame_after: Line | None = None,
         keep_with_next: Line | None = None) -> list[Frame]:
    """Paragraphs' lines poured into frames, frame `i` holding `height_of(i)` lines, a blank line between paragraphs
    (none at a frame's top or bottom); a frame ends right after `end_frame_after`, and never right after
    `keep_with_next` (it goes on to the next frame with the line after it)."""
    frames: list[Frame] = []
    current: Frame = []

    def close() -> None:
        nonlocal current
        while current and current[-1] is None:
            current.pop()
        frames.append(current)
        current = []

    for number, lines in enumerate(paragraphs):
        if number and current:
            current.append(None)
        for line in lines:
            height = height_of(len(frames))
            if len(current) >= height or (line is keep_with_next and len(current) + 1 >= height):
                close()
            current.append(line)
            if line is end_frame_after:
                close()
    if current:
        close()
    return frames


def frame_holding(frames: list[Frame], offset: int) -> int:
    """The index of the frame whose lines hold the character at `offset` of the reading text."""
    return next(index for index, frame in enumerate(frames) if any(line and line.holds(offset) for line in frame))


@dataclass(frozen=True)
class Drawn:
    """One line of text drawn from (x, y), its baseline's start in points from the page's bottom left;
    `word_space` is added to each space (a justified line's stretch)."""

    x: float
    y: float
    text: str
    font: str
    size: float
    word_space: float = 0.0


def justified_space(line: Line, width_of: Callable[[str], float], max_width: float, most: float) -> float:
    """What each space of `line` gets added to fill `max_width`: nothing on a paragraph's last line, nor on a line
    that would need more than `most` (it stays ragged rather than gape)."""
    spaces = len(line.pieces) - 1
    if line.ends_paragraph or not spaces:
        return 0.0
    space = max(max_width - width_of(line.text), 0.0) / spaces
    return space if space <= most else 0.0


def write_pdf(pages: list[list[Drawn]], title: str) -> bytes:
    """A PDF whose pages draw their lines in the order given, each line its own text object, the same bytes every
    time (reportlab's invariant mode: no dates, a fixed document id)."""
    buffer = io.BytesIO()
    pdf = canvas.Canvas(buffer, pagesize=PAGE_SIZE, invariant=1)
    pdf.setTitle(title)
    for page in pages:
        for drawn in page:
            text = pdf.beginText(drawn.x, drawn.y)
            text.setFont(drawn.font, drawn.size)
            text.setWordSpace(drawn.word_space)  # always: Tw outlasts a text object, so a ragged line resets it
            text.textOut(drawn.text)
            pdf.drawText(text)
        pdf.showPage()
    pdf.save()
    return buffer.getvalue()
