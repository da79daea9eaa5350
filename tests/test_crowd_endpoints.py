"""Issue 48's attacks on the endpoints that wait for a one-at-a-time resource, against a real server (`python app.py
--model demo`, default settings, loopback), smaller than docs/serving.md's: while one session floods `/plan` or
`/load_profile` joins, one session sends 4-profile compares of a 1 MB text, or twelve visitors ask for training
steps at 4,096 tokens, another visitor is never refused and waits within the test margin of its target each time
(`crowd_check.VISITOR_WAIT_TARGET_S`, `TEST_MARGIN`)."""

from __future__ import annotations

import pytest

from bench.crowd import crowd_attacks, crowd_check, load_check
from longqa.session import SAMPLES_DIR
from page.context import DEFAULT_QUEUE_SIZE

pytestmark = pytest.mark.slow
MB = 2**20


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    process, url = crowd_attacks.start_demo_server(tmp_path_factory.mktemp("gradio-uploads"), "--no-lock-profile")
    try:
        visitor(url)()  # warm
        yield process, url
    finally:
        load_check.stop_server(process)


def visitor(url):
    return crowd_check.sample_visitor(url, SAMPLES_DIR)


def served_within_target(out: crowd_attacks.AttackOutcome) -> None:
    assert out.visitor_error is None and out.visitor_right, out
    assert out.extra["visitor_refused"] == 0 and out.extra["visitor_asks"] >= 1, out.extra
    bound = crowd_check.TEST_MARGIN * crowd_check.VISITOR_WAIT_TARGET_S
    assert out.visitor_s < bound, f"the visitor waited {out.visitor_s:.1f} s"


@pytest.mark.parametrize("api_name, data", [
    ("plan", ["demo", "T4", None, 1, None, None, None, False, None]),
    ("load_profile", ["cpu", "demo", [], None]),
])
def test_a_flood_of_joins_from_one_session_never_fills_the_queue_for_another_visitor(server, api_name, data):
    process, url = server
    out = crowd_attacks.endpoint_flood(url, process.pid, api_name, data, visitor(url), seconds=6.0,
                                       vary=lambda i, values: [("cpu", "baseline-fp32")[i % 2], *values[1:]]
                                       if api_name == "load_profile" else values)
    served_within_target(out)
    # more joins than the queue holds (tens a second come, docs/serving.md): a flood that would have filled it
    assert out.extra["joins"] > DEFAULT_QUEUE_SIZE and out.extra["joins_refused"] == 0, out.extra
    assert any(o.startswith("refused: You already have") for o in out.crowd) or api_name == "plan", out.crowd[:3]


def test_compares_from_one_session_are_one_at_a_time_and_bounded_in_time(server, tmp_path):
    process, url = server
    big = tmp_path / "one-mb.txt"
    big.write_text(crowd_check.fact_text(MB, 7))
    args = ([crowd_attacks.handle_file(str(big))], "", "What is the tide of Harrowgate?", 3, "full", "",
            ["cpu", "baseline-fp32", "auto", "custom"], ["int8_dynamic"])
    out = crowd_attacks.many_calls(url, process.pid, "/compare", args, visitor(url), calls=3, one_client=True)
    served_within_target(out)
    assert all(o.startswith("refused: ") for o in out.crowd), out.crowd  # over the time limit, or one at a time


def test_twelve_visitors_training_steps_hold_the_other_visitor_back_by_one_step(server):
    process, url = server
    out = crowd_attacks.many_calls(url, process.pid, "/training_step", (4096,), visitor(url), calls=12,
                                   one_client=False)
    served_within_target(out)
    assert sum(o == "answered" for o in out.crowd) >= 1
    assert sum("A training step is already running" in o for o in out.crowd) >= 6, out.crowd
