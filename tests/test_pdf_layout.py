"""A PDF page's pieces of text in reading order: lines from pieces, columns, running lines, paragraphs; and PDFs
made as people's are (matplotlib, two columns drawn across, hyphenated, page-broken) read whole."""

import io
import time

import pypdfium2
import pytest

from longqa_core.documents import locate
from longqa_core.files import read_document
from longqa_core.pdf_layout import Segment, baseline_pieces, find_gutter, page_lines, reading_order
from tests.generated_pdfs import WRAPPED_FACT, WRAPPED_HEADER, wrapped_matplotlib_pdf


def word_segments(words: str, x: float, y: float, size: float = 10.0) -> list[Segment]:
    """One segment a word, as some PDF writers draw them (0.5 em a character, a space between words)."""
    segments = []
    for word in words.split():
        width = 0.5 * size * len(word)
        segments.append(Segment(word, x, y, x + width, y + 0.7 * size, size))
        x += width + 0.25 * size
    return segments


def test_words_drawn_one_by_one_make_one_line_and_a_gutter_cuts_it():
    pieces = baseline_pieces(word_segments("The altitude of", 72, 700) + word_segments("Other column", 320, 700))
    assert [p.text for p in pieces] == ["The altitude of", "Other column"]


def column_page(lefts: list[str], rights: list[str], title: str | None = None) -> list[Segment]:
    """A page of two columns drawn across (left line, right line, ...), with a full-width title on top."""
    segments = [Segment(title, 72, 740, 540, 752, 14)] if title else []
    for row, (left, right) in enumerate(zip(lefts, rights)):
        y = 700 - 12 * row
        segments += [Segment(left, 72, y, 290, y + 7, 10), Segment(right, 320, y, 540, y + 7, 10)]
    return segments


def test_two_columns_drawn_across_are_read_left_column_first_after_the_full_width_title():
    lefts = [f"left {n}" for n in range(6)]
    rights = [f"right {n}" for n in range(6)]
    pieces = baseline_pieces(column_page(lefts, rights, "A title across both columns"))
    assert find_gutter(pieces) == pytest.approx(305, abs=1)
    assert [p.text for p in reading_order(pieces)] == ["A title across both columns", *lefts, *rights]


def test_a_page_of_one_column_with_short_last_lines_has_no_gutter():
    lines = ["A long line of prose that runs the whole width of the page here", "short end.",
             "Another long line of prose that runs the whole width of the page", "and a last one."] * 3
    segments = [Segment(text, 72, 700 - 12 * i, 72 + 4.5 * len(text), 707 - 12 * i, 10) for i, text in enumerate(lines)]
    pieces = baseline_pieces(segments)
    assert find_gutter(pieces) is None
    assert [p.text for p in reading_order(pieces)] == lines


def test_page_lines_leave_out_running_lines_and_mark_paragraphs_and_headings():
    pages = []
    words = ["alder", "birch", "cedar"]
    for number, word in enumerate(words, start=1):
        segments = [Segment("Harbour Report 2024", 72, 760, 200, 767, 9), Segment(f"Page {number} of 3", 280, 40, 340, 47, 9)]
        segments += [Segment("Results" if number == 1 else f"Body {number} a", 72, 700, 150, 712, 14 if number == 1 else 10)]
        segments += [Segment(f"Text {word} b", 72, 686, 150, 693, 10), Segment(f"Text {word} c", 72, 674, 150, 681, 10),
                     Segment(f"Text {word} d", 72, 640, 150, 647, 10)]
        pages.append(segments)
    lines = page_lines(pages)
    assert not any("Harbour" in line.text or "Page" in line.text for line in lines)
    assert [line.text for line in lines if line.is_heading] == ["Results"]
    assert [line.text for line in lines if line.paragraph_before] == [f"Text {word} d" for word in words]


# PDFs made as people make them

@pytest.mark.slow
def test_a_matplotlib_pdf_whose_sentence_wraps_inside_a_name_reads_it_whole_on_its_page():
    data = wrapped_matplotlib_pdf()
    assert "Vesmira\r\nQuonthal" in pypdfium2.PdfDocument(data)[16].get_textpage().get_text_range()  # as drawn
    document = read_document(data, name="survey.pdf")
    assert WRAPPED_FACT in document.text
    assert WRAPPED_HEADER not in document.text and "Page 17" not in document.text
    value = document.text.index("2250")
    assert locate(document, value, value + 4).page == 17


