"""The page's details after each click, in Debian's chromium (Playwright) at 1400x900 and 400x800, offline with the
bundled demo model standing in for the default model (issue 49 items 3, 4, 9, 10): the demo notice on every fresh
page after another visitor reloads a profile; a not-found answer that highlights nothing, with its rule behind a
closed "How this is decided"; Compare saying what it compares with Ask disabled; the visitor's wait beside the
engine's stages.

Selects components by their labels and element ids (the page's contract), with tests/test_app_browser.py's browser
set-up. Screenshots go to SHOTS (docs/details-*.png are copies).
"""

from __future__ import annotations

import contextlib
import re
import tempfile
import time
from pathlib import Path
from urllib.request import urlopen

import pytest

from longqa.backend import Selection
from longqa.models import DEFAULT_MODEL, DEMO_MODEL_DIR
from longqa.session import Session
from page import loading
from page.context import make_context
from strategies.profiles import profile_choices
from bench.browser import CHROMIUM
from tests.test_app_browser import SCREENS, choose, frozen_while, launch, open_at, table_headers, wait_until

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                                     "(apt-get install -y chromium; CI installs it)"),
    pytest.mark.skipif(not any(DEMO_MODEL_DIR.glob("*.safetensors")), reason="the demo model has no weights yet"),
]

SHOTS = Path(tempfile.gettempdir()) / "longqa-details"
HISTORY = Path(__file__).parent / "data" / "brindlewick_history.txt"  # a company history of about 2,900 words
ABSENT = "What is the stock ticker of Brindlewick Instruments?"  # "ticker" is nowhere in it
# What the line over the page, Ask and the question box read, recorded by the page itself at each change and every
# 20 ms: a comparison of the demo model can end between two polls of the test.
WATCH_LINE = """() => {
  window.lineSeen = [];
  const question = Array.from(document.querySelectorAll('#ask-row label'))
    .find(l => l.querySelector('[data-testid=block-info]')?.innerText.trim() === 'Question')
    ?.querySelector('textarea, input');
  const look = () => window.lineSeen.push({
    line: document.querySelector('#load-status')?.innerText ?? '',
    askDisabled: Array.from(document.querySelectorAll('#ask-row button')).find(b => b.innerText.trim() === 'Ask')
      ?.disabled ?? null,
    questionDisabled: question?.disabled ?? null,
    stopDisabled: Array.from(document.querySelectorAll('#ask-row button')).find(b => b.innerText.trim() === 'Stop')
      ?.disabled ?? null});
  new MutationObserver(look).observe(document.body, {subtree: true, childList: true, attributes: true,
                                                     characterData: true});
  setInterval(look, 20);
}"""


@pytest.fixture(scope="module")
def offline():
    """Downloads off, as on a machine without the Hub: the default model falls back to the demo model."""
    import huggingface_hub.constants

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
        yield


@pytest.fixture(scope="module")
def served(offline):
    """The page offline on the default model, which the demo model stands in for (loaded by the first visit)."""
    ctx = make_context(Session(), models=[DEFAULT_MODEL], default_model=DEFAULT_MODEL, default_profile="cpu")
    demo, url = launch(ctx)
    with frozen_while(contextlib.closing(demo)):
        yield ctx, url


def status_text(page) -> str:
    return page.locator("#answer-status").inner_text()


def ask_about_the_history(page, question: str) -> str:
    """Paste the company history, ask `question` with Ask, and wait for the answer area to say how it ended."""
    box = page.get_by_label("Or paste text", exact=True)
    box.fill(HISTORY.read_text(encoding="utf-8"))
    box.blur()
    page.get_by_label("Question", exact=True).fill(question)
    page.get_by_role("button", name="Ask", exact=True).click()
    wait_until(lambda: "confidence" in status_text(page) or "failed" in status_text(page))
    return status_text(page)


def shoot(page, name: str, width: int, top: str | None = None, bottom: str | None = None) -> None:
    """The screen as it is, or the whole page's width from `top`'s top to `bottom`'s bottom (locators)."""
    SHOTS.mkdir(exist_ok=True)
    path = str(SHOTS / f"details-{name}-{width}.png")
    if top is None:
        page.screenshot(path=path)
        return
    scrolled = page.evaluate("window.scrollY")
    first, last = page.locator(top).first.bounding_box(), page.locator(bottom).first.bounding_box()
    y = max(0, first["y"] + scrolled - 8)
    page.screenshot(path=path, full_page=True,
                    clip={"x": 0, "y": y, "width": width, "height": last["y"] + scrolled + last["height"] + 8 - y})


