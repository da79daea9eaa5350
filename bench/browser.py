"""Debian's chromium as every browser check launches it: the tests' pages, the page-wait measurement and the
screenshot scripts. Headless, no sandbox (these machines run as root), nothing fetched in the background. Not
playwright's own browsers (never `playwright install`: no download here) and not what a check does with a page."""

from __future__ import annotations

from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")  # apt-get install -y chromium
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


def launch_chromium(playwright):
    """A headless chromium from a started playwright (`sync_playwright()`); the caller closes it."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
