"""The page in Debian's chromium (Playwright): upload, ask, highlighted evidence, readouts, profile switch, screenshot.

Selects components by their labels (labels are the page's contract). Runs where /usr/bin/chromium exists (CI
installs it); the flags are those FACTS.md lists for this kind of machine.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

import app
from longqa.models import DEMO_MODEL_DIR
from longqa.session import Session

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
SCREENSHOT = Path(__file__).resolve().parents[1] / "docs" / "screenshot.png"
TIMEOUT_MS = 120_000
SCRIPT = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                                     "(apt-get install -y chromium; CI installs it)"),
]


def wait_until(predicate, timeout_s: float = TIMEOUT_MS / 1000) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the page")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def served(tiny_model_dir):
    has_demo = any(DEMO_MODEL_DIR.glob("*.safetensors"))
    ctx = app.make_context(Session(), models=[str(tiny_model_dir), *(["demo"] if has_demo else [])],
                           default_model=str(tiny_model_dir), default_profile="cpu")
    app.ensure_loaded(ctx)
    demo = app.build_blocks(ctx)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True, css=app.CSS)
    yield ctx, url, has_demo
    demo.close()


@pytest.fixture()
def page(served):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(served[1])
        page.get_by_label("Question", exact=True).wait_for()
        yield page
        browser.close()


def ask(page, question: str) -> str:
    """Type the question, press Ask, wait for a new readout (its timings always differ), return the answer shown."""
    readout = page.locator("#readout")
    before = readout.inner_text()
    page.get_by_label("Question", exact=True).fill(question)
    page.get_by_role("button", name="Ask", exact=True).click()
    tracker = page.locator("#best-answer [data-testid=status-tracker]").first  # the ask's progress shows there
    wait_until(lambda: "hide" in (tracker.get_attribute("class") or "") and readout.inner_text() != before
               and "tokens_per_s" in readout.inner_text())
    return page.locator("#best-answer textarea").input_value()


def choose(page, label: str, option: str) -> None:
    page.get_by_label(label, exact=True).click()
    page.get_by_role("option", name=option, exact=True).click()


def grid_text(page, name: str) -> str:
    return page.get_by_role("grid", name=name, exact=True).inner_text()


def test_upload_ask_highlight_readouts_switch_profile_and_screenshot(page, served, long_document, tmp_path):
    ctx, _, has_demo = served
    path, example = long_document
    # Markup in a document must show as text: every sentence carries an image with an onerror and a script.
    laced = tmp_path / "laced_report.txt"
    laced.write_text(re.sub(r"\. ", f". {SCRIPT} ", example.text), encoding="utf-8")

    page.locator("#documents input[type=file]").set_input_files(str(laced))
    wait_until(lambda: "laced_report.txt" in grid_text(page, "Documents read"))
    answer = ask(page, example.question)

    highlighted = page.locator("#evidence .highlighted")
    assert highlighted.count() == 1 and highlighted.inner_text().strip() == answer.strip()
    evidence = page.locator("#evidence").inner_text()
    assert "<img src=x" in evidence or "<script>" in evidence, "the markup is shown as text"
    assert page.evaluate("() => window.__xss") is None, "no script from a document ran"
    latency = grid_text(page, "Latency by stage")
    assert all(stage in latency for stage in ("extract", "tokenize", "forward", "decode", "total", "tokens/s"))
    assert "host" in grid_text(page, "Memory") and "no GPU used" in grid_text(page, "Memory")
    run = grid_text(page, "Run")
    assert "windows" in run and "batch size used" in run and "out-of-memory back-offs" in run
    documents = grid_text(page, "Documents read")
    assert "laced_report.txt" in documents
    assert answer in grid_text(page, "Top answers")

    choose(page, "Hardware profile", next(label for label, value in app.profile_choices(ctx.hardware)
                                          if value == "baseline-fp32"))
    wait_until(lambda: ctx.session.profile_name == "baseline-fp32")
    wait_until(lambda: "baseline-fp32" in grid_text(page, "Load readout"))

    unavailable = next(label for label, value in app.profile_choices(ctx.hardware) if value == "t4-16gb")
    if "unavailable" in unavailable:  # on a machine without CUDA: refused with the reason, and nothing changes
        choose(page, "Hardware profile", unavailable)
        page.locator("[data-testid=toast-body]").get_by_text("cannot run on this machine").first.wait_for()
        wait_until(lambda: page.get_by_label("Hardware profile", exact=True).input_value().startswith("baseline"))
        assert ctx.session.profile_name == "baseline-fp32"

    ask(page, example.question + " ")  # a second run, on the other profile
    wait_until(lambda: "baseline-fp32" in grid_text(page, "Run history (this page)"))
    assert "\ncpu\n" in grid_text(page, "Run history (this page)")

    if has_demo:  # the screenshot shows the bundled demo model answering a bundled example
        choose(page, "Model", next(label for label, value in app.model_choices(ctx) if value == "demo"))
        wait_until(lambda: ctx.session.model_ref == "demo")
    first = app.sample_examples()[0]
    page.get_by_text(first["question"], exact=True).first.click()
    wait_until(lambda: first["file"] in grid_text(page, "Documents read"))
    answer = ask(page, first["question"])
    assert page.locator("#evidence .highlighted").inner_text().strip() == answer.strip()
    if has_demo:
        assert "Running on the bundled demo model" not in page.content()
    wait_until(lambda: "\n3\n" in grid_text(page, "Run history (this page)"))  # the third run is recorded
    # Both plots drew bars (how many paths the renderer keeps while re-rendering varies from run to run).
    wait_until(lambda: page.locator("#plots .mark-rect path").count() >= 2)
    for close in page.locator("[data-testid=toast-close]").all():
        close.click()
    SCREENSHOT.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=True)
    assert SCREENSHOT.stat().st_size > 50_000


def test_markup_in_questions_and_markdown_in_documents_show_as_text(page, long_document, tmp_path):
    path, example = long_document
    markdown = "**bold** [link](javascript:window.__xss=3) <b>tag</b>"
    laced = tmp_path / "markdown_notes.md"
    laced.write_text(re.sub(r"\. ", f". {markdown} ", example.text), encoding="utf-8")
    page.locator("#documents input[type=file]").set_input_files(str(laced))
    wait_until(lambda: "markdown_notes.md" in grid_text(page, "Documents read"))
    question = "Who is <img src=x onerror=window.__xss=4> **bold**?"  # short: kept whole (64 tokens at most)
    ask(page, question)
    assert f'"{question}"' in page.locator("#readout").inner_text(), "the question is shown as typed"
    evidence = page.locator("#evidence").inner_text()
    assert "**bold**" in evidence and "[link](javascript:" in evidence, "Markdown in a document stays literal"
    for area in ("#evidence", "#readout", "#best-answer"):
        assert page.locator(f"{area} strong, {area} b, {area} a[href^=javascript], {area} img").count() == 0
    assert page.evaluate("() => window.__xss") is None, "no script from a question or document ran"


def test_a_banner_says_when_the_demo_model_stands_in(tiny_model_dir):
    from playwright.sync_api import sync_playwright

    ctx = app.make_context(Session(), models=[str(tiny_model_dir)], default_model=str(tiny_model_dir),
                           default_profile="cpu")
    app.ensure_loaded(ctx)
    # As the loader reports it when the default checkpoint cannot be fetched offline.
    ctx.session.loaded.readout.fallback_reason = ("Could not fetch 'allenai/longformer-large-4096-finetuned-triviaqa'"
                                                  " from the Hugging Face Hub. Using the bundled demo model instead.")
    demo = app.build_blocks(ctx)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True, css=app.CSS)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
            page = browser.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(url)
            page.locator("#banner").get_by_text("Running on the bundled demo model").wait_for()
            assert "Could not fetch" in page.locator("#banner").inner_text()
            browser.close()
    finally:
        demo.close()