@pytest.mark.parametrize("width", SCREENS)
def test_the_demo_notice_shows_on_a_fresh_page_after_another_visitor_reloaded_a_profile(browser, served, width):
    ctx, url = served
    first = open_at(browser, url, width)
    first.locator("#banner").get_by_text("Running on the bundled demo model").wait_for()
    choices = profile_choices(ctx.hardware, ctx.session.auto_profile(ctx.session.model_ref))
    try:
        choose(first, "Hardware profile", next(label for label, value in choices if value == "baseline-fp32"))
        wait_until(lambda: ctx.session.profile_name == "baseline-fp32"
                   and "baseline-fp32" in first.locator("#load-status").inner_text())
        assert ctx.session.model_ref == "demo"
        fresh = open_at(browser, url, width)  # another visitor, after the reload
        time.sleep(1.0)  # the visit's outputs have landed
        banner = fresh.locator("#banner")
        assert banner.is_visible(), "a fresh page after the reload does not say the demo model stands in"
        assert "Running on the bundled demo model" in banner.inner_text()
        assert f"not {DEFAULT_MODEL}" in banner.inner_text()
        fresh.close()
    finally:
        first.close()
        loading.load_selection(ctx, Selection(DEFAULT_MODEL, "cpu"))  # as the module started: the fallback's own load


@pytest.mark.parametrize("width", SCREENS)
def test_not_found_highlights_nothing_and_keeps_its_rule_behind_a_closed_disclosure(browser, served, width):
    page = open_at(browser, served[1], width)
    status = ask_about_the_history(page, ABSENT)
    heading = next(line for line in status.splitlines() if not re.fullmatch(r"[\d.]+s", line))  # not a progress timer
    assert heading in {f"Not found in the documents ({word} confidence)" for word in ("low", "medium", "high")}
    assert page.locator("#best-answer textarea").input_value() == "", "the verdict is said again in the answer box"
    assert status.count("Not found") == 1 and "ticker" in status, status  # one short line says why, once
    assert "Ran on demo with profile cpu." in status
    assert page.locator("#evidence .highlighted").count() == 0, "a span is highlighted as if it were the answer"
    evidence = page.locator("#evidence")
    assert "Closest passages" in evidence.inner_text() and "Brindlewick" in evidence.inner_text()
    disclosure = page.locator("#answer-status details")
    assert disclosure.count() == 1 and disclosure.evaluate("d => d.open") is False
    assert disclosure.locator("summary").inner_text().strip() == "How this is decided"
    rule = disclosure.get_by_text("the words naming", exact=False)
    assert not rule.is_visible(), "the rule's words show before the disclosure is opened"
    height = page.locator("#answer-status").bounding_box()["height"]
    assert height < 200, f"the not-found verdict is {height:.0f} px tall"
    box = page.locator("#best-answer").bounding_box()["height"]
    assert box < 120, f"the empty answer box is {box:.0f} px tall"
    shoot(page, "not-found", width)
    disclosure.locator("summary").click()
    rule.wait_for()
    link = disclosure.get_by_role("link")
    link.wait_for()
    assert "no-answer.md" in link.get_attribute("href")
    with urlopen(served[1].rstrip("/") + "/" + link.get_attribute("href")) as reply:
        assert reply.status == 200 and b"not found" in reply.read().lower()
    page.close()


