"""The plan panel in Debian's chromium (Playwright), wide and phone-narrow: Plan fills ours beside the article's
advice (one above the other on a phone) and the table; picking "Other" shows the memory field. Selects by labels."""

from __future__ import annotations

import gradio as gr
import pytest

from page import plan_panel
from bench.browser import CHROMIUM
from tests.test_plan_panel import offering

LARGE = "allenai/longformer-large-4096-finetuned-triviaqa"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                                     "(apt-get install -y chromium; CI installs it)"),
]


@pytest.fixture(scope="module")
def url():
    with gr.Blocks() as demo:
        plan_panel.build_plan_panel(offering([LARGE], LARGE))
    _, address, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True)
    yield address
    demo.close()


@pytest.mark.parametrize("width", [1400, 400])
def test_plan_fills_ours_beside_the_article_and_the_table(browser, url, width, tmp_path):
    page = browser.new_page(viewport={"width": width, "height": 1000})
    page.set_default_timeout(60_000)
    page.goto(url)
    page.get_by_text("Plan for another machine (predicted memory)").click()
    assert not page.get_by_label("GPU memory (GB)").is_visible()
    page.get_by_role("button", name="Plan", exact=True).click()
    ours, article = page.locator("#plan-ours h3"), page.locator("#plan-article h3")
    ours.wait_for()
    assert ours.inner_text().startswith("Ours: t4-16gb (predicted 3.5 GB")
    assert article.inner_text() == "The article: fp16 with dynamic batching and memory-mapped loading"
    assert "not GPU memory" in page.locator("#plan-article").inner_text()
    table = page.get_by_role("table", name="Every profile on that machine (predicted)")
    assert "t4-16gb (recommended)" in table.inner_text()
    ours_box, article_box = ours.bounding_box(), article.bounding_box()
    if width >= 1000:
        assert abs(ours_box["y"] - article_box["y"]) < 40 and article_box["x"] > ours_box["x"] + 300  # side by side
    else:
        assert article_box["y"] > ours_box["y"] + 100  # stacked on a phone
    page.screenshot(path=str(tmp_path / f"plan-{width}.png"), full_page=True)
    page.get_by_label("GPU", exact=True).click()
    page.get_by_role("option", name=plan_panel.OTHER_GPU).click()
    page.get_by_label("GPU memory (GB)").wait_for()
    page.close()
