"""Load: 20 concurrent /ask calls against a server on 127.0.0.1 with the demo model all complete correctly."""

from __future__ import annotations

import pytest

from page.context import make_context
from page.layout import build_blocks
from page import asking, context
from bench.crowd.load_check import is_numeric_fact, requests_for, run_load, start_server, summarize
from longqa.session import Session


WORKERS = 4  # fewer request workers than calls, so that calls really wait in gradio's queue and are told their
# place: with the default 32 the 20 calls all start at once, and a place in the queue shows only for an instant


@pytest.fixture(scope="module")
def demo_url():
    ctx = make_context(Session(), models=["demo"], default_model="demo", default_profile="cpu")
    asking.ensure_loaded(ctx)
    default_workers, context.REQUEST_WORKERS = context.REQUEST_WORKERS, WORKERS
    try:
        demo = build_blocks(ctx)
    finally:
        context.REQUEST_WORKERS = default_workers
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True)
    yield url
    demo.close()


@pytest.mark.slow
def test_twenty_concurrent_calls_all_complete_with_correct_answers(demo_url):
    results = run_load(demo_url, n_calls=20, timeout_s=300)
    summary = summarize(results)
    assert summary["completed"] == 20, summary["errors"]
    assert summary["correct"] == 20, [(r.expected, r.answer) for r in results if r.answer != r.expected]
    # Concurrency changed nothing: every answer (text and position) is the one its request got alone.
    assert summary["same_as_alone"] == 20, [(r.alone, r.answer, r.span) for r in results]
    assert len({r.expected for r in results}) == 20  # distinct facts: a swapped answer would be wrong
    assert summary["max_queue_position_seen"] >= 1  # requests waited in the queue and were told where
    assert 0 < summary["p50_s"] <= summary["p95_s"]


def test_load_requests_are_distinct_numeric_facts_and_bounded():
    examples = requests_for(20)
    assert len(examples) == 20 and all(is_numeric_fact(e) for e in examples)
    assert len({e.text for e in examples}) == len({e.answer for e in examples}) == 20
    assert len(requests_for(10_000)) == 64
    with pytest.raises(ValueError, match="only runs against a server on this machine"):
        run_load("http://192.0.2.1:7860/", n_calls=1)


@pytest.mark.slow  # starts app.py in a process
def test_a_server_that_cannot_start_is_reported_with_its_own_words():
    with pytest.raises(RuntimeError, match="did not start") as refused:
        start_server(["--model", "demo", "--profile", "no-such-profile"], timeout_s=120)
    assert "invalid choice: 'no-such-profile'" in str(refused.value)
