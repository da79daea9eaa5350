"""The page's looks at a desktop's width (1400x900) and a phone's (400x800) in Debian's chromium (Playwright): every
table cell keeps its words whole and a table that scrolls sideways says so, the answer comes into view after each
way of asking, and two errors leave one notice on the screen, clear of the upload box.

Shares tests/test_app_browser.py's browser set-up and its way of waiting for an answer; the page's stylesheet and
script are page/style.css and page/behaviour.js.
"""

from __future__ import annotations

import time

import pytest

from longqa.session import Session
from tests.conftest import CHROMIUM, served_page
from tests.test_app_browser import TIMEOUT_MS, answered, launch, wait_until

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                                     "(apt-get install -y chromium; CI installs it)"),
]

SCREENS = {"desktop": {"width": 1400, "height": 900}, "phone": {"width": 400, "height": 800}}
IN_VIEW_S = 5.0  # the answer scrolls into view when it shows: at most a few frames later (3x and more)

# Every word of every table cell that shows, split across lines ("rank" one letter per line, "0./33/11"), as
# "table: word". A word is a run of non-blank characters; a line may end after a hyphen or a slash inside one
# ("out-of-/memory"), as text does, but nowhere else.
BROKEN_WORDS = """() => {
  const broken = [];
  const lineOf = (node, at) => {
    const range = document.createRange();
    range.setStart(node, at);
    range.setEnd(node, at + 1);
    const boxes = Array.from(range.getClientRects()).filter(box => box.width > 0);
    return boxes.length ? Math.round(boxes[0].top) : null;
  };
  for (const table of document.querySelectorAll('.table-wrap')) {
    if (!table.offsetParent) continue;
    for (const cell of table.querySelectorAll('th, [role=gridcell]')) {
      const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
      for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        for (const word of node.data.matchAll(/\\S+/g)) {
          let line = lineOf(node, word.index);
          for (let i = 1; i < word[0].length; i++) {
            const next = lineOf(node, word.index + i);
            if (next !== null && line !== null && next !== line && !'-/\u2013'.includes(word[0][i - 1])) {
              broken.push(`${table.getAttribute('aria-label')}: ${word[0]}`);
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

# The tables that show and scroll sideways (gradio's box, or for columns set in pixels the viewport inside it), with
# the words shown after their title (the stylesheet's hint).
SIDEWAYS_TABLES = """() => Array.from(document.querySelectorAll('.table-wrap'))
  .filter(table => table.offsetParent && [table, table.querySelector('.virtual-table-viewport')]
    .some(element => element && element.scrollWidth > element.clientWidth + 1))
  .map(table => [table.getAttribute('aria-label'),
                 getComputedStyle(table.closest('.table-container').querySelector('.header-row .label p'),
                                  '::after').content])"""

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
    with served_page(Session(), tiny_model_dir, launch) as page_served:
        yield page_served


def open_page(browser, url: str, screen: str):
    page = browser.new_page(viewport=SCREENS[screen])
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url)
    page.get_by_label("Question", exact=True).wait_for()
    wait_until(lambda: "Loaded" in page.locator("#load-status").inner_text())
    return page


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


@pytest.mark.parametrize("screen", list(SCREENS))
def test_every_table_keeps_its_words_whole_and_says_when_it_scrolls_sideways(browser, served, screen):
    page = open_page(browser, served[1], screen)
    answered(page, lambda: page.locator("#try-example").click())  # fills the answer's tables and the history
    for title in ("Plan for another machine", "Profiles and strategies"):
        open_accordion(page, title)
    page.get_by_role("grid", name="Profiles on this machine").wait_for()
    time.sleep(1.0)  # the tables just shown lay out their columns

    assert page.evaluate(BROKEN_WORDS) == [], f"table cells split these words at {screen} width"
    hints = page.evaluate(SIDEWAYS_TABLES)
    assert all("scroll" in hint for _, hint in hints), f"tables scroll sideways without saying so: {hints}"
    if screen == "phone":
        assert {"Run history (this page)", "Load readout"} <= {name for name, _ in hints}, hints


@pytest.mark.parametrize("screen", list(SCREENS))
def test_the_answer_comes_into_view_after_each_way_of_asking(browser, served, screen):
    page = open_page(browser, served[1], screen)
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


@pytest.mark.parametrize("screen", list(SCREENS))
def test_two_errors_leave_one_notice_clear_of_the_upload_box(browser, served, screen):
    page = open_page(browser, served[1], screen)
    page.get_by_role("button", name="Ask", exact=True).click()  # no document
    wait_until(lambda: page.evaluate(NOTICES) != [])
    box = page.get_by_label("Or paste text", exact=True)
    box.fill("The frequency of Chiomklian Oustklaeth is 30.")
    box.blur()
    page.get_by_role("button", name="Ask", exact=True).click()  # no question
    wait_until(lambda: any("question" in notice.lower() for notice in page.evaluate(NOTICES)))

    notices = page.evaluate(NOTICES)
    assert len(notices) == 1 and "question" in notices[0].lower(), f"the notices showing: {notices}"
    upload = page.locator("#documents").bounding_box()
    for notice in page.evaluate(NOTICE_BOXES):
        overlap_x = min(notice["right"], upload["x"] + upload["width"]) - max(notice["left"], upload["x"])
        overlap_y = min(notice["bottom"], upload["y"] + upload["height"]) - max(notice["top"], upload["y"])
        assert overlap_x <= 0 or overlap_y <= 0, f"the notice {notice} covers the upload box {upload}"
