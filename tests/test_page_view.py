"""The answer's PDF page on the page: offered after an answer from a PDF, drawn only when opened, kept for the
visitor who asked (another visitor gets nothing of it), said in words when it cannot be drawn; and the passage's
place in its file (lines, pages, headings)."""

from __future__ import annotations

import io

import gradio as gr
import pytest
from PIL import Image

from longqa_core.documents import Document, Heading, passage_place
from longqa_core.files import read_document
from page import asking, page_view
from tests.generated_pdfs import WRAPPED_QUESTION, wrapped_matplotlib_pdf


def visitor(session: str) -> gr.Request:
    return gr.Request(session_hash=session)


@pytest.fixture()
def report(tmp_path):
    path = tmp_path / "survey.pdf"
    path.write_bytes(wrapped_matplotlib_pdf(n_pages=4, fact_page=3))
    return path


@pytest.mark.slow
def test_the_answers_page_is_offered_drawn_when_opened_kept_and_only_for_its_visitor(ctx, report, monkeypatch):
    list(asking.ask(ctx, [str(report)], "", WRAPPED_QUESTION, 3, "full", [], None, "", request=visitor("one")))
    room = page_view.room_after_answer(visitor("one"))
    assert room["page_room"]["visible"] is True and "survey.pdf, page" in room["page_room"]["label"]
    choices = room["page_pick"]["choices"]
    assert choices and all("survey.pdf, page" in str(choice) for choice in choices)
    assert page_view.kept_image("one", room["page_pick"]["value"]) is None  # nothing drawn before it is opened

    shown = asking.show_answer_page(ctx, room["page_pick"]["value"], visitor("one"))
    image = Image.open(shown["page_image"])  # the child's PNG as a file, as gradio serves it
    assert image.format == "PNG" and image.width >= 900
    page = page_view.page_of("one", room["page_pick"]["value"])
    scale = image.width / page.mark.width
    left, top, right, bottom = (edge * scale for edge in page.mark.view_boxes[0])
    pixel = image.convert("RGB").getpixel((round(left + 1), round((top + bottom) / 2)))
    assert pixel[0] - pixel[2] > 60, pixel  # the highlighter's yellow where the answer stands

    def not_again(*args, **kwargs):
        raise AssertionError("drawn twice")
    monkeypatch.setattr(asking, "page_image", not_again)
    assert asking.show_answer_page(ctx, page.choice, visitor("one"))["page_image"] == shown["page_image"]
    assert asking.show_answer_page(ctx, page.choice, visitor("two")) == {"page_note": page_view.NO_PAGE,
                                                                           "page_image": None}
    assert page_view.room_after_answer(visitor("two"))["page_room"]["visible"] is False


@pytest.mark.slow
def test_a_page_whose_file_is_gone_is_said_in_the_room(ctx, report):
    list(asking.ask(ctx, [str(report)], "", WRAPPED_QUESTION, 1, "full", [], None, "", request=visitor("gone")))
    choice = page_view.room_after_answer(visitor("gone"))["page_pick"]["value"]
    report.unlink()
    shown = asking.show_answer_page(ctx, choice, visitor("gone"))
    assert shown["page_image"] is None and "no longer on this server" in shown["page_note"]


@pytest.mark.slow
def test_an_answer_from_text_offers_no_page(ctx, tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("The colour of Zorbin is teal.\n" * 20)
    list(asking.ask(ctx, [str(path)], "", "What is the colour of Zorbin?", 3, "full", [], None, "",
                    request=visitor("t")))
    assert page_view.room_after_answer(visitor("t"))["page_room"]["visible"] is False


def test_the_passages_place_is_its_lines_its_pages_or_its_headings(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("".join(f"Line {n} of the notes.\n" for n in range(1, 500)))
    document = read_document(notes)
    start = document.text.index("Line 412 ")
    assert passage_place(document, start, start + 20) == "notes.txt, line 412"
    assert passage_place(document, start, document.text.index("Line 416 ")) == "notes.txt, lines 412–415"
    pdf = Document("report.pdf", "one\ntwo\nthree", page_starts=(0, 4, 8), has_lines=False)
    assert passage_place(pdf, 1, 6) == "report.pdf, pages 1–2"
    html = Document("page.html", "Results\nAltitude\nThe altitude is 2250.\nDepth\nThe depth is 40.", has_lines=False,
                    headings=(Heading(0, 1, "Results"), Heading(8, 2, "Altitude"), Heading(39, 2, "Depth")))
    assert passage_place(html, 17, 30) == "page.html, § Results › Altitude"
    assert passage_place(html, 45, 50) == "page.html, § Results › Depth"
