"""The best answer so far in chromium (issue 50 item 2): shown with its label while a long read goes on, replaced by
the answer at the end, and kept after Stop labelled partial; at 1400 and 400 px. The tiny model's batches are
slowed so that the read lasts long enough to look at."""

from __future__ import annotations

import re
import time

import pytest

from longqa.session import Session
from page import layout
from page.format import PROVISIONAL as PENDING
from page.layout import build_blocks
from bench.browser import CHROMIUM
from tests.conftest import served_page

TIMEOUT_MS = 120_000
BATCH_DELAY_S = 0.4  # each batch of windows, at least
LONG_PASTE = " ".join(f"Sentence {n} tells of the colour of Zorbin and of nothing else here." for n in range(1500))
QUESTION = "What is the colour of Zorbin?"
WIDTHS = {"desktop": (1400, 900), "phone": (400, 800)}
BEST_SO_FAR = re.compile(r"^Answer \(best so far, (\d+) of (\d+) windows read\)$")
PARTIAL = re.compile(r"^Answer \(partial: stopped after (\d+) of (\d+) windows\)$")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                                     "(apt-get install -y chromium; CI installs it)"),
]


class SlowRunner:
    """A loaded model's runner that takes at least `delay_s` a batch."""

    def __init__(self, runner, delay_s: float):
        self.runner, self.devices, self.delay_s = runner, runner.devices, delay_s

    def __call__(self, batch):
        time.sleep(self.delay_s)
        return self.runner(batch)


def launch(ctx):
    ctx.session.loaded.runner = SlowRunner(ctx.session.loaded.runner, BATCH_DELAY_S)
    demo = build_blocks(ctx)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True, css=layout.CSS)
    return demo, url


@pytest.fixture(scope="module")
def served(tiny_model_dir):
    with served_page(Session(), tiny_model_dir, launch) as page_served:
        yield page_served


def wait_until(predicate, timeout_s: float = TIMEOUT_MS / 1000):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the page")
        time.sleep(0.1)


def open_page(browser, url: str, width: str):
    w, h = WIDTHS[width]
    page = browser.new_page(viewport={"width": w, "height": h})
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url)
    page.get_by_label("Question", exact=True).wait_for()
    return page


def table_text(page, name: str) -> str:
    return page.get_by_role("table", name=name, exact=True).inner_text()


def answer_label(page) -> str:
    return page.locator("#best-answer [data-testid=block-info]").first.inner_text().strip()


def answer_text(page) -> str:
    return page.locator("#best-answer textarea").input_value()


def status(page) -> str:
    return page.locator("#answer-status").inner_text()


def read_whole(page) -> None:
    page.get_by_label("Or paste text", exact=True).fill(LONG_PASTE)
    page.get_by_label("Question", exact=True).fill(QUESTION)
    page.get_by_role("button", name="Read the whole document", exact=True).click()


def best_so_far_shown(page):
    """(windows read, windows in all, the answer shown) once a best answer so far shows, else None."""
    label = BEST_SO_FAR.match(answer_label(page))
    text = answer_text(page)
    return (int(label[1]), int(label[2]), text) if label and text else None


@pytest.mark.parametrize("width", WIDTHS)
def test_a_long_read_shows_the_best_answer_so_far_then_the_answer(served, browser, width, tmp_path):
    page = open_page(browser, served[1], width)
    read_whole(page)
    progress_seen = []

    def shows_progress() -> bool:
        text = status(page)
        return "Reading windows" in text or "windows done" in text

    def a_first_best():
        progress_seen.append(shows_progress())
        return best_so_far_shown(page)

    first = wait_until(a_first_best)
    read, total, _ = first
    assert 0 < read < total
    # the progress shows over the line above, never over the best answer so far
    assert "hide" in (page.locator("#best-answer [data-testid=status-tracker]").first.get_attribute("class") or "")
    assert PENDING in table_text(page, "Top answers") and "Found" not in status(page)
    # gradio shows an event's progress until its first output, then marks it generating: the progress shows over
    # the line above until the first best answer so far, which then says itself how far the read is (its label)

    def a_later_best():
        progress_seen.append(shows_progress())
        best = best_so_far_shown(page)
        return best if best and best[0] > read else None

    later = wait_until(a_later_best)
    assert any(progress_seen)
    assert later[1] == total
    page.locator("#answer-status").scroll_into_view_if_needed()
    page.screenshot(path=str(tmp_path / f"best-so-far-{width}.png"))  # to look at (pytest --basetemp)
    wait_until(lambda: answer_label(page) == "Answer" and "confidence" in status(page))
    assert answer_text(page) and PENDING not in table_text(page, "Top answers")
    assert "tokens_per_s" in page.locator("#readout").inner_text()  # the final readout, not the provisional one
    page.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_stop_keeps_the_best_answer_so_far_labelled_partial(served, browser, width):
    page = open_page(browser, served[1], width)
    read_whole(page)
    read, total, _ = wait_until(lambda: best_so_far_shown(page))
    page.get_by_role("button", name="Stop", exact=True).click()
    partial = wait_until(lambda: PARTIAL.match(answer_label(page)))
    done = int(partial[1])
    assert read <= done < total and int(partial[2]) == total
    assert f"Stopped after {done} of {total} windows" in status(page)
    assert "not judged" in page.locator(".readout-table", has_text="Top answers").first.inner_text()  # not "pending"
    assert answer_text(page)  # the best answer of the windows read stays
    page.close()