def test_a_reportlab_pdf_in_two_columns_hyphenated_and_over_a_page_break_reads_in_order():
    canvas_module = pytest.importorskip("reportlab.pdfgen.canvas")
    buffer = io.BytesIO()
    canvas = canvas_module.Canvas(buffer, pagesize=(612, 792))
    left = ["Each member of the club keeps", "a log of the tides. The alti-", "tude of Vesmira Quonthal is",
            "2250, as the survey found.", "Nobody disputes it now."] + ["More prose fills the column."] * 6
    right = ["The right column starts", "here and goes on to the", "foot of the page, where it"] + \
        ["keeps on going for a while"] * 7 + ["and it stops in the middle of a"]
    for number in (1, 2):
        canvas.setFont("Helvetica", 8)
        canvas.drawString(72, 760, "Journal of Harbour Studies")
        canvas.drawString(300, 40, f"- {number} -")
        canvas.setFont("Helvetica", 10)
        if number == 1:
            for row, (a, b) in enumerate(zip(left, right)):  # drawn across: left line, right line, ...
                canvas.drawString(72, 700 - 12 * row, a)
                canvas.drawString(320, 700 - 12 * row, b)
        else:
            canvas.drawString(72, 700, "sentence that runs over. Then it ends.")
            for row in range(1, 6):
                canvas.drawString(72, 700 - 12 * row, "The second page goes on in one column here.")
        canvas.showPage()
    canvas.save()
    document = read_document(buffer.getvalue(), name="journal.pdf")
    text = document.text
    assert "The altitude of Vesmira Quonthal is 2250, as the survey found." in text
    assert "and it stops in the middle of a sentence that runs over." in text
    assert text.index("Nobody disputes") < text.index("The right column starts")
    assert "Journal of Harbour" not in text and "- 1 -" not in text
    assert locate(document, text.index("sentence that runs"), text.index("sentence that runs") + 8).page == 2


def reportlab_pdf(draw) -> bytes:
    """A one-page PDF that `draw(canvas)` draws, in Helvetica."""
    canvas_module = pytest.importorskip("reportlab.pdfgen.canvas")
    buffer = io.BytesIO()
    canvas = canvas_module.Canvas(buffer, pagesize=(612, 792))
    draw(canvas)
    canvas.showPage()
    canvas.save()
    return buffer.getvalue()


PROSE = ["In the spring survey of the northern hills the", "altitude of Vesmira Quonthal was found to be",
         "2250 metres, and nobody has measured it since.", "The river below it floods each spring."]


def test_text_set_at_one_point_and_scaled_by_its_text_matrix_reads_in_order():
    def draw(canvas):  # as cairo and Quartz write text: "1 Tf", the size in the text matrix
        for row, line in enumerate(PROSE):
            text = canvas.beginText()
            text.setFont("Helvetica", 1)
            text.setTextTransform(11, 0, 0, 11, 72, 700 - 14 * row)
            for word in line.split():  # a text object a word
                text.textOut(word + " ")
            canvas.drawText(text)
    assert read_document(reportlab_pdf(draw), name="scaled.pdf").text == " ".join(PROSE)


def test_a_page_drawn_a_quarter_turn_round_reads_in_order():
    def draw(canvas):
        canvas.setPageRotation(90)
        canvas.rotate(90)  # the text runs up the portrait page, to read across the landscape one
        canvas.setFont("Helvetica", 11)
        for row, line in enumerate(PROSE):
            canvas.drawString(72, -72 - 14 * row, line)
    assert read_document(reportlab_pdf(draw), name="landscape.pdf").text == " ".join(PROSE)


@pytest.mark.slow
def test_a_page_of_glyphs_drawn_one_by_one_reads_whole_and_soon():
    from reportlab.pdfbase.pdfmetrics import stringWidth

    def draw(canvas):
        canvas.setFont("Helvetica", 11)
        for row, line in enumerate(PROSE * 6):
            x = 72.0
            for char in line:
                canvas.drawString(x, 700 - 14 * row, char)
                x += stringWidth(char, "Helvetica", 11)
    began = time.perf_counter()
    document = read_document(reportlab_pdf(draw), name="glyphs.pdf")
    assert time.perf_counter() - began < 15  # about 1 s with the child's start; each object's own search: quadratic
    assert document.text.startswith(" ".join(PROSE)) and "Vesmira Quonthal" in document.text


@pytest.mark.slow
def test_a_tables_row_stays_on_one_line():
    def draw(canvas):
        canvas.setFont("Helvetica", 11)
        canvas.drawString(72, 720, "The survey measured the hills of the north in the spring of that year and wrote")
        canvas.drawString(72, 706, "down what it found, hill by hill, in the table below.")
        for row, (name, value) in enumerate([("Vesmira Quonthal", "2250 m"), ("Brindle Cove", "40 m")]):
            canvas.drawString(72, 680 - 14 * row, name)
            canvas.drawString(300, 680 - 14 * row, value)
    text = read_document(reportlab_pdf(draw), name="table.pdf").text
    assert "Vesmira Quonthal   2250 m\nBrindle Cove   40 m" in text
