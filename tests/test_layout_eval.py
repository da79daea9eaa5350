"""The layout evaluation's generator (`evals.layouts`): each file holds what its item says, read back independently
(pypdfium2's characters and their boxes for a PDF, the bytes for a text file): the value on the recorded page or
line, and the fact sentence broken as the layout promises (across lines, at a hyphen, over a page past the footer and
the next header, inside one column drawn out of reading order), or whole in the controls. The readers' answers on
these files are the evaluation's (`python -m evals layouts`), not this test's."""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

import pypdfium2 as pdfium
import pytest

from evals.layouts import LAYOUTS, SEED_BASE, LayoutItem, make_item

SEED = SEED_BASE + 3  # a fact that starts inside its paragraph, so the wrapped layouts break it where they prefer
PDF_LAYOUTS = [name for name in LAYOUTS if name.endswith("-pdf")]
TEXT_LAYOUTS = [name for name in LAYOUTS if not name.endswith("-pdf")]
PAGE_MIDDLE = 306.0  # half of a Letter page's width: the two-column layout's gutter is on it


@functools.cache
def item_of(layout: str) -> LayoutItem:
    return make_item(layout, SEED)


def squashed(text: str) -> str:
    """Text without spaces, line breaks and hyphens, so that a sentence matches however it was broken."""
    return re.sub(r"[\s\-\ufffe]", "", text)


class Char(NamedTuple):
    char: str
    index: int  # in the page's content stream order, as pdfium reads it
    left: float
    line: tuple[int, int]  # its page and the bottom of its line's box, rounded: one per line of a page


def page_chars(data: bytes) -> list[list[Char]]:
    """Every page's characters but line breaks, in content stream order, with where they stand."""
    document = pdfium.PdfDocument(data)
    pages = []
    for number, page in enumerate(document, 1):
        textpage = page.get_textpage()
        text = textpage.get_text_range()
        assert len(text) == textpage.count_chars()
        chars = []
        for index, char in enumerate(text):
            if char not in "\r\n":
                left, bottom = textpage.get_charbox(index, loose=True)[:2]
                chars.append(Char(char, index, left, (number, round(bottom))))
        pages.append(chars)
    return pages


def page_texts(data: bytes) -> list[str]:
    document = pdfium.PdfDocument(data)
    return [page.get_textpage().get_text_range() for page in document]


def reading_order(chars: list[Char], columns: bool) -> list[Char]:
    """A page's characters top to bottom, left column first where the page has two."""
    column = (lambda c: c.left >= PAGE_MIDDLE) if columns else (lambda c: 0)
    return sorted(chars, key=lambda c: (c.line[0], column(c), -c.line[1], c.left))


def find(chars: list[Char], sentence: str) -> list[Char]:
    """The characters that spell `sentence` (both squashed), or none."""
    kept = [c for c in chars if not c.char.isspace() and c.char not in "-\ufffe"]
    at = "".join(c.char for c in kept).find(squashed(sentence))
    return [] if at < 0 else kept[at:at + len(squashed(sentence))]


def line_end_hyphens(chars: list[Char]) -> list[tuple[str, str]]:
    """The words broken at a line's end by a hyphen: (the part before it, the part after)."""
    drawn = [c for c in chars if not c.char.isspace()]
    broken = []
    for i, c in enumerate(drawn[1:-1], 1):
        if c.char in "-\ufffe" and drawn[i + 1].line != c.line:
            before = re.search(r"\w+$", "".join(x.char for x in chars if x.line == c.line and x.index < c.index))
            after = re.match(r"\w+", "".join(x.char for x in chars if x.line == drawn[i + 1].line
                                              and x.index >= drawn[i + 1].index))
            broken.append((before.group() if before else "", after.group() if after else ""))
    return broken


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_an_item_is_the_same_for_its_seed_and_asks_its_fact(layout):
    item = item_of(layout)
    again = make_item(layout, SEED)
    assert again.data == item.data and again == item
    assert item.question.startswith("What is the ") and item.question.endswith("?")
    attribute, entity = re.fullmatch(r"What is the (.*?) of (.*)\?", item.question).groups()
    fact = f"The {attribute} of {entity} is {item.answer}."
    assert fact in item.text  # the reading text holds the fact whole
    assert squashed(" ".join(item.fact_lines)) == squashed(fact)
    assert (item.fact_break == "none") == layout.startswith("one-line")


@pytest.mark.slow
def test_the_same_seed_is_the_same_document_in_every_layout_and_another_seed_another():
    questions = {item_of(layout).question for layout in LAYOUTS}
    assert len(questions) == 1
    assert make_item("one-line-txt", SEED + 1).question not in questions


@pytest.mark.slow
@pytest.mark.parametrize("layout", PDF_LAYOUTS)
def test_a_pdf_has_the_value_on_its_recorded_page_and_the_fact_broken_as_promised(layout):
    item = item_of(layout)
    pages = page_chars(item.data)
    assert len(pages) == item.pages
    ordered = [reading_order(chars, layout == "two-column-pdf") for chars in pages]
    holding = [number for number, chars in enumerate(ordered, 1) if find(chars, item.answer)]
    assert item.page in holding
    fact = find(ordered[item.page - 1], " ".join(item.fact_lines))
    if layout == "page-broken-pdf":
        assert not fact  # the fact is on no one page: see the page-broken test
        return
    lines = {c.line for c in fact}
    assert len(lines) == (1 if layout == "one-line-pdf" else 2), item.fact_lines


