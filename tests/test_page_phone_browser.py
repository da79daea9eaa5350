"""The page's looks at a desktop's width (1400x900) and a phone's (400x800) in Debian's chromium (Playwright): every
table cell keeps its words whole, a table reads as cards on a phone and one that scrolls sideways says so, the
answer comes into view after each way of asking, and two errors leave one notice on the screen, clear of the upload
box.

Shares tests/test_app_browser.py's browser set-up and its way of waiting for an answer; the page's stylesheet and
script are page/style.css and page/behaviour.js.
"""

from __future__ import annotations

import time

import pytest

from longqa.session import Session
from bench.browser import CHROMIUM
from tests.conftest import served_page
from tests.test_app_browser import SCREENS, answered, frozen_while, launch, open_at, wait_until

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                                     "(apt-get install -y chromium; CI installs it)"),
]

IN_VIEW_S = 5.0  # the answer scrolls into view when it shows: at most a few frames later (3x and more)

# Every word of every table cell that shows, split across lines ("rank" one letter per line, "0./33/11"), as
# "table: word". A word is a run of non-blank characters; a line may end after a hyphen, a slash or an underscore
# inside one ("out-of-/memory", "supports_/gradient_/checkpointing"), as text does, but nowhere else.
BROKEN_WORDS = """() => {
  const broken = [];
  const lineOf = (node, at) => {
    const range = document.createRange();
    range.setStart(node, at);
    range.setEnd(node, at + 1);
    const boxes = Array.from(range.getClientRects()).filter(box => box.width > 0);
    return boxes.length ? Math.round(boxes[0].top) : null;
  };
  for (const table of document.querySelectorAll('.readout-table')) {
    if (!table.offsetParent) continue;
    for (const cell of table.querySelectorAll('th, td')) {
      const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
      for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        for (const word of node.data.matchAll(/\\S+/g)) {
          let line = lineOf(node, word.index);
          for (let i = 1; i < word[0].length; i++) {
            const next = lineOf(node, word.index + i);
            if (next !== null && line !== null && next !== line && !'-/_\u2013'.includes(word[0][i - 1])) {
              broken.push(`${table.querySelector('.readout-title').innerText}: ${word[0]}`);
              break;
            }
            line = next ?? line;
          }
        }
      }
    }
  }
  return broken;
}"""

# Each readout table that shows (page/tables.py): its title, its columns, whether its rows show as cards each cell
# labelled with its column's header, whether its header row shows, and whether it scrolls sideways with the words
# shown after its title (the stylesheet's hint).
TABLES = """() => Array.from(document.querySelectorAll('.readout-table')).filter(t => t.offsetParent).map(t => {
  const table = t.querySelector('table'), box = t.querySelector('.readout-scroll');
  const headers = Array.from(table.querySelectorAll('thead th'), th => th.innerText.trim());
  const rows = Array.from(table.querySelectorAll('tbody tr'));
  return {name: t.querySelector('.readout-title').innerText.trim(), columns: headers.length, rows: rows.length,
          cards: rows.length > 0 && rows.every(row => getComputedStyle(row).display === 'block'
            && Array.from(row.cells).every((cell, i) =>
              getComputedStyle(cell, '::before').content === JSON.stringify(headers[i]))),
          headerShown: table.querySelector('thead').getBoundingClientRect().height > 2,
          sideways: box.scrollWidth > box.clientWidth + 1,
          hint: getComputedStyle(t.querySelector('.readout-title'), '::after').content};
})"""
# What the page shows after an answer, a plan and the reference panels opened: every readout table but the training
# step's and the comparison's (tests/test_details_browser.py looks at the comparison).
SHOWN_TABLES = {"Documents read", "Top answers", "Run", "Latency by stage", "Memory", "Run history (this page)",
                "Load readout", "Every profile on that machine (predicted)", "Profiles on this machine", "Strategies"}

# Where an element is on the screen: [top, bottom] in CSS pixels of the viewport.
SPAN = "selector => { const box = document.querySelector(selector).getBoundingClientRect(); " \
       "return [box.top, box.bottom]; }"

# The notices' messages that show (gradio's toasts), and the boxes they cover.
NOTICES = """() => Array.from(document.querySelectorAll('[data-testid=toast-text]'))
  .filter(text => text.getClientRects().length && getComputedStyle(text).visibility !== 'hidden')
  .map(text => text.innerText.trim())"""
NOTICE_BOXES = """() => Array.from(document.querySelectorAll('[data-testid=toast-body]'))
  .filter(body => body.getClientRects().length).map(body => body.getBoundingClientRect().toJSON())"""


@pytest.fixture(scope="module")
def served(tiny_model_dir):
    with frozen_while(served_page(Session(), tiny_model_dir, launch)) as page_served:
        yield page_served


def answer_in_view(page) -> bool:
    top, _ = page.evaluate(SPAN, "#answer-status")
    _, bottom = page.evaluate(SPAN, "#best-answer")
    return top >= 0 and bottom <= page.viewport_size["height"]