@pytest.mark.parametrize("width", SCREENS)
def test_during_compare_ask_is_disabled_and_the_line_says_what_is_compared(browser, served, width):
    ctx, url = served
    page = open_at(browser, url, width)
    page.get_by_label("Or paste text", exact=True).fill(HISTORY.read_text(encoding="utf-8"))
    page.get_by_label("Question", exact=True).fill("What is the name of the founder of Brindlewick Instruments?")
    page.get_by_text("Compare profiles", exact=True).first.click()  # the accordion opens
    page.evaluate(WATCH_LINE)
    readout = page.locator("#readout").inner_text()
    question = page.get_by_label("Question", exact=True)
    page.get_by_role("button", name="Compare profiles", exact=True).click()
    wait_until(lambda: page.evaluate("window.lineSeen.some(s => s.line.includes('Comparing profiles'))"))
    question.dispatch_event("keydown", {"key": "Enter", "code": "Enter", "keyCode": 13, "bubbles": True})
    shoot(page, "compare", width, "#load-status", "#ask-row button:has-text('Stop')")
    wait_until(lambda: table_headers(page, "Profile comparison") == ["measure", "cpu", "baseline-fp32"])
    wait_until(lambda: "Loaded" in page.locator("#load-status").inner_text()
               and page.get_by_role("button", name="Ask", exact=True).is_enabled())
    seen = page.evaluate("window.lineSeen")
    comparing = [shot for shot in seen if "Comparing profiles" in shot["line"]]
    # the line and the button are outputs of one update, applied one after the other: at the end, Ask first
    assert len(comparing) > 1 and all(shot["askDisabled"] for shot in comparing[:-1]), "Ask is enabled while comparing"
    assert all(shot["questionDisabled"] for shot in comparing[:-1]), "Enter in the question box asks while comparing"
    assert any(not shot["stopDisabled"] for shot in comparing), "Stop cannot stop the comparison"
    wait_until(lambda: not page.get_by_role("button", name="Stop", exact=True).is_enabled())  # nothing left to stop
    assert "question are disabled" in comparing[0]["line"]
    assert "cpu and baseline-fp32" in comparing[-1]["line"] and "loaded back" in comparing[-1]["line"]
    assert not page.get_by_role("button", name="Ask", exact=True).is_disabled() and question.is_editable()
    time.sleep(2.0)  # an Enter queued during the comparison would ask now
    assert page.locator("#readout").inner_text() == readout and "Asking" not in status_text(page), \
        "Enter pressed during the comparison asked once it ended"
    page.close()


def seconds_in(text: str) -> float:
    """The first time in `text` as page.format writes it ("812 ms", "1.23 s"), in seconds."""
    number, unit = re.search(r"([\d.,]+) (ms|s)\b", text).groups()
    return float(number.replace(",", "")) / (1000 if unit == "ms" else 1)


@pytest.mark.parametrize("width", SCREENS)
def test_the_visitors_wait_from_click_to_answer_shows_beside_the_stages(browser, served, width):
    page = open_at(browser, served[1], width)
    began = time.monotonic()
    ask_about_the_history(page, "What is the name of the founder of Brindlewick Instruments?")
    wait = page.locator("#visitor-wait")
    wait_until(lambda: "You waited" in wait.inner_text())
    felt_s = time.monotonic() - began  # the test's own clock, from before the paste: an upper bound
    waited_s = seconds_in(wait.inner_text())
    total_s = seconds_in(page.get_by_role("table", name="Latency by stage", exact=True).inner_text().split("total")[1])
    assert total_s <= waited_s <= felt_s + 1.0, (total_s, waited_s, felt_s)
    assert "timed in your browser" in wait.inner_text() and "queued for the model" in wait.inner_text()
    latency, line = page.locator("#visitor-wait").bounding_box(), page.get_by_role(
        "table", name="Latency by stage", exact=True).bounding_box()
    assert 0 <= latency["y"] - (line["y"] + line["height"]) < 80, "the wait is not right under the stages"
    page.locator("#visitor-wait").scroll_into_view_if_needed()
    shoot(page, "wait", width)
    page.close()



# The dropdowns' inputs, and the options of the open one, whose text is wider than what shows of it (cut, or under
# the arrow).
CUT_CHOICES = """() => Array.from(document.querySelectorAll('input[role=combobox], [role=option]'))
  .filter(element => element.offsetParent && element.scrollWidth > element.clientWidth + 1)
  .map(element => element.value ?? element.innerText)"""


@pytest.mark.parametrize("width", SCREENS)
def test_the_dropdowns_show_their_whole_choice_and_each_option_whole(browser, served, width):
    page = open_at(browser, served[1], width)
    assert page.evaluate(CUT_CHOICES) == [], f"cut at {width} px"
    for label in ("Hardware profile", "Model"):
        page.get_by_label(label, exact=True).click()
        page.get_by_role("option").first.wait_for()
        assert page.evaluate(CUT_CHOICES) == [], f"{label}'s options cut at {width} px"
        page.keyboard.press("Escape")
    page.get_by_role("button", name="Plan for another machine").first.click()
    page.get_by_label("Batch (windows per forward)", exact=True).wait_for()
    assert page.evaluate(CUT_CHOICES) == [], f"the plan panel's choices cut at {width} px"
    shown = served[0].selection.model  # its id, what it is and whether it loads here: under the dropdown
    assert f"{shown}: " in page.get_by_text("the demo model is bundled and works offline", exact=False).inner_text()
    page.close()
