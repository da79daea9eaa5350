"""What one visitor does never changes what another sees (issue 58), in Debian's chromium (Playwright) at 1400x900 and
400x800, offline with the bundled demo model standing in for the default model: the example file kept however another
visitor's upload of the same bytes is cleaned up, and an upload two visitors hold kept until both let go (two pages,
the upload store on a clock the test moves); every open page following another visitor's reload, an answer naming
the profile it ran on, and a new visitor seeing `custom` loaded with its strategies folded away.

Selects components by their labels and element ids (the page's contract), with tests/test_app_browser.py's browser
set-up.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest

from longqa.backend import Selection
from longqa.models import DEFAULT_MODEL
from longqa.serving.uploads import UploadStore
from longqa.session import SAMPLES_DIR, Session, sample_examples
from page import loading, model_panel
from page.context import make_context
from strategies.profiles import profile_choices
from tests.conftest import Clock
from tests.test_app_browser import SCREENS, choose, frozen_while, launch, open_at, table_text, wait_until
# the fixture that turns downloads off for the module, and the same marks (browser, slow, chromium and the demo
# model's weights needed)
from tests.test_details_browser import offline, pytestmark  # noqa: F401

EXAMPLE = sample_examples()[0]  # what "Try it" asks: the harbour records' first question
FOLLOW_S = 2.0  # how often the served pages look whether another visitor reloaded (the page's own period is longer)
FOLLOW_ALLOWED_S = 3 * model_panel.FOLLOW_EVERY_S  # a page follows within one of the page's own polls (3x allowed)


@pytest.fixture(scope="module")
def served(offline):  # noqa: F811
    """The page offline on the default model (the demo model stands in), its uploads on a clock the test moves. Its
    pages look every FOLLOW_S whether another visitor reloaded, so that following a reload is not a wait for the
    page's own period."""
    clock = Clock(1000.0)
    ctx = make_context(Session(), models=[DEFAULT_MODEL], default_model=DEFAULT_MODEL, default_profile="cpu",
                       uploads=UploadStore(clock=clock))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(model_panel, "FOLLOW_EVERY_S", FOLLOW_S)  # read when the page is built
        demo, url = launch(ctx)
    with frozen_while(contextlib.closing(demo)):
        yield ctx, url, clock


def status_text(page) -> str:
    return page.locator("#answer-status").inner_text()


def ask_and_wait(page, question: str | None = None) -> str:
    """Press Ask (after typing `question`, if given) and wait until the answer area says how it ended."""
    if question is not None:
        page.get_by_label("Question", exact=True).fill(question)
    page.get_by_role("button", name="Ask", exact=True).click()
    wait_until(lambda: "Asking" in status_text(page) or "failed" in status_text(page))
    tracker = page.locator("#answer-status [data-testid=status-tracker]").first
    wait_until(lambda: "Asking" not in status_text(page) and "hide" in (tracker.get_attribute("class") or ""))
    return status_text(page)


def upload(page, path) -> None:
    page.locator("#documents input[type=file]").set_input_files(str(path))
    wait_until(lambda: path.name in table_text(page, "Documents read"))


def remove_documents(page) -> None:
    """The Documents box cleared with its own button, as a visitor does."""
    page.locator("#documents").get_by_role("button", name="Clear").first.click()
    wait_until(lambda: page.locator("#documents").get_by_text(".txt").count() == 0)


@pytest.mark.parametrize("width", SCREENS)
def test_the_example_survives_another_visitors_upload_of_it_being_cleaned_up(browser, served, width):
    ctx, url, clock = served
    first, second = open_at(browser, url, width), open_at(browser, url, width)
    try:
        first.locator("#try-example").click()
        wait_until(lambda: EXAMPLE["answer"] == first.locator("#best-answer textarea").input_value())
        upload(second, SAMPLES_DIR / EXAMPLE["file"])  # the same bytes: gradio stores them on the example's path
        remove_documents(second)
        clock.now += ctx.uploads.keep_s + 60
        ctx.uploads.sweep()
        status = ask_and_wait(first, EXAMPLE["question"])
        assert "no longer on this server" not in status and "failed" not in status, status
        assert first.locator("#best-answer textarea").input_value() == EXAMPLE["answer"]
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("width", SCREENS)
def test_an_upload_two_visitors_hold_stays_until_the_last_lets_go(browser, served, tmp_path, width):
    ctx, url, clock = served
    own = tmp_path / f"harbour_copy_{width}.txt"  # not a bundled example: its upload is swept in its time
    own.write_text((SAMPLES_DIR / EXAMPLE["file"]).read_text(encoding="utf-8") + f"\nA copy for {width}.\n",
                   encoding="utf-8")
    first, second = open_at(browser, url, width), open_at(browser, url, width)
    try:
        upload(first, own)
        upload(second, own)  # the same bytes, the same path on the server
        held = first.locator("#documents a").first.get_attribute("href").split("file=", 1)[-1]
        wait_until(lambda: ctx.uploads.holders(held) == 2)
        remove_documents(second)  # the second visitor is done with it
        wait_until(lambda: ctx.uploads.holders(held) == 1)
        clock.now += ctx.uploads.keep_s + 60
        ctx.uploads.sweep()
        status = ask_and_wait(first, EXAMPLE["question"])
        assert "no longer on this server" not in status and "failed" not in status, status
        assert first.locator("#best-answer textarea").input_value() == EXAMPLE["answer"]
        remove_documents(first)  # now nobody holds it: it goes in its time
        wait_until(lambda: ctx.uploads.holders(held) == 0)
        clock.now += ctx.uploads.keep_s + 60
        ctx.uploads.sweep()
        assert not ctx.uploads.is_known(held)
    finally:
        first.close()
        second.close()


