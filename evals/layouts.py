"""Evaluation documents laid out as people's files are (issue 57): the demo task's documents from the independent
evaluation generator (`evals.eval_task`, never the training one), each with one asked fact and its
distractors, written as PDFs whose lines wrap, hyphenate, break over pages past running headers and footers or run in
two columns drawn out of reading order, and as text files hard-wrapped, hyphenated, paged with form feeds or written
in Markdown; the controls keep the fact sentence whole.

The same seed gives the same document (title, prose, fact and distractors) in every layout, so layouts compare item
for item. `make_item(layout, seed)` builds one, `make_items(layout, n)` the evaluation's. It reads no file and runs
no model (`layout_answers`, `python -m evals layouts`, does, through the product's own path).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Callable

from reportlab.pdfbase.pdfmetrics import stringWidth

from evals.fact_breaks import (FactPlace, Measure, break_blocks, characters, fact_breaks, fact_parts, font_measure,
                               place_blocks, with_compound)
from evals.pages import Drawn, Line, flow, frame_holding, justified_space, lines_of, write_pdf
from evals import eval_task
from longqa.demo_model.fact import Fact

# Issue 57's own seeds: none of the other evaluations' (`exact_match`: 5 to 27 million and from
# 1 billion; `not_found_rule`: under 10 million; `guided_reading`: about 2 billion).
SEED_BASE = 570_000_000
DOCUMENT_WORDS = 6_000  # about 18 single-column PDF pages of 330 words; 3 windows of the demo model's 4,096 tokens
TITLES = ("Notes and Records", "The Quarterly Papers", "Collected Reports", "Occasional Papers", "A Miscellany",
          "Working Papers", "The Annual Book", "Papers and Letters")


@dataclass(frozen=True)
class LayoutItem:
    """One evaluation file and its question. `page`: the 1-based page where the answer's value starts (PDFs, and text
    files whose form feeds end pages); `line`: the 1-based line of the file where it starts (text files; lines
    counted by "\\n", as `grep -n` and editors count them). `text`: the document as a person reads it (a
    paragraph's lines joined, hyphens at lines' ends joined, running headers and footers left out, columns in
    reading order, Markdown's marks left out, blocks separated by a blank line); `furniture`: the running headers,
    footers and page numbers a reader should leave out; `fact_lines`: the fact sentence's parts as drawn, one per
    line, and `fact_break` where they break ("entity|is", "hyphen in entity", ...; "none")."""

    layout: str
    seed: int
    name: str
    data: bytes = field(repr=False)
    question: str
    answer: str
    page: int | None
    line: int | None
    text: str = field(repr=False)
    fact_lines: tuple[str, ...]
    fact_break: str
    furniture: tuple[str, ...] = field(default=(), repr=False)
    pages: int | None = None


@dataclass(frozen=True)
class Draft:
    """One seed's document before it is laid out: a title, the generator's paragraphs and the asked fact."""

    seed: int
    title: str
    paragraphs: tuple[str, ...]
    fact: Fact


def make_draft(seed: int) -> Draft:
    document = eval_task.make_document(seed, DOCUMENT_WORDS, placement="inside")
    title = random.Random(f"title {seed}").choice(TITLES)
    return Draft(seed, title, tuple(document.text.split("\n\n")), document.facts[0])


def laid_out(draft: Draft, layout: str, name: str, data: bytes, text: str, place: FactPlace, lines: list[Line], *,
             page: int | None = None, line: int | None = None, pages: int | None = None,
             furniture: list[str] = ()) -> LayoutItem:
    """The item of a laid-out file: `lines` are the document's lines in reading order."""
    return LayoutItem(layout=layout, seed=draft.seed, name=name, data=data, question=draft.fact.question,
                      answer=draft.fact.value, page=page, line=line, text=text, fact_lines=fact_parts(lines, place),
                      fact_break=fact_breaks(lines, place), furniture=tuple(furniture), pages=pages)


# --- PDFs in one column ------------------------------------------------------------------------------------------
LEFT, WIDTH, TOP, BOTTOM = 100.0, 412.0, 708.0, 84.0  # the text block: 1.4 inch sides, first and lowest baseline
BODY = ("Helvetica", 12.0)
TITLE = ("Helvetica-Bold", 16.0)
LEADING = 17.5
TITLE_SLOTS = 3  # lines of the first page that the title takes
RUNNING = ("Helvetica-Oblique", 9.0)  # running headers and footers
HEADER_Y, FOOTER_Y = 750.0, 46.0
FOOTERS = ("Page {n} of {total}", "- {n} -", "{n}")
PAGES_A_PART = 6  # a running header's part changes every this many pages


def part_of(page: int) -> str:
    """A running header's part for a 1-based page."""
    return f"Part {(page - 1) // PAGES_A_PART + 1}"


def lines_per_page(leading: float) -> int:
    return int((TOP - BOTTOM) / leading) + 1


def draw_column(frame: list, x: float, top: float, leading: float, measure: Measure, justify: bool,
                font: tuple[str, float], flush_to: float | None = None) -> list[Drawn]:
    """A frame's lines from baseline `top` down, a line wider than the measure drawn smaller to fit; with `flush_to`,
    the blank lines between paragraphs stretched so that the last line sits on that baseline (LaTeX's
    flushbottom)."""
    gaps = frame.count(None)
    room = top - (len(frame) - 1) * leading - flush_to if flush_to is not None else 0.0
    stretch = room / gaps if gaps and room > 0 else 0.0
    drawn, y = [], top
    for line in frame:
        if line is None:
            y -= leading + stretch
            continue
        width = measure.width_of(line.text)
        size = font[1] * min(1.0, measure.max_width / width)
        space = justified_space(line, measure.width_of, measure.max_width, font[1] / 3) if justify else 0.0
        drawn.append(Drawn(x, y, line.text, font[0], size, space))
        y -= leading
    return drawn


def page_broken_frames(body: list[list[Line]], first: Line) -> tuple[list, float, int]:
    """Frames where the page ends right after the fact's first line `first`: of the leadings and title heights a
    typesetter might choose, the one that leaves the fewest lines of that page empty (the rest are stretched
    between its paragraphs)."""
    best = None
    for leading in (16.0, 16.5, 17.0, 17.5, 18.0, 18.5, 19.0):
        for title_slots in range(2, 11):
            height = lines_per_page(leading)
            heights = lambda i: height - (title_slots if i == 0 else 0)  # noqa: E731
            frames = flow(body, heights, end_frame_after=first)
            page = next(i for i, frame in enumerate(frames) if first in frame)
            empty = heights(page) - len(frames[page])
            if best is None or empty < best[0]:
                best = (empty, frames, leading, title_slots)
    return best[1:]


def single_column_pdf(draft: Draft, layout: str, fact_style: str, *, justify: bool = False,
                      running: bool = False) -> LayoutItem:
    """One column of Helvetica 12 on Letter pages, ragged or justified; with `running`, a running header (the title
    and the part) and a page number in one of three styles on every page, and the page ending inside the fact."""
    rng = random.Random(f"{layout} {draft.seed}")
    measure = font_measure(*BODY, WIDTH)
    paragraphs = list(draft.paragraphs)
    if fact_style == "hyphenated":
        paragraphs = with_compound(paragraphs, draft.fact, measure, rng)
    text, blocks = place_blocks([("title", draft.title)] + [("paragraph", p) for p in paragraphs])
    place = FactPlace.find(text, draft.fact)
    body = [lines_of(lines) for lines in break_blocks(blocks[1:], place, measure, rng, fact_style)]
    every_line = [line for lines in body for line in lines]
    first = next(line for line in every_line if line.holds(place.start))
    if running:
        frames, leading, title_slots = page_broken_frames(body, first)
    else:  # the fact's lines on one page: a page break is this layout's, not the others'
        leading, title_slots = LEADING, TITLE_SLOTS
        frames = flow(body, lambda i: lines_per_page(leading) - (title_slots if i == 0 else 0), keep_with_next=first)
    footer = rng.choice(FOOTERS)
    pages, furniture = [], []
    for number, frame in enumerate(frames, 1):
        drawn = []
        if running:
            part = part_of(number)
            drawn += [Drawn(LEFT, HEADER_Y, draft.title, *RUNNING),
                      Drawn(LEFT + WIDTH - stringWidth(part, *RUNNING), HEADER_Y, part, *RUNNING)]
        if number == 1:
            drawn.append(Drawn(LEFT, TOP, draft.title, *TITLE))
        top = TOP - (title_slots * leading if number == 1 else 0.0)
        flush_to = BOTTOM if running and number < len(frames) else None
        drawn += draw_column(frame, LEFT, top, leading, measure, justify, BODY, flush_to)
        if running:
            folio = footer.format(n=number, total=len(frames))
            drawn.append(Drawn(LEFT + (WIDTH - stringWidth(folio, *RUNNING)) / 2, FOOTER_Y, folio, *RUNNING))
            furniture += [draft.title, part, folio]
        pages.append(drawn)
    return laid_out(draft, layout, f"{layout.removesuffix('-pdf')}-{draft.seed}.pdf", write_pdf(pages, draft.title),
                    text, place, every_line, page=frame_holding(frames, place.value_start) + 1, pages=len(pages),
                    furniture=furniture)


# --- PDFs in two columns -----------------------------------------------------------------------------------------
COLUMN_XS, COLUMN_WIDTH = (54.0, 315.0), 243.0  # 3/4 inch sides, a quarter-inch gutter
COLUMN_TOP, COLUMN_BOTTOM, COLUMN_LEADING = 738.0, 60.0, 12.5
COLUMN_BODY = ("Helvetica", 10.0)
COLUMN_TITLE = ("Helvetica-Bold", 15.0)
COLUMN_TITLE_SLOTS = 4


def balanced_columns(body: list[list[Line]], first: Line) -> list:
    """Frames of two columns a page, the fact's first line `first` never a column's last; the last page's two
    columns as nearly the same length as they go, as journals set them."""
    height = int((COLUMN_TOP - COLUMN_BOTTOM) / COLUMN_LEADING) + 1
    heights = lambda i: height - (COLUMN_TITLE_SLOTS if i < 2 else 0)  # noqa: E731
    frames = flow(body, heights, keep_with_next=first)
    last = (len(frames) - 1) // 2 * 2  # the last page's left column
    for shorter in range(1, height + 1):
        balanced = flow(body, lambda i: min(shorter, heights(i)) if i >= last else heights(i), keep_with_next=first)
        if len(balanced) <= last + 2:
            return balanced
    return frames


def across_columns(columns: list[list[Drawn]], fact_texts: set[str]) -> list[Drawn]:
    """A page's lines row by row across its columns (left line 1, right line 1, left line 2, ...), or right to left
    where that puts the other column's line between the fact's lines (a blank beside them would let them follow
    each other)."""
    lines = [line for column in columns for line in column]
    for direction in (1, -1):
        ordered = sorted(lines, key=lambda d: (-d.y, direction * d.x))
        at = [index for index, drawn in enumerate(ordered) if drawn.text in fact_texts]
        if at[-1:] and at[-1] - at[0] > len(at) - 1:
            return ordered
    return sorted(lines, key=lambda d: (-d.y, d.x))


def two_column_pdf(draft: Draft, layout: str) -> LayoutItem:
    """Two justified columns of Helvetica 10 under a full-width title, the fact broken inside a column; most pages
    (every page but each third, and always the fact's) draw their lines row by row across both columns, as many real
    PDFs do, the rest column after column."""
    rng = random.Random(f"{layout} {draft.seed}")
    text, blocks = place_blocks([("title", draft.title)] + [("paragraph", p) for p in draft.paragraphs])
    place = FactPlace.find(text, draft.fact)
    measure = font_measure(*COLUMN_BODY, COLUMN_WIDTH)
    body = [lines_of(lines) for lines in break_blocks(blocks[1:], place, measure, rng, "wrapped")]
    every_line = [line for lines in body for line in lines]
    first = next(line for line in every_line if line.holds(place.start))
    frames = balanced_columns(body, first)
    fact_page = frame_holding(frames, place.start) // 2
    fact_texts = {line.text for line in every_line if fact_parts([line], place)}
    pages = []
    for number in range(0, len(frames), 2):
        page = number // 2
        columns = []
        for column, frame in enumerate(frames[number:number + 2]):
            top = COLUMN_TOP - (COLUMN_TITLE_SLOTS * COLUMN_LEADING if page == 0 else 0.0)
            columns.append(draw_column(frame, COLUMN_XS[column], top, COLUMN_LEADING, measure, True, COLUMN_BODY))
        if page % 3 != 2 or page == fact_page:
            by_row = across_columns(columns, fact_texts)
        else:
            by_row = [line for lines in columns for line in lines]
        title = [Drawn((612.0 - stringWidth(draft.title, *COLUMN_TITLE)) / 2, COLUMN_TOP, draft.title,
                       *COLUMN_TITLE)] if page == 0 else []
        pages.append(title + by_row)
    return laid_out(draft, layout, f"two-column-{draft.seed}.pdf", write_pdf(pages, draft.title), text, place,
                    every_line, page=frame_holding(frames, place.value_start) // 2 + 1, pages=len(pages))


# --- text files ----------------------------------------------------------------------------------------------------
Row = tuple[str, Line | None]  # a file's line: a prefix and a laid-out line, or the whole literal line


def rows_of(body: list[list[Line]], prefixes: list[tuple[str, str]] | None = None) -> list[Row]:
    """A text's rows: each block's lines (its first line after `prefixes[i][0]`, the others after `prefixes[i][1]`),
    a blank row between blocks."""
    rows: list[Row] = []
    for index, lines in enumerate(body):
        first, rest = prefixes[index] if prefixes else ("", "")
        rows += [("", None)] if index else []
        rows += [(first if number == 0 else rest, line) for number, line in enumerate(lines)]
    return rows


def render(rows: list[Row]) -> str:
    return "".join(f"{prefix}{line.text if line else ''}".rstrip(" ") + "\n" for prefix, line in rows)


def row_holding(rows: list[Row], offset: int) -> int:
    """The 1-based line of the row whose line holds a piece starting at `offset` of the reading text."""
    return next(number for number, (_, line) in enumerate(rows, 1) if line is not None and line.holds(offset))


def plain_text(draft: Draft, layout: str, fact_style: str, columns: int | None) -> LayoutItem:
    """A title and paragraphs, a blank line between: each paragraph on one line (`columns` None), or hard-wrapped at
    `columns` characters, as fmt and editors fill them."""
    rng = random.Random(f"{layout} {draft.seed}")
    measure = characters(columns or sum(len(p) for p in draft.paragraphs))
    paragraphs = list(draft.paragraphs)
    if fact_style == "hyphenated":
        paragraphs = with_compound(paragraphs, draft.fact, measure, rng)
    text, blocks = place_blocks([("title", draft.title)] + [("paragraph", p) for p in paragraphs])
    place = FactPlace.find(text, draft.fact)
    body = [lines_of(lines) for lines in break_blocks(blocks, place, measure, rng, fact_style)]
    rows = rows_of(body)
    return laid_out(draft, layout, f"{layout.removesuffix('-txt')}-{draft.seed}.txt", render(rows).encode(), text,
                    place, [line for lines in body for line in lines], line=row_holding(rows, place.value_start))


RFC_COLUMNS, RFC_BODY_ROWS = 72, 50  # a page: header, two blank rows, 50 rows of text, a blank row, footer
RFC_FOOTER = "Evaluation copy"


def paged_text(draft: Draft, layout: str) -> LayoutItem:
    """A text hard-wrapped at 72 columns in pages as RFCs are: a running header (the title and the part), the
    page's text padded with blank lines, a footer ending in "[Page n]", then a form feed on a line of its own; the
    fact's page ends inside the fact, before its value."""
    rng = random.Random(f"{layout} {draft.seed}")
    text, blocks = place_blocks([("title", draft.title)] + [("paragraph", p) for p in draft.paragraphs])
    place = FactPlace.find(text, draft.fact)
    body = [lines_of(lines) for lines in break_blocks(blocks, place, characters(RFC_COLUMNS), rng, "before-value")]
    first = next(line for lines in body for line in lines if line.holds(place.start))
    frames = flow(body, lambda i: RFC_BODY_ROWS, end_frame_after=first)
    rows: list[Row] = []
    furniture = []
    for number, frame in enumerate(frames, 1):
        part = part_of(number)
        header = f"{draft.title}{part:>{RFC_COLUMNS - len(draft.title)}}"
        footer = f"{RFC_FOOTER}{f'[Page {number}]':>{RFC_COLUMNS - len(RFC_FOOTER)}}"
        padding = [("", None)] * (RFC_BODY_ROWS - len(frame))
        rows += [(header, None), ("", None), ("", None)] + [("", line) for line in frame] + padding
        rows += [("", None), (footer, None)] + ([("\f", None)] if number < len(frames) else [])
        furniture += [header, footer]
    return laid_out(draft, layout, f"paged-{draft.seed}.txt", render(rows).encode(), text, place,
                    [line for lines in body for line in lines], page=frame_holding(frames, place.value_start) + 1,
                    line=row_holding(rows, place.value_start), pages=len(frames), furniture=furniture)


MD_COLUMNS = 80
PARAGRAPHS_A_SECTION = 5
_SENTENCE_END = re.compile(r"(?<![A-Z])(?<!Dr)(?<!St)\. (?=[A-Z])")


def markdown_text(draft: Draft, layout: str) -> LayoutItem:
    """A Markdown file: a `#` title, a `##` heading every five paragraphs, paragraphs hard-wrapped at 80 columns with
    the fact broken inside, and one paragraph's sentences as a bulleted list (continuation lines indented)."""
    rng = random.Random(f"{layout} {draft.seed}")
    listed = next((i for i in rng.sample(range(len(draft.paragraphs)), len(draft.paragraphs))
                   if draft.fact.sentence not in draft.paragraphs[i] and '"' not in draft.paragraphs[i]
                   and len(_SENTENCE_END.split(draft.paragraphs[i])) >= 3), None)
    parts, prefixes = [("title", draft.title)], [("# ", "")]
    for index, paragraph in enumerate(draft.paragraphs):
        if index % PARAGRAPHS_A_SECTION == 0:
            parts.append(("heading", f"Part {index // PARAGRAPHS_A_SECTION + 1}"))
            prefixes.append(("## ", ""))
        if index == listed:
            sentences = _SENTENCE_END.split(paragraph)
            items = [s if s.endswith(".") else s + "." for s in sentences]
            parts += [("item", item) for item in items]
            prefixes += [("- ", "  ")] * len(items)
        else:
            parts.append(("paragraph", paragraph))
            prefixes.append(("", ""))
    text, blocks = place_blocks(parts)
    place = FactPlace.find(text, draft.fact)
    broken = break_blocks(blocks, place, characters(MD_COLUMNS), rng, "wrapped")
    items = characters(MD_COLUMNS - 2)
    body = [lines_of(items.lines(block.pieces()) if block.kind == "item" else lines)
            for block, lines in zip(blocks, broken)]
    rows = rows_of(body, prefixes)
    rows = [row for index, row in enumerate(rows)  # list items follow each other without blank lines
            if not (row == ("", None) and 0 < index < len(rows) - 1 and rows[index + 1][0] == "- "
                    and rows[index - 1][0] in ("- ", "  "))]
    return laid_out(draft, layout, f"wrapped-{draft.seed}.md", render(rows).encode(), text, place,
                    [line for lines in body for line in lines], line=row_holding(rows, place.value_start))


@dataclass(frozen=True)
class Layout:
    """A layout people's files have: what it does to the fact sentence, and how an item is built in it."""

    description: str
    build: Callable[[Draft, str], LayoutItem]


LAYOUTS: dict[str, Layout] = {
    "one-line-pdf": Layout("control: one column, paragraphs wrapped, the fact sentence on a line of its own",
                           lambda d, name: single_column_pdf(d, name, "whole")),
    "wrapped-pdf": Layout("one column, ragged right, the fact sentence wrapped between the entity's words or "
                          "before 'is' where the lines allow", lambda d, name: single_column_pdf(d, name, "wrapped")),
    "hyphenated-pdf": Layout("one justified column, a word of the entity (else the attribute) hyphenated at a line's "
                             "end, four long words elsewhere too, and a compound ('four-' / 'hour') broken at its "
                             "own hyphen", lambda d, name: single_column_pdf(d, name, "hyphenated", justify=True)),
    "page-broken-pdf": Layout("one column under a running header (title, part) over a page number ('Page 3 of 20', "
                              "'- 3 -' or '3'); the fact starts on a page's last line, its value on the next page",
                              lambda d, name: single_column_pdf(d, name, "before-value", running=True)),
    "two-column-pdf": Layout("two justified columns under a full-width title, the fact wrapped inside a column; "
                             "pages drawn row by row across the columns (not in reading order), every third column "
                             "after column", two_column_pdf),
    "one-line-txt": Layout("control: each paragraph on one line, a blank line between",
                           lambda d, name: plain_text(d, name, "plain", None)),
    "hard-wrapped-txt": Layout("hard-wrapped at 72 columns, the fact wrapped inside",
                               lambda d, name: plain_text(d, name, "wrapped", 72)),
    "hyphenated-txt": Layout("hard-wrapped at 72 columns, a word of the fact hyphenated at a line's end, other long "
                             "words and a compound too", lambda d, name: plain_text(d, name, "hyphenated", 72)),
    "paged-txt": Layout("RFC-style pages of 72 columns between form feeds, a running header and a '[Page n]' "
                        "footer; the fact starts on a page's last line of text, its value on the next page",
                        paged_text),
    "wrapped-md": Layout("Markdown: a title, a heading every five paragraphs, paragraphs hard-wrapped at 80 columns "
                         "with the fact wrapped inside, one paragraph as a bulleted list", markdown_text),
}


def make_item(layout: str, seed: int) -> LayoutItem:
    """Seed `seed`'s document laid out as `layout` (a key of LAYOUTS): the same bytes for the same seed."""
    return LAYOUTS[layout].build(make_draft(seed), layout)


def make_items(layout: str, n: int, first_seed: int = SEED_BASE) -> list[LayoutItem]:
    """The evaluation's `n` items of `layout`: seeds `first_seed` on, the same documents in every layout."""
    return [make_item(layout, first_seed + index) for index in range(n)]
