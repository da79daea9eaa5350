"""Refresh docs/screenshot.png: serve the page with the bundled demo model, ask two bundled examples in Debian's
chromium, and take a full-page screenshot once both plots draw a bar per run.

Run on demand after a change to the page (`python scripts/refresh_screenshot.py`); the tests never write it.
Needs what the browser test needs: /usr/bin/chromium and the playwright package (never `playwright install`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the demo model is bundled: nothing to fetch

import app  # noqa: E402
from longqa.session import Session  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
VIEWPORT = {"width": 1280, "height": 900}
TIMEOUT_S = 120.0


def wait_until(predicate, what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.2)


def ask_example(page, example: dict, runs: int) -> None:
    """Click a bundled example, press Ask, and wait for the answer and for both plots to draw `runs` bars."""
    page.get_by_text(example["question"], exact=True).first.click()
    documents = page.get_by_role("grid", name="Documents read", exact=True)
    wait_until(lambda: example["file"] in documents.inner_text(), "the example's document")
    page.get_by_role("button", name="Ask", exact=True).click()
    bars = page.locator("#plots .mark-rect path")
    wait_until(lambda: bars.count() == 2 * runs, f"{runs} bars in each plot")


def take_screenshot(url: str, path: Path) -> None:
    from playwright.sync_api import sync_playwright  # deferred: a test-only dependency (requirements-dev.txt)

    examples = app.sample_examples()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.set_default_timeout(TIMEOUT_S * 1000)
            page.goto(url)
            page.get_by_label("Question", exact=True).wait_for()
            for runs, example in enumerate(examples[:2], 1):
                ask_example(page, example, runs)
            for close in page.locator("[data-testid=toast-close]").all():
                close.click()
            page.mouse.move(0, 0)  # no hover state in the picture
            page.screenshot(path=str(path), full_page=True)
        finally:
            browser.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshot.png")
    parser.add_argument("--profile", default="auto", choices=list(app.PROFILES))
    args = parser.parse_args(argv)
    ctx = app.make_context(Session(), models=["demo"], default_model="demo", default_profile=args.profile)
    app.ensure_loaded(ctx)
    demo = app.build_blocks(ctx)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True, css=app.CSS)
    try:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        take_screenshot(url, args.out)
    finally:
        demo.close()
    print(f"wrote {args.out} ({args.out.stat().st_size:,} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