@pytest.mark.slow
def test_the_hyphenated_pdf_breaks_a_word_of_the_fact_others_and_a_compound_at_lines_ends():
    item = item_of("hyphenated-pdf")
    assert item.fact_break.startswith("hyphen in ") and item.fact_lines[0].endswith("-")
    broken = line_end_hyphens([char for chars in page_chars(item.data) for char in chars])
    syllables = [(a, b) for a, b in broken if f"{a}{b}" in item.text]
    compounds = [(a, b) for a, b in broken if f"{a}-{b}" in item.text]
    head = item.fact_lines[0].split()[-1].rstrip("-")
    assert head in [a for a, _ in syllables]
    assert len(syllables) >= 3 and compounds, broken


def test_the_page_broken_pdf_runs_the_fact_past_the_footer_and_the_next_header():
    item = item_of("page-broken-pdf")
    before, after = (text.split("\r\n") for text in page_texts(item.data)[item.page - 2:item.page])
    assert item.fact_break != "value" and len(item.fact_lines) == 2
    assert squashed(before[-2]).endswith(squashed(item.fact_lines[0]))  # the page's last line of text ...
    assert before[-1] in item.furniture and re.search(r"\d", before[-1])  # ... then its page number, drawn after it
    assert squashed(after[0]) in {squashed(f"{item.furniture[0]} {part}") for part in item.furniture}  # the header
    assert squashed(after[1]).startswith(squashed(item.fact_lines[1]))  # ... then the rest of the fact
    footers = {re.sub(r"\d+", "N", text.split("\r\n")[-1]) for text in page_texts(item.data)}
    assert len(footers) == 1 and footers <= {"N", "- N -", "Page N of N"}


@pytest.mark.slow
def test_the_two_column_pdf_breaks_the_fact_in_one_column_of_a_page_drawn_across_columns():
    item = item_of("two-column-pdf")
    chars = page_chars(item.data)[item.page - 1]
    fact = find(reading_order(chars, columns=True), " ".join(item.fact_lines))
    assert len({c.left >= PAGE_MIDDLE for c in fact}) == 1 and len({c.line for c in fact}) == 2
    body = [c for c in chars if c.line[1] < 700]  # below the first page's title
    last_left = max(c.index for c in body if c.left < PAGE_MIDDLE)
    first_right = min(c.index for c in body if c.left >= PAGE_MIDDLE)
    assert first_right < last_left  # drawn row by row across both columns, not in reading order


def text_lines_of(item: LayoutItem) -> tuple[list[int], int]:
    """The file's 1-based lines that the fact sentence stands on, and the line where its value starts, found in the
    file's own lines (running headers and footers passed over)."""
    kept = [(char, number) for number, line in enumerate(item.data.decode().split("\n"), 1)
            if line not in item.furniture for char in line if not char.isspace() and char != "-"]
    fact, value = squashed(" ".join(item.fact_lines)), squashed(item.answer)
    at = "".join(char for char, _ in kept).find(fact)
    assert at >= 0
    matched = kept[at:at + len(fact)]
    return sorted({number for _, number in matched}), matched[len(fact) - len(value) - 1][1]


@pytest.mark.parametrize("layout", TEXT_LAYOUTS)
def test_a_text_file_has_the_value_on_its_recorded_line_and_the_fact_broken_as_promised(layout):
    item = item_of(layout)
    fact_lines, value_line = text_lines_of(item)
    assert value_line == item.line
    lines = item.data.decode().split("\n")
    if layout == "one-line-txt":
        assert len(fact_lines) == 1 and all("\n" not in p for p in item.text.split("\n\n"))
        return
    widest = {"wrapped-md": 80}.get(layout, 72)
    assert max(len(line) for line in lines) <= widest
    assert fact_lines[-1] - fact_lines[0] >= 1  # the fact crosses a line break
    if layout == "hyphenated-txt":
        assert lines[fact_lines[0] - 1].endswith("-") and item.fact_break.startswith("hyphen in ")


def test_the_paged_text_runs_the_fact_over_a_form_feed_past_footer_and_header():
    item = item_of("paged-txt")
    lines = item.data.decode().split("\n")
    fact_lines, value_line = text_lines_of(item)
    between = lines[fact_lines[0]:fact_lines[-1] - 1]  # after the fact's first line, before its last
    assert "\f" in between and lines[fact_lines[0]:fact_lines[0] + 1] != ["\f"]
    assert between[between.index("\f") - 1].endswith(f"[Page {item.page - 1}]")  # the footer, then the form feed
    assert item.furniture[2 * (item.page - 1)] in between  # the next page's header
    assert lines[:value_line].count("\f") == item.page - 1  # pages as form feeds end them


def test_the_markdown_file_has_headings_and_a_bulleted_list():
    lines = item_of("wrapped-md").data.decode().split("\n")
    assert lines[0].startswith("# ") and sum(line.startswith("## ") for line in lines) >= 5
    items = [number for number, line in enumerate(lines) if line.startswith("- ")]
    assert len(items) >= 3 and lines[items[0] + 1].startswith(("- ", "  "))
