"""Load: 20 concurrent /ask calls against a server on 127.0.0.1 with the demo model all complete correctly."""

from __future__ import annotations

import pytest

import app
from longqa.load_test import run_load, summarize
from longqa.session import Session


@pytest.fixture(scope="module")
def demo_url():
    ctx = app.make_context(Session(), models=["demo"], default_model="demo", default_profile="cpu")
    app.ensure_loaded(ctx)
    demo = app.build_blocks(ctx)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True)
    yield url
    demo.close()


def test_twenty_concurrent_calls_all_complete_with_correct_answers(demo_url):
    results = run_load(demo_url, n_calls=20, timeout_s=300)
    summary = summarize(results)
    assert summary["completed"] == 20, summary["errors"]
    assert summary["correct"] >= 19  # the demo model's measured exact match is the README's; none lost
    assert summary["max_queue_position_seen"] >= 1  # requests waited in the queue and were told where
    assert 0 < summary["p50_s"] <= summary["p95_s"]
