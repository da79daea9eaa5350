"""Refresh docs/compare-panel-1400.png, docs/compare-panel-400.png and docs/history-plots.png: serve the page with
the bundled demo model, paste a bundled sample and its question in Debian's chromium, press "Compare profiles"
(cpu, baseline-fp32) a few times, and photograph the panel at 1400 and 400 px wide and the history's plots.

Run on demand after a change to the panel (`python scripts/refresh_compare_screenshot.py`); the tests never write
them. Needs what the browser test needs: /usr/bin/chromium and the playwright package (never `playwright install`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from refresh_screenshot import ROOT, TIMEOUT_S, launch_chromium, wait_until  # noqa: E402

from longqa.session import SAMPLES_DIR, Session, sample_examples  # noqa: E402
from page.context import make_context  # noqa: E402
from page.layout import build_blocks  # noqa: E402
from page.asking import ensure_loaded  # noqa: E402


def compare(page, rounds: int) -> None:
    """Paste the first sample and its question, open the panel and compare `rounds` times (two runs each)."""
    example = sample_examples()[0]
    page.get_by_label("Or paste text", exact=True).fill((SAMPLES_DIR / example["file"]).read_text()[:3000])
    page.get_by_label("Question", exact=True).fill(example["question"])
    page.get_by_text("Compare profiles", exact=True).first.click()
    bars = page.locator("#plots .mark-rect path")
    for done in range(1, rounds + 1):
        page.get_by_role("button", name="Compare profiles", exact=True).click()
        wait_until(lambda: bars.count() == 4 * done, f"{2 * done} bars in each plot")


def take_screenshots(url: str, out: Path, rounds: int) -> None:
    from playwright.sync_api import sync_playwright  # deferred: a test-only dependency (requirements-dev.txt)

    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(TIMEOUT_S * 1000)
            page.goto(url)
            page.get_by_label("Question", exact=True).wait_for()
            compare(page, rounds)
            page.wait_for_timeout(2000)  # the plots redraw with their colours after the data
            page.mouse.move(0, 0)
            page.locator("#compare-panel").screenshot(path=str(out / "compare-panel-1400.png"))
            page.locator("#plots").screenshot(path=str(out / "history-plots.png"))
            page.set_viewport_size({"width": 400, "height": 900})
            page.wait_for_timeout(2000)
            page.locator("#compare-panel").screenshot(path=str(out / "compare-panel-400.png"))
        finally:
            browser.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    ctx = make_context(Session(), models=["demo"], default_model="demo", default_profile="cpu")
    ensure_loaded(ctx)
    demo = build_blocks(ctx)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        take_screenshots(url, args.out, args.rounds)
    finally:
        demo.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
