"""The model lane: first come first served, bounds per visitor and in all, cancellation while waiting."""

from __future__ import annotations

import threading
import time

import pytest

from longqa.serving.lane import LaneBusyError, ModelLane
from longqa_core.errors import Cancelled


def hold(lane: ModelLane, visitor: str, order: list, release: threading.Event, started: threading.Event | None = None,
         **kwargs):
    def run():
        try:
            with lane.turn(visitor, **kwargs):
                order.append(visitor)
                if started is not None:
                    started.set()
                release.wait(10)
        except Exception as exc:  # noqa: BLE001 - recorded for the test to check
            order.append(f"{visitor}: {type(exc).__name__}")
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def wait_for(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_requests_take_turns_in_arrival_order():
    lane, order, release = ModelLane(), [], threading.Event()
    first_started = threading.Event()
    threads = [hold(lane, "a", order, release, first_started)]
    assert first_started.wait(5)
    for visitor in "bcd":
        threads.append(hold(lane, visitor, order, release))
        wait_for(lambda n=len(threads) - 1: lane.waiting() == n)
    assert order == ["a"] and lane.is_busy()
    release.set()
    for thread in threads:
        thread.join(10)
    assert order == ["a", "b", "c", "d"] and not lane.is_busy() and lane.waiting() == 0


def test_one_visitor_gets_one_running_and_a_bounded_wait():
    lane, order, release = ModelLane(per_visitor=2), [], threading.Event()
    started = threading.Event()
    threads = [hold(lane, "greedy", order, release, started)]
    assert started.wait(5)
    threads.append(hold(lane, "greedy", order, release))
    wait_for(lambda: lane.waiting() == 1)
    with pytest.raises(LaneBusyError, match="already have a request running and 1 waiting"):
        with lane.turn("greedy"):
            pass
    threads.append(hold(lane, "polite", order, release))  # another visitor still gets in line
    wait_for(lambda: lane.waiting() == 2)
    release.set()
    for thread in threads:
        thread.join(10)
    assert order == ["greedy", "greedy", "polite"]


def test_the_whole_wait_is_bounded():
    lane, order, release = ModelLane(max_waiting=1), [], threading.Event()
    started = threading.Event()
    threads = [hold(lane, "a", order, release, started)]
    assert started.wait(5)
    threads.append(hold(lane, "b", order, release))
    wait_for(lambda: lane.waiting() == 1)
    with pytest.raises(LaneBusyError, match="queue is full.*try again"):
        with lane.turn("c"):
            pass
    release.set()
    for thread in threads:
        thread.join(10)
    assert order == ["a", "b"]


def test_a_request_stopped_while_waiting_leaves_the_line_and_the_rest_go_on():
    lane, order, release = ModelLane(), [], threading.Event()
    started, stop = threading.Event(), threading.Event()
    threads = [hold(lane, "a", order, release, started)]
    assert started.wait(5)
    threads.append(hold(lane, "quitter", order, release, should_stop=stop.is_set))
    threads.append(hold(lane, "c", order, release))
    wait_for(lambda: lane.waiting() == 2)
    stop.set()
    wait_for(lambda: lane.waiting() == 1)
    release.set()
    for thread in threads:
        thread.join(10)
    assert order == ["a", f"quitter: {Cancelled.__name__}", "c"]


def test_a_failing_request_hands_the_model_on():
    lane = ModelLane()
    with pytest.raises(RuntimeError):
        with lane.turn("a"):
            raise RuntimeError("boom")
    assert not lane.is_busy()
    with lane.turn("a"):
        assert lane.is_busy()


def test_waiting_requests_hear_how_many_are_ahead():
    lane, order, release = ModelLane(), [], threading.Event()
    started = threading.Event()
    heard: list[int] = []
    threads = [hold(lane, "a", order, release, started), ]
    assert started.wait(5)
    threads.append(hold(lane, "b", order, release))
    wait_for(lambda: lane.waiting() == 1)
    threads.append(hold(lane, "c", order, release, on_wait=heard.append))
    wait_for(lambda: heard == [2])
    release.set()
    for thread in threads:
        thread.join(10)
    assert heard[0] == 2 and order == ["a", "b", "c"]


def test_with_capacity_shared_turns_run_side_by_side_and_an_exclusive_turn_waits_for_all_of_them():
    lane = ModelLane(capacity=2)
    release_shared, release_reload, order = threading.Event(), threading.Event(), []
    threads = [hold(lane, "a", order, release_shared), hold(lane, "b", order, release_shared)]
    wait_for(lambda: len(order) == 2)  # both inside at once
    assert sorted(order) == ["a", "b"]
    threads.append(hold(lane, "reload", order, release_reload, exclusive=True))
    wait_for(lambda: lane.waiting() == 1)
    threads.append(hold(lane, "c", order, release_shared))  # arrived after the reload: waits behind it
    wait_for(lambda: lane.waiting() == 2)
    time.sleep(0.3)
    assert order == ["a", "b"] or sorted(order) == ["a", "b"]
    release_shared.set()  # a and b finish; the reload runs alone
    wait_for(lambda: "reload" in order)
    time.sleep(0.3)
    assert order[2:] == ["reload"]  # c did not slip in beside it
    release_reload.set()
    wait_for(lambda: "c" in order)
    for thread in threads:
        thread.join(5)


def test_a_third_shared_turn_waits_when_capacity_is_two():
    lane, order, release = ModelLane(capacity=2), [], threading.Event()
    threads = [hold(lane, name, order, release) for name in ("a", "b", "c")]
    wait_for(lambda: len(order) == 2)
    time.sleep(0.3)
    assert len(order) == 2 and lane.waiting() == 1
    release.set()
    wait_for(lambda: len(order) == 3)
    for thread in threads:
        thread.join(5)


# ------------------------------------------------------------------------------------------ turns between batches
class SleepyRunner:
    """A model that takes `batch_s` a batch and records whose batch ran, in order."""

    devices = ["cpu"]

    def __init__(self, batch_s: float = 0.02):
        self.batch_s, self.ran = batch_s, []

    def __call__(self, batch):
        self.ran.append(batch["name"])
        time.sleep(self.batch_s)
        return None


def read(lane: ModelLane, runner, name: str, batches: int, done: dict, visitors=None, began=None):
    """A request of `batches` one-window batches, through the lane's gate; records when it finished."""
    from longqa.serving.lane import GatedRunner
    import torch

    def run():
        try:
            with lane.request(visitors or name, windows=batches) as ticket:
                gated = GatedRunner(lane, ticket, runner)
                for _ in range(batches):
                    gated({"name": name, "input_ids": torch.zeros(1, 1)})
            done[name] = (time.monotonic() - (began or 0.0), ticket.queue_readout())
        except Exception as exc:  # noqa: BLE001 - recorded for the test to check
            done[name] = exc
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow  # about 6 s each: real threads through many batches
@pytest.mark.parametrize("order", ["round_robin", "shortest_first"])
def test_a_small_request_waits_about_one_batch_per_other_request_not_for_their_reads(order):
    lane, runner, done = ModelLane(order=order, max_active=4), SleepyRunner(0.02), {}
    began = time.monotonic()
    threads = [read(lane, runner, f"big{i}", 100, done, began=began) for i in range(3)]
    wait_for(lambda: len(runner.ran) >= 6)
    small_began = time.monotonic()
    threads.append(read(lane, runner, "small", 2, done, began=small_began))
    threads[-1].join(10)
    small_s, queue = done["small"]
    assert small_s < 0.6, f"the small request took {small_s:.2f} s behind three 2-second reads"
    assert queue.ahead_at_start == 3 and queue.waited_s < 0.5
    first = runner.ran.index("small")
    assert runner.ran[first:first + 8].count("small") == 2  # its two batches came within a few turns
    for thread in threads:
        thread.join(20)
    assert all(not isinstance(v, Exception) for v in done.values())
    # nobody starved: the big reads all finished, and round robin interleaved them batch by batch
    if order == "round_robin":
        assert {runner.ran[i] for i in range(6)} == {"big0", "big1", "big2"}


def test_large_requests_past_max_active_wait_without_windows_while_small_ones_go_ahead():
    lane, runner, done = ModelLane(max_active=2), SleepyRunner(0.02), {}
    threads = [read(lane, runner, f"big{i}", 30, done) for i in range(3)]
    wait_for(lambda: len(runner.ran) >= 4)
    assert "big2" not in runner.ran  # the third large request is not in progress: it holds no windows yet
    threads.append(read(lane, runner, "small", 1, done))
    threads[-1].join(5)
    assert "small" in done and "big2" not in runner.ran[: runner.ran.index("small")]
    for thread in threads:
        thread.join(20)
    assert set(done) == {"big0", "big1", "big2", "small"}


def test_queued_work_over_the_bound_refuses_large_requests_with_a_retry_estimate_but_never_small_ones():
    lane, runner, done = ModelLane(max_queued_windows=100, max_active=1, window_s=lambda: 0.5), SleepyRunner(0.01), {}
    threads = [read(lane, runner, "big0", 80, done)]
    wait_for(lambda: len(runner.ran) >= 1)
    with pytest.raises(LaneBusyError, match=r"about [78]\d windows of other visitors' work queued.*try again in about"):
        with lane.request("late", windows=40):
            pass
    threads.append(read(lane, runner, "small", 3, done))  # a few batches: always taken
    for thread in threads:
        thread.join(20)
    assert set(done) == {"big0", "small"} and not isinstance(done["small"], Exception)


def test_a_visitor_known_by_its_address_gets_one_share_whatever_its_sessions():
    lane, order, release = ModelLane(per_visitor=1), [], threading.Event()
    started = threading.Event()
    threads = [hold(lane, ("session:a", "address:10.0.0.1"), order, release, started)]
    assert started.wait(5)
    with pytest.raises(LaneBusyError, match="already have a request running"):
        with lane.turn(("session:b", "address:10.0.0.1")):
            pass
    threads.append(hold(lane, ("session:c", "address:10.0.0.2"), order, release))  # another address: in line
    wait_for(lambda: lane.waiting() == 1)
    release.set()
    for thread in threads:
        thread.join(10)
    assert len(order) == 2
