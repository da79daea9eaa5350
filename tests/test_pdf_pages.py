"""An answer marked where it stands on its PDF page: the mark's box lies on the value's own glyphs, as PDFium places
them, on one-column, two-column, table and footnote pages, across a line's wrap and a page break, on a page drawn
sideways; the page drawn with the mark, and hostile pages refused or bounded in words."""

import io
import os
import time

import pypdfium2
import pytest
from PIL import Image

from longqa_core import pdf_pages
from longqa_core.documents import ReadLimits
from longqa_core.errors import DocumentError
from longqa_core.files import read_document
from tests.generated_pdfs import canvas_pdf, image_bomb_pdf, wrapped_matplotlib_pdf

pytest.importorskip("reportlab.pdfgen.canvas")


def read_from_file(tmp_path, data: bytes, name: str = "report.pdf"):
    path = tmp_path / name
    path.write_bytes(data)
    return read_document(path)


def glyph_boxes(data: bytes, page: int, value: str) -> list[list[tuple[float, float, float, float]]]:
    """Each occurrence of `value` on `page` (1-based): its characters' boxes as PDFium places them (tight boxes)."""
    textpage = pypdfium2.PdfDocument(data)[page - 1].get_textpage()
    searcher = textpage.search(value, match_case=True)
    found = []
    while (occurrence := searcher.get_next()) is not None:
        first, count = occurrence
        found.append([textpage.get_charbox(i) for i in range(first, first + count)
                      if not textpage.get_text_range(i, 1).isspace()])
    return found


def centre_on_glyphs(box, glyphs) -> bool:
    """Whether the middle of `box` lies within the run of `glyphs` (left of the last one's right edge, right of
    the first one's left edge, between the lowest bottom and the highest top)."""
    x, y = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    return (min(g[0] for g in glyphs) <= x <= max(g[2] for g in glyphs)
            and min(g[1] for g in glyphs) <= y <= max(g[3] for g in glyphs))


def marks_of(document, value: str, after: str = ""):
    start = document.text.index(value, document.text.index(after) if after else 0)
    return pdf_pages.answer_marks(document, [(start, start + len(value))])[0]


FILLER = "The survey went on along the coast and wrote down what it found, hill by hill, that whole spring."


def filler_page(canvas, number: int) -> None:
    canvas.setFont("Helvetica", 10)
    for row in range(20):
        canvas.drawString(72, 700 - 14 * row, f"{FILLER} ({number}.{row})"[:90])


@pytest.mark.slow
def test_a_value_in_one_column_is_marked_on_its_glyphs_on_the_right_page(tmp_path):
    data = wrapped_matplotlib_pdf(n_pages=6, fact_page=4)
    document = read_from_file(tmp_path, data)
    (mark,) = marks_of(document, "2250")
    assert mark.page == 4 and (mark.width, mark.height) == pytest.approx((595.44, 841.68), abs=0.1)
    (box,) = mark.boxes
    (glyphs,) = glyph_boxes(data, 4, "2250")
    assert centre_on_glyphs(box, glyphs)
    # the view box is the same box from the top-left of the page as shown
    left, top, right, bottom = mark.view_boxes[0]
    assert (left, right) == pytest.approx((box[0], box[2]), abs=0.05)
    assert (top, bottom) == pytest.approx((mark.height - box[3], mark.height - box[1]), abs=0.05)


@pytest.mark.slow
def test_a_name_wrapped_over_two_lines_is_marked_on_both(tmp_path):
    data = wrapped_matplotlib_pdf(n_pages=3, fact_page=2)
    document = read_from_file(tmp_path, data)
    (mark,) = marks_of(document, "Vesmira Quonthal")
    assert mark.page == 2 and len(mark.boxes) == 2
    (first,) = glyph_boxes(data, 2, "Vesmira")
    (second,) = glyph_boxes(data, 2, "Quonthal")
    assert centre_on_glyphs(mark.boxes[0], first) and centre_on_glyphs(mark.boxes[1], second)


def test_the_value_in_the_right_column_of_two_is_marked_there_not_where_the_left_column_repeats_it(tmp_path):
    left = ["The first column speaks of the", "river, whose depth is 2250 feet", "by the old count, and more."] + \
        ["The left column goes on and on."] * 8
    right = ["The second column is about the", "hill. The altitude of Vesmira", "Quonthal is 2250 metres, as"] + \
        ["the right column says, and on."] * 8

    def draw(canvas):
        canvas.setFont("Helvetica", 10)
        for row, (a, b) in enumerate(zip(left, right)):  # drawn across: left line, right line, ...
            canvas.drawString(72, 700 - 12 * row, a)
            canvas.drawString(320, 700 - 12 * row, b)
    data = canvas_pdf([draw])
    document = read_from_file(tmp_path, data)
    (mark,) = marks_of(document, "2250", after="Vesmira")
    on_the_right = [g for g in glyph_boxes(data, 1, "2250") if g[0][0] > 300]
    (box,) = mark.boxes
    assert centre_on_glyphs(box, on_the_right[0]) and box[0] > 300