def profile_label(ctx, profile: str) -> str:
    """How the Hardware profile dropdown names `profile` on this machine."""
    choices = profile_choices(ctx.hardware, ctx.session.auto_profile(ctx.session.model_ref))
    return next(label for label, value in choices if value == profile)


@pytest.mark.parametrize("width", SCREENS)
def test_every_open_page_follows_another_visitors_reload_and_a_new_one_sees_it_folded(browser, served, width):
    ctx, url, _ = served
    first, second = open_at(browser, url, width), open_at(browser, url, width)
    try:
        choose(second, "Hardware profile", profile_label(ctx, "baseline-fp32"))
        wait_until(lambda: ctx.session.profile_name == "baseline-fp32")
        # the first page, untouched, follows within one poll
        wait_until(lambda: first.get_by_label("Hardware profile", exact=True).input_value()
                   == profile_label(ctx, "baseline-fp32")
                   and "baseline-fp32" in first.locator("#load-status").inner_text(),
                   timeout_s=FOLLOW_ALLOWED_S)
        first.locator("#try-example").click()
        wait_until(lambda: "Ran on" in status_text(first) or "failed" in status_text(first))
        assert "Ran on demo with profile baseline-fp32." in status_text(first), status_text(first)
        choose(second, "Hardware profile", profile_label(ctx, "custom"))
        strategies = second.get_by_text("Custom strategies", exact=True)
        strategies.wait_for()  # the visitor who picks custom sees its strategies
        second.get_by_role("button", name="Load custom profile").click()
        wait_until(lambda: ctx.session.profile_name == "custom")
        fresh = open_at(browser, url, width)  # a new visitor, after custom was loaded
        custom = profile_label(ctx, "custom")
        wait_until(lambda: fresh.get_by_label("Hardware profile", exact=True).input_value() == custom)
        wait_until(lambda: first.get_by_label("Hardware profile", exact=True).input_value() == custom,
                   timeout_s=FOLLOW_ALLOWED_S)
        for page in (fresh, first):
            assert not page.get_by_text("Custom strategies", exact=True).is_visible(), "strategies unfolded"
            assert "custom" in page.locator("#load-status").inner_text()
        ask_button = fresh.get_by_role("button", name="Ask", exact=True).bounding_box()
        assert ask_button["y"] + ask_button["height"] <= SCREENS[width]["height"] or width == 400, ask_button
        fresh.close()
    finally:
        first.close()
        second.close()
        loading.load_selection(ctx, Selection(DEFAULT_MODEL, "cpu"))  # as the module started


LAPTOPS = {"1400x900": {"width": 1400, "height": 900}, "1366x768": {"width": 1366, "height": 768}}


@pytest.mark.parametrize("screen", LAPTOPS)
def test_a_first_visit_on_a_laptop_shows_the_ask_row_whole(browser, served, screen):
    page = browser.new_page(viewport=LAPTOPS[screen])
    try:
        page.goto(served[1])
        page.get_by_label("Question", exact=True).wait_for()
        wait_until(lambda: "Loaded" in page.locator("#load-status").inner_text())
        for name in ("Ask", "Read the whole document", "Stop"):
            box = page.get_by_role("button", name=name, exact=True).bounding_box()
            assert box["y"] >= 0 and box["y"] + box["height"] <= LAPTOPS[screen]["height"], (name, box)
    finally:
        page.close()


