"""Refresh the page's screenshots: serve the page with the bundled demo model, ask two bundled examples in Debian's
chromium (a click on an example asks), and take a full-page screenshot once both plots draw a bar per run, at a
desktop width (docs/screenshot.png, the README's) and a phone's (docs/screenshot-400px.png); with --first-screen,
--notice, --plan and --wrapped-pdf, what the first screen shows after them, the first screen after two mistakes, the
plan panel for a T4, and the answer area after asking about a 20-page PDF whose fact sentence wraps inside a name on
page 17, then its page opened with the answer marked (docs/first-screen-WIDTH.png, docs/notice-WIDTH.png,
docs/plan-panel-WIDTH.png, docs/wrapped-pdf-answer-WIDTH.png, docs/answer-page-WIDTH.png).

Run on demand after a change to the page (`python scripts/refresh_screenshot.py`); the tests never write it.
Needs what the browser test needs: /usr/bin/chromium and the playwright package (never `playwright install`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the demo model is bundled: nothing to fetch

from longqa.session import Session, sample_examples  # noqa: E402
from bench.browser import launch_chromium  # noqa: E402
from page.context import make_context  # noqa: E402
from page.layout import build_blocks  # noqa: E402
from page.asking import ensure_loaded  # noqa: E402
from strategies.profiles import PROFILES  # noqa: E402
from tests.generated_pdfs import WRAPPED_QUESTION, wrapped_matplotlib_pdf  # noqa: E402

WIDTHS = {1400: "screenshot.png", 400: "screenshot-400px.png"}  # width in CSS pixels -> file in docs/
HEIGHT = 900
WRAPPED_PDF_HEIGHTS = {1400: 900, 400: 850}  # width -> the screen's height for the wrapped PDF's answer area
TIMEOUT_S = 120.0


def wait_until(predicate, what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.2)


def ask_example(page, example: dict, runs: int) -> None:
    """Click a bundled example (which asks it), and wait for the answer and for both plots to draw `runs` bars."""
    page.get_by_text(example["question"], exact=True).first.click()
    documents = page.get_by_role("table", name="Documents read", exact=True)
    wait_until(lambda: example["file"] in documents.inner_text(), "the example's document")
    bars = page.locator("#plots .mark-rect path")
    wait_until(lambda: bars.count() == 2 * runs, f"{runs} bars in each plot")


@contextlib.contextmanager
def opened_page(url: str, width: int, height: int = HEIGHT):
    """The page at `url` in a fresh chromium, `width` by `height` CSS pixels, once its question box shows."""
    from playwright.sync_api import sync_playwright  # deferred: a test-only dependency (requirements-dev.txt)

    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(TIMEOUT_S * 1000)
            page.goto(url)
            page.get_by_label("Question", exact=True).wait_for()
            yield page
        finally:
            browser.close()


def take_screenshot(url: str, path: Path, width: int, first_screen: Path | None = None) -> None:
    examples = sample_examples()
    with opened_page(url, width) as page:
        for runs, example in enumerate(examples[:2], 1):
            ask_example(page, example, runs)
        for close in page.locator("[data-testid=toast-close]").all():
            close.click()
        page.mouse.move(0, 0)  # no hover state in the picture
        page.evaluate("window.scrollTo(0, 0)")
        if first_screen is not None:
            page.screenshot(path=str(first_screen))
        page.screenshot(path=str(path), full_page=True)


def take_notice_screenshot(url: str, path: Path, width: int) -> None:
    """What the first screen shows after two mistakes (Ask with no document: one notice; then with no question: a
    note under the question box)."""
    with opened_page(url, width) as page:
        texts = page.locator("[data-testid=toast-text]")
        page.get_by_role("button", name="Ask", exact=True).click()
        wait_until(lambda: texts.count() > 0, "the first notice")
        page.get_by_label("Or paste text", exact=True).fill("The frequency of Chiomklian Oustklaeth is 30.")
        page.get_by_role("button", name="Ask", exact=True).click()
        wait_until(lambda: page.locator("#question-note").is_visible(), "the note under the question box")
        time.sleep(1.0)  # the answer area scrolls into view
        page.mouse.move(0, 0)
        page.screenshot(path=str(path))


def take_plan_screenshot(url: str, path: Path, width: int) -> None:
    """The plan panel opened, planned for its default GPU (a T4): the recommendation, the article and the table."""
    with opened_page(url, width) as page:
        page.get_by_role("button", name="Plan for another machine").first.click()
        page.get_by_role("button", name="Plan", exact=True).click()
        table = page.get_by_role("table", name="Every profile on that machine (predicted)", exact=True)
        wait_until(lambda: "(recommended)" in table.inner_text(), "the plan")
        time.sleep(1.0)  # the tables are laid out
        page.mouse.move(0, 0)
        page.locator("#plan-panel").screenshot(path=str(path))


def take_wrapped_pdf_screenshot(url: str, path: Path, width: int) -> None:
    """The screen a visitor sees after uploading the wrapped PDF (tests/generated_pdfs.py) and asking its question:
    the answer area, scrolled into view by the page itself."""
    with tempfile.TemporaryDirectory() as folder, opened_page(url, width, WRAPPED_PDF_HEIGHTS[width]) as page:
        pdf = Path(folder) / "survey.pdf"
        pdf.write_bytes(wrapped_matplotlib_pdf())
        page.locator("#documents input[type=file]").set_input_files(str(pdf))
        documents = page.get_by_role("table", name="Documents read", exact=True)
        wait_until(lambda: "survey.pdf" in documents.inner_text(), "the PDF read")
        page.get_by_label("Question", exact=True).fill(WRAPPED_QUESTION)
        page.get_by_role("button", name="Ask", exact=True).click()
        heading = page.locator("#answer-status h3")
        wait_until(lambda: heading.count() == 1 and heading.inner_text() not in ("Asking…", "New documents"),
                   "the answer's outcome")
        time.sleep(2.0)  # page/behaviour.js looks again 1.5 s after the answer shows, and may scroll
        page.mouse.move(0, 0)
        page.screenshot(path=str(path))
        room = page.locator("#answer-page-room")
        room.get_by_text("See it on the page").click()
        image = page.locator("#answer-page img")
        image.wait_for()
        wait_until(lambda: image.evaluate("img => img.complete && img.naturalWidth > 0"), "the page drawn")
        time.sleep(0.5)
        page.mouse.move(0, 0)
        room.screenshot(path=str(path.parent / f"answer-page-{width}.png"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="folder for the screenshots")
    parser.add_argument("--width", type=int, choices=list(WIDTHS), action="append",
                        help="only this width (repeatable; default: every width)")
    parser.add_argument("--first-screen", action="store_true",
                        help="also save what the first 900 px show (first-screen-WIDTH.png beside them)")
    parser.add_argument("--notice", action="store_true",
                        help="also save the first screen after two mistakes (notice-WIDTH.png beside them)")
    parser.add_argument("--plan", action="store_true",
                        help="also save the plan panel planned for a T4 (plan-panel-WIDTH.png beside them)")
    parser.add_argument("--wrapped-pdf", action="store_true",
                        help="also save the answer area after asking about a PDF whose fact wraps inside a name, at "
                             "1400x900 and 400x850 (wrapped-pdf-answer-WIDTH.png beside them), and its page opened "
                             "with the answer marked (answer-page-WIDTH.png)")
    parser.add_argument("--profile", default="auto", choices=list(PROFILES))
    args = parser.parse_args(argv)
    ctx = make_context(Session(), models=["demo"], default_model="demo", default_profile=args.profile)
    ensure_loaded(ctx)
    demo = build_blocks(ctx)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        for width in args.width or list(WIDTHS):
            path = args.out / WIDTHS[width]
            first = args.out / f"first-screen-{width}.png" if args.first_screen else None
            take_screenshot(url, path, width, first)
            print(f"wrote {path} ({path.stat().st_size:,} bytes)", file=sys.stderr)
            if args.notice:
                take_notice_screenshot(url, args.out / f"notice-{width}.png", width)
            if args.plan:
                take_plan_screenshot(url, args.out / f"plan-panel-{width}.png", width)
            if args.wrapped_pdf:
                take_wrapped_pdf_screenshot(url, args.out / f"wrapped-pdf-answer-{width}.png", width)
    finally:
        demo.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