def comes_into_view(page, in_view) -> bool:
    try:
        wait_until(lambda: in_view(page), IN_VIEW_S)
    except AssertionError:
        return False
    return True


def open_accordion(page, title: str) -> None:
    page.get_by_role("button", name=title).first.click()


@pytest.mark.parametrize("width", SCREENS)
def test_every_table_keeps_its_words_whole_and_reads_as_cards_on_a_phone(browser, served, width):
    page = open_at(browser, served[1], width)
    answered(page, lambda: page.locator("#try-example").click())  # fills the answer's tables and the history
    for title in ("Plan for another machine", "Profiles and strategies"):
        open_accordion(page, title)
    page.get_by_role("button", name="Plan", exact=True).click()
    wait_until(lambda: "(recommended)" in page.get_by_role(
        "table", name="Every profile on that machine (predicted)", exact=True).inner_text())
    time.sleep(1.0)  # the tables just shown are laid out, and marked where they scroll

    tables = {table["name"]: table for table in page.evaluate(TABLES)}
    assert SHOWN_TABLES <= set(tables), f"tables not shown as readout tables: {SHOWN_TABLES - set(tables)}"
    assert page.evaluate(BROKEN_WORDS) == [], f"table cells split these words at {width} px"
    scrolling = {name: table["hint"] for name, table in tables.items() if table["sideways"]}
    assert all("scroll" in hint for hint in scrolling.values()), f"tables scroll sideways, unsaid: {scrolling}"
    if width == 400:  # a phone: a card per row, each value under its header; nothing to scroll sideways
        wide = {name: table for name, table in tables.items() if table["columns"] > 2 and table["rows"]}
        assert {"Top answers", "Memory", "Run history (this page)", "Load readout"} <= set(wide)
        assert [name for name, table in wide.items() if not table["cards"] or table["headerShown"]] == []
        assert scrolling == {}, f"tables scroll sideways on a phone: {list(scrolling)}"
    else:
        assert [name for name, table in tables.items() if table["cards"] or not table["headerShown"]] == []


@pytest.mark.parametrize("width", SCREENS)
def test_the_answer_comes_into_view_after_each_way_of_asking(browser, served, width):
    page = open_at(browser, served[1], width)
    question = page.get_by_label("Question", exact=True)
    example = page.locator(".gallery button").nth(1)

    def enter():
        question.fill("What is the frequency of Chiomklian Oustklaeth?")
        question.press("Enter")

    ways = {"Try it": lambda: page.locator("#try-example").click(),
            "an example below the form": example.click,
            "Ask": lambda: page.get_by_role("button", name="Ask", exact=True).click(),
            "Enter": enter,
            "Read the whole document": lambda: page.get_by_role("button", name="Read the whole document").click()}
    missed = {}
    for way, press in ways.items():
        page.evaluate("window.scrollTo(0, 0)")  # the visitor starts at the top; a click scrolls to its button
        answered(page, press)
        if not comes_into_view(page, answer_in_view):
            missed[way] = (page.evaluate(SPAN, "#answer-status"), page.evaluate(SPAN, "#best-answer"))
    assert missed == {}, f"the answer area ([top, bottom] of its verdict and answer) is off the screen after {missed}"

    open_accordion(page, "Compare profiles")
    summary = page.locator("#compare-summary")
    page.get_by_role("button", name="Compare profiles", exact=True).click()
    wait_until(lambda: summary.inner_text().strip() != "")
    assert comes_into_view(page, lambda p: 0 <= p.evaluate(SPAN, "#compare-table")[0] < p.viewport_size["height"]), \
        f"the comparison is off the screen: [top, bottom] {page.evaluate(SPAN, '#compare-table')}"


@pytest.mark.parametrize("width", SCREENS)
def test_two_errors_leave_one_notice_clear_of_the_upload_box(browser, served, width):
    page = open_at(browser, served[1], width)
    page.get_by_role("button", name="Ask", exact=True).click()  # no document
    wait_until(lambda: page.evaluate(NOTICES) != [])
    box = page.get_by_label("Or paste text", exact=True)
    box.fill("The frequency of Chiomklian Oustklaeth is 30.")
    box.blur()
    page.get_by_role("button", name="Ask", exact=True).click()  # no question: a note under its box (issue 58)
    wait_until(lambda: page.locator("#question-note").is_visible())

    notices = page.evaluate(NOTICES)
    assert len(notices) <= 1 and not any("question" in n.lower() for n in notices), f"the notices showing: {notices}"
    upload = page.locator("#documents").bounding_box()
    for notice in page.evaluate(NOTICE_BOXES):
        overlap_x = min(notice["right"], upload["x"] + upload["width"]) - max(notice["left"], upload["x"])
        overlap_y = min(notice["bottom"], upload["y"] + upload["height"]) - max(notice["top"], upload["y"])
        assert overlap_x <= 0 or overlap_y <= 0, f"the notice {notice} covers the upload box {upload}"