@pytest.mark.slow
def test_a_table_cell_and_a_footnote_are_marked_where_they_stand(tmp_path):
    def draw(canvas):
        canvas.setFont("Helvetica", 11)
        canvas.drawString(72, 720, "The survey measured the hills of the north in the spring of that year and wrote")
        canvas.drawString(72, 706, "down what it found, hill by hill, in the table below.")
        for row, (name, value, year) in enumerate([("Brindle Cove", "40 m", "1931"), ("Vesmira Quonthal", "2250 m",
                                                                                     "1932")]):
            canvas.drawString(72, 680 - 14 * row, name)
            canvas.drawString(250, 680 - 14 * row, value)
            canvas.drawString(400, 680 - 14 * row, year)
        canvas.setFont("Helvetica", 7)
        canvas.drawString(72, 60, "1 The keeper of the lighthouse at Orrin Point was named Talvey Brennick.")
    data = canvas_pdf([draw])
    document = read_from_file(tmp_path, data)
    (cell,) = marks_of(document, "2250 m")
    (glyphs,) = glyph_boxes(data, 1, "2250 m")
    assert centre_on_glyphs(cell.boxes[0], glyphs) and cell.boxes[0][2] < 390  # the cell, not the year beside it
    (note,) = marks_of(document, "Talvey Brennick")
    (glyphs,) = glyph_boxes(data, 1, "Talvey Brennick")
    assert centre_on_glyphs(note.boxes[0], glyphs)


@pytest.mark.slow
def test_an_answer_over_a_page_break_is_marked_on_both_pages(tmp_path):
    def first(canvas):
        filler_page(canvas, 1)
        canvas.drawString(72, 700 - 14 * 20, "and the keeper of the light was named Talvey")

    def second(canvas):
        canvas.setFont("Helvetica", 10)
        canvas.drawString(72, 700, "Brennick, who kept it for forty years.")
    data = canvas_pdf([first, second])
    document = read_from_file(tmp_path, data)
    marks = marks_of(document, "Talvey Brennick")
    assert [mark.page for mark in marks] == [1, 2]
    assert centre_on_glyphs(marks[0].boxes[0], glyph_boxes(data, 1, "Talvey")[0])
    assert centre_on_glyphs(marks[1].boxes[0], glyph_boxes(data, 2, "Brennick")[0])


@pytest.mark.slow
def test_a_page_drawn_sideways_is_marked_in_its_own_space(tmp_path):
    def draw(canvas):
        canvas.setPageRotation(90)
        canvas.rotate(90)
        canvas.setFont("Helvetica", 11)
        for row, line in enumerate(["In the spring survey of the northern hills the", "altitude of Vesmira Quonthal "
                                    "was found to be", "2250 metres, and nobody has measured it since."]):
            canvas.drawString(72, -72 - 14 * row, line)
    data = canvas_pdf([draw])
    document = read_from_file(tmp_path, data)
    (mark,) = marks_of(document, "2250")
    (glyphs,) = glyph_boxes(data, 1, "2250")
    assert centre_on_glyphs(mark.boxes[0], glyphs)
    assert (mark.width, mark.height) == pytest.approx((792, 612))  # as shown: turned


@pytest.mark.slow
def test_the_page_is_drawn_with_the_mark_where_the_value_stands(tmp_path):
    data = wrapped_matplotlib_pdf(n_pages=3, fact_page=2)
    document = read_from_file(tmp_path, data)
    (mark,) = marks_of(document, "2250")
    image = Image.open(io.BytesIO(pdf_pages.render_page(document.source, document.name, mark))).convert("RGB")
    assert abs(image.width - pdf_pages.PAGE_IMAGE_WIDTH_PX) <= 1  # whole pixels, rounded up
    scale = image.width / mark.width
    left, top, right, bottom = (edge * scale for edge in mark.view_boxes[0])
    inside = image.getpixel((round(left + 1), round((top + bottom) / 2)))
    assert inside[2] < 200 < inside[0]  # the highlighter's yellow (or its edge) over the value
    assert image.getpixel((5, 5)) == (255, 255, 255)  # the margin as the page has it


@pytest.mark.slow
def test_a_huge_page_is_refused_in_words_and_its_file_gone_is_said(tmp_path):
    def draw(canvas):
        canvas.setFont("Helvetica", 40)
        canvas.drawString(100, 5000, "The altitude of Vesmira Quonthal is 2250.")
    document = read_from_file(tmp_path, canvas_pdf([draw], size=(10_000, 10_000)))
    (mark,) = marks_of(document, "2250")
    with pytest.raises(DocumentError, match=r"10,000 × 10,000 points, over the 5,000 points a side"):
        pdf_pages.render_page(document.source, document.name, mark)
    os.remove(document.source)
    with pytest.raises(DocumentError, match="no longer on this server"):
        pdf_pages.render_page(document.source, document.name, mark)


@pytest.mark.slow
def test_an_image_bomb_is_drawn_within_the_childs_memory_and_time_or_refused_in_words(tmp_path):
    document = read_from_file(tmp_path, image_bomb_pdf())
    (mark,) = marks_of(document, "2250")
    began = time.perf_counter()
    try:
        png = pdf_pages.render_page(document.source, document.name, mark, ReadLimits(max_read_s=20))
    except DocumentError as exc:
        assert "could not be drawn" in str(exc) or "time limit" in str(exc)
    else:
        assert abs(Image.open(io.BytesIO(png)).width - pdf_pages.PAGE_IMAGE_WIDTH_PX) <= 1
    assert time.perf_counter() - began < 60
