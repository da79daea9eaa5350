"""The answer seen where it stands: under the passage, a closed "See it on the page" that, opened, shows the PDF page
of the answer with the answer's characters marked (drawn by `pdf_pages.render_page` in a reading child), and a pick
of the page of each top answer (an answer over a page break has both). Nothing is drawn until the visitor opens it;
the pages drawn last are kept for the visitor, a few at most.

It holds each page session's answers' pages (`keep_pages`, called by the answer) and the room's layout; drawing at
the visitor's place at the door is `page.asking.show_answer_page`'s.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import gradio as gr
from gradio.blocks import Block

LABEL = "See it on the page"
PICK_LABEL = "Answer and page"
IMAGE_LABEL = "The page, the answer marked"
MAX_SESSIONS = 256  # page sessions whose answers' pages are kept (the oldest go first)
KEPT_IMAGES = 2  # pictures kept per page session: going back to the one before draws nothing again
NO_PAGE = "This answer has no page to show."
CHOICE_CHARS = 40  # of an answer's text, in the pick of pages


@dataclass(frozen=True)
class AnswerPage:
    """One page of one answer: its choice in the pick ("1. “2250”, report.pdf, page 17"), its document's name and
    file, and where it stands there."""

    choice: str
    document: str
    source: str
    mark: object  # its `pdf_pages.PageMark`


@dataclass
class SessionPages:
    pages: list[AnswerPage]
    images: OrderedDict = field(default_factory=OrderedDict)  # choice -> its picture's file, the last KEPT_IMAGES


_PAGES: OrderedDict[str, SessionPages] = OrderedDict()
_LOCK = threading.Lock()


def answer_pages(result, documents) -> list[AnswerPage]:
    """Each top answer's marked pages, in rank order (", continued" for the second page of an answer over a page
    break); none where nothing was found."""
    pages = []
    if result.verdict is not None and result.verdict.found is False:
        return pages
    for rank, answer in enumerate(result.answers, 1):
        marks = answer.location.marks if answer.location is not None else ()
        document = documents[answer.document_index] if 0 <= answer.document_index < len(documents) else None
        if not marks or document is None or document.source is None:
            continue
        for number, mark in enumerate(marks):
            more = ", continued" if number else ""
            text = answer.text if len(answer.text) <= CHOICE_CHARS else answer.text[:CHOICE_CHARS - 1] + "…"
            pages.append(AnswerPage(f"{rank}. “{text}”, {answer.document}, page {mark.page}{more}", document.name,
                                    document.source, mark))
    return pages


def keep_pages(session: str | None, result, documents) -> None:
    """What `room_after_answer` and `page.asking.show_answer_page` offer this page session: its last answer's
    pages."""
    if session is None:
        return
    with _LOCK:
        _PAGES[session] = SessionPages(answer_pages(result, documents))
        _PAGES.move_to_end(session)
        while len(_PAGES) > MAX_SESSIONS:
            _PAGES.popitem(last=False)


def page_of(session: str | None, choice) -> AnswerPage | None:
    """The page the visitor picked (the first where the pick names none), or None."""
    with _LOCK:
        held = _PAGES.get(session)
        if held is None or not held.pages:
            return None
        return next((page for page in held.pages if page.choice == choice), held.pages[0])


def kept_image(session: str | None, choice: str) -> str | None:
    """The file of the picture drawn for this page session's `choice`, while it is there (download folders go
    after an hour)."""
    with _LOCK:
        held = _PAGES.get(session)
        path = held.images.get(choice) if held is not None else None
    return path if path is not None and os.path.exists(path) else None


def keep_image(session: str | None, choice: str, path: str) -> None:
    with _LOCK:
        held = _PAGES.get(session)
        if held is None:
            return
        held.images[choice] = path
        held.images.move_to_end(choice)
        while len(held.images) > KEPT_IMAGES:
            held.images.popitem(last=False)


def build_page_room() -> dict[str, Block]:
    """The closed room under the passage: hidden until an answer stands on a PDF page."""
    with gr.Accordion(LABEL, open=False, visible=False, elem_id="answer-page-room") as room:
        pick = gr.Radio([], label=PICK_LABEL, visible=False, elem_id="answer-page-pick")
        note = gr.Markdown(elem_id="answer-page-note")
        image = gr.Image(label=IMAGE_LABEL, type="filepath", format="png", interactive=False, elem_id="answer-page",
                         buttons=["fullscreen", "download"])
    return {"page_room": room, "page_pick": pick, "page_note": note, "page_image": image}


def room_closed() -> dict:
    """The room hidden and emptied (a new question, new documents)."""
    return {"page_room": gr.update(visible=False, open=False), "page_pick": gr.update(choices=[], value=None,
                                                                                      visible=False),
            "page_note": "", "page_image": None}


def room_after_answer(request: gr.Request = None) -> dict:
    """After an answer: the room shown, closed, where an answer stands on a PDF page, its label naming the first
    page; the pick of the answers' pages where there is more than one."""
    with _LOCK:
        held = _PAGES.get(getattr(request, "session_hash", None))
        pages = list(held.pages) if held is not None else []
    if not pages:
        return room_closed()
    first = pages[0]
    return {"page_room": gr.update(visible=True, open=False,
                                   label=f"{LABEL}: {first.document}, page {first.mark.page}"),
            "page_pick": gr.update(choices=[p.choice for p in pages], value=first.choice, visible=len(pages) > 1),
            "page_note": "", "page_image": None}