@pytest.mark.parametrize("width", SCREENS)
def test_an_empty_file_among_good_ones_costs_only_itself(browser, served, tmp_path, width):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    page = open_at(browser, served[1], width)
    try:
        page.locator("#documents input[type=file]").set_input_files([str(SAMPLES_DIR / EXAMPLE["file"]), str(empty)])
        try:
            wait_until(lambda: "left out" in status_text(page), timeout_s=30)
        except AssertionError:
            raise AssertionError(f"the line over the answer reads {status_text(page)!r}") from None
        status = status_text(page)
        assert "'empty.txt' is empty" in status and "error" not in status.lower() and "failed" not in status, status
        assert page.locator("[data-testid=toast-body]").count() == 0, "an error beside 'press Ask'"
        assert "empty.txt" in table_text(page, "Documents read") and "left out" in table_text(page, "Documents read")
        status = ask_and_wait(page, EXAMPLE["question"])
        assert "Found" in status and "failed" not in status, status
        assert page.locator("#best-answer textarea").input_value() == EXAMPLE["answer"]
        page.locator("[data-testid=toast-body]").get_by_text("Answered without 'empty.txt'").first.wait_for()
    finally:
        page.close()


@pytest.mark.parametrize("width", SCREENS)
def test_an_empty_question_keeps_its_box_in_view_with_a_short_note_beside_it(browser, served, width):
    page = open_at(browser, served[1], width)
    try:
        page.locator("#documents input[type=file]").set_input_files(str(SAMPLES_DIR / EXAMPLE["file"]))
        wait_until(lambda: EXAMPLE["file"] in table_text(page, "Documents read"))
        page.get_by_role("button", name="Ask", exact=True).click()
        note = page.locator("#question-note")
        wait_until(lambda: note.is_visible() and "Type a question first" in note.inner_text())
        time.sleep(1.0)  # anything that would scroll has done so
        box = page.get_by_label("Question", exact=True).bounding_box()
        assert 0 <= box["y"] and box["y"] + box["height"] <= SCREENS[width]["height"], box
        assert "failed" not in status_text(page) and "No question yet" in status_text(page)
        toasts = page.locator("[data-testid=toast-body]").all_inner_texts()
        assert toasts == [], f"a notice for a missing input: {toasts}"
        note_box = note.bounding_box()
        assert 0 <= note_box["y"] - (box["y"] + box["height"]) < 80, (box, note_box)  # right under the box
        ask_and_wait(page, EXAMPLE["question"])  # asked again: the note goes
        assert not note.is_visible()
    finally:
        page.close()


HISTORY = Path(__file__).parent / "data" / "brindlewick_history.txt"  # a company history of about 2,900 words
ABSENT = "What is the stock ticker of Brindlewick Instruments?"  # "ticker" is nowhere in it
# Whether the progress shown over the line above the answer and that line's own words are both drawn where they meet.
DRAWN_OVER = """() => {
  const status = document.querySelector('#answer-status');
  const tracker = status.querySelector(':scope > [data-testid=status-tracker]');
  if (!tracker || tracker.classList.contains('hide') || !tracker.innerText.trim()) return null;
  const words = Array.from(status.children).filter(c => c !== tracker && c.innerText.trim());
  const box = tracker.getBoundingClientRect();
  return words.some(w => { const r = w.getBoundingClientRect(); return getComputedStyle(w).opacity !== '0'
    && r.top < box.bottom && box.top < r.bottom && r.left < box.right && box.left < r.right; });
}"""


@pytest.mark.parametrize("width", SCREENS)
def test_a_long_read_keeps_stop_in_reach_its_progress_clear_and_no_junk_shown_as_an_answer(browser, served, tmp_path,
                                                                                           width):
    long_history = tmp_path / "long_history.txt"
    long_history.write_text("\n\n".join([HISTORY.read_text(encoding="utf-8")] * 80), encoding="utf-8")
    page = open_at(browser, served[1], width)
    try:
        upload(page, long_history)
        page.get_by_label("Question", exact=True).fill(ABSENT)
        page.get_by_role("button", name="Read the whole document", exact=True).click()
        wait_until(lambda: "windows done" in status_text(page))
        stop = page.get_by_role("button", name="Stop", exact=True)
        seen = []
        for _ in range(10):  # the read goes on: each look finds Stop on the screen and nothing drawn twice
            time.sleep(0.3)
            box = stop.bounding_box()
            seen.append(page.evaluate(DRAWN_OVER))
            assert box is not None and 0 <= box["y"] and box["y"] + box["height"] <= SCREENS[width]["height"], box
        assert True not in seen, "the progress was drawn over the line's words"
        label = page.locator("#best-answer [data-testid=block-info]").inner_text()
        shown = page.locator("#best-answer textarea").input_value()
        if "nothing plausible yet" in label:
            assert shown == "" and page.locator("#evidence .highlighted").count() == 0
        else:  # a best so far shown as an answer must reach the model's threshold
            score = float(page.get_by_role("table", name="Top answers", exact=True).locator("tbody td").nth(2)
                          .inner_text())
            assert score >= 4.2e-8, (label, shown, score)
        stop.click()
        wait_until(lambda: "Stopped" in status_text(page))
        if "nothing plausible" in page.locator("#best-answer [data-testid=block-info]").inner_text():
            assert "Nothing plausible was read" in status_text(page)
            assert page.locator("#best-answer textarea").input_value() == ""
    finally:
        page.close()
