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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_queued_work_over_the_bound_refuses_large_requests_with_a_retry_estimate_but_never_small_ones():
    lane = ModelLane(max_queued_windows=100, max_active=1, seconds_for_windows=lambda n: 0.5 * n)
    runner, done = SleepyRunner(0.01), {}
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


# ------------------------------------------------------------------------------------------ widening (issue 40)
def guided_then_full(lane: ModelLane, runner, name: str, guided: int, full: int, done: dict, should_stop=None):
    """A guided read admitted for its `guided` windows that then falls back to `full` more, as `answer_plan` does
    through the gate's `widen`."""
    from longqa.serving.lane import GatedRunner
    import torch

    def run():
        try:
            with lane.request(name, windows=guided) as ticket:
                gated = GatedRunner(lane, ticket, runner)
                for _ in range(guided):
                    gated({"name": name, "input_ids": torch.zeros(1, 1)})
                lane.widen(ticket, full, should_stop)
                done.setdefault("widened", []).append(name)
                for _ in range(full):
                    gated({"name": name, "input_ids": torch.zeros(1, 1)})
            done[name] = ticket.queue_readout()
        except Exception as exc:  # noqa: BLE001 - recorded for the test to check
            done[name] = exc
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
def test_a_guided_read_that_falls_back_waits_for_a_large_place_and_says_so():
    lane, runner, done = ModelLane(max_active=1), SleepyRunner(0.01), {}
    threads = [read(lane, runner, "big", 60, done)]
    wait_for(lambda: len(runner.ran) >= 2)
    threads.append(guided_then_full(lane, runner, "guided", 2, 40, done))
    wait_for(lambda: runner.ran.count("guided") >= 2)  # small: its guided windows went between the big ones
    assert "big" not in done
    time.sleep(0.1)
    assert runner.ran.count("guided") == 2  # its full read waits for the large place the big read holds
    for thread in threads:
        thread.join(20)
    queue = done["guided"]
    assert not isinstance(queue, Exception) and "big" in done
    last_big = len(runner.ran) - 1 - runner.ran[::-1].index("big")
    guided_at = [i for i, name in enumerate(runner.ran) if name == "guided"]
    assert len(guided_at) == 42 and guided_at[2] > last_big  # its full read came after the big one
    assert queue.waited_to_read_all_s is not None and queue.waited_to_read_all_s > 0.1
    assert queue.waited_s >= queue.waited_to_read_all_s + queue.waited_to_start_s


@pytest.mark.slow
def test_guided_reads_falling_back_together_read_in_full_no_more_than_max_active_at_once():
    lane, done = ModelLane(max_active=2), {}
    most = [0]

    class Counting(SleepyRunner):
        def __call__(self, batch):
            most[0] = max(most[0], sum(t.active and not lane.is_small(t) for t in lane._tickets))
            return super().__call__(batch)
    runner = Counting(0.005)
    threads = [guided_then_full(lane, runner, f"g{i}", 2, 20, done) for i in range(5)]
    for thread in threads:
        thread.join(30)
    assert all(not isinstance(done[f"g{i}"], Exception) for i in range(5)), done
    assert most[0] == 2  # never more than two full reads in progress, though all five were admitted small
    assert sum(done[f"g{i}"].waited_to_read_all_s > 0.05 for i in range(5)) >= 3


@pytest.mark.slow
def test_a_guided_read_stopped_while_waiting_to_widen_leaves_the_line():
    lane, runner, done = ModelLane(max_active=1), SleepyRunner(0.01), {}
    stop = threading.Event()
    threads = [read(lane, runner, "big", 100, done)]
    wait_for(lambda: len(runner.ran) >= 2)
    threads.append(guided_then_full(lane, runner, "guided", 1, 50, done, should_stop=stop.is_set))
    wait_for(lambda: "guided" in runner.ran)
    time.sleep(0.1)
    stop.set()
    threads[1].join(3)
    assert isinstance(done["guided"], Cancelled) and "widened" not in done
    threads[0].join(20)
    assert lane.waiting() == 0 and not lane.is_busy()


# ------------------------------------------------------------------------------------------ the door (issue 40)
def test_planning_at_the_door_counts_toward_the_visitors_share_and_the_queue():
    lane = ModelLane(per_visitor=1, max_waiting=2)
    with lane.door("v") as place:
        with pytest.raises(LaneBusyError, match="already have"):
            with lane.door("v"):
                pass
        with lane.door("w"), lane.door("x"):
            with pytest.raises(LaneBusyError, match="queue is full"):
                with lane.door("y"):
                    pass
        with lane.request("v", windows=3, ticket=place) as ticket:
            assert ticket is place and ticket.active and not ticket.planning
    assert lane.waiting() == 0


def test_a_request_being_planned_does_not_hold_back_large_requests_behind_it():
    lane, runner, done = ModelLane(max_active=1), SleepyRunner(0.01), {}
    with lane.door("planner"):
        thread = read(lane, runner, "big", 5, done)  # came after, but is planned: it goes first
        thread.join(5)
    assert "big" in done and not isinstance(done["big"], Exception)


def test_a_planned_request_over_the_work_bound_is_refused_and_leaves_the_line():
    lane = ModelLane(max_queued_windows=50)
    with lane.door("v") as place:
        with pytest.raises(LaneBusyError, match="would add about 60"):
            with lane.request("v", windows=60, ticket=place):
                pass
    assert lane.waiting() == 0 and lane._tickets == []


# ------------------------------------------------------------------------------- every endpoint's share (issue 48)
def test_a_visitor_has_one_exclusive_turn_in_line_and_a_second_is_refused_at_once():
    lane, order, release, started = ModelLane(per_visitor=3), [], threading.Event(), threading.Event()
    first = hold(lane, "v", order, release, started, exclusive=True)
    assert started.wait(5)
    began = time.monotonic()
    with pytest.raises(LaneBusyError, match="already have a reload or a comparison"):
        with lane.turn("v", exclusive=True):
            pass
    assert time.monotonic() - began < 1.0
    with lane.door("w"):  # another visitor's place is taken at once
        pass
    release.set()
    first.join(5)
    with lane.turn("v", exclusive=True):  # once the first has ended, the next is taken
        pass


@pytest.mark.slow
def test_a_door_after_exclusive_turns_waits_for_the_ones_before_it_only():
    lane, order, release, started = ModelLane(), [], threading.Event(), threading.Event()
    reload = hold(lane, "r", order, release, started, exclusive=True)
    assert started.wait(5)
    seen = []

    def visit():
        with lane.door("visit", after_exclusive=True):
            seen.append(list(order))

    thread = threading.Thread(target=visit, daemon=True)
    thread.start()
    time.sleep(0.3)
    assert seen == []  # it waits while the reload before it runs
    release.set()
    thread.join(5)
    reload.join(5)
    assert seen == [["r"]]
    with lane.door("visit", after_exclusive=True):  # nothing before it: at once
        pass


@pytest.mark.slow
def test_the_lane_takes_one_exclusive_turn_of_a_kind_at_a_time_whoever_asks():
    """Twelve visitors' training steps: one holds the model, the others are refused at once, and another visitor's
    answer waits for that one step only."""
    lane = ModelLane(seconds_for_windows=lambda n: 2.0 * n)
    order, release, started = [], threading.Event(), threading.Event()
    first = hold(lane, "t0", order, release, started, exclusive=True, only_one="training step")
    assert started.wait(5)
    began = time.monotonic()
    for visitor in range(1, 12):
        with pytest.raises(LaneBusyError, match="A training step is already running or waiting.*in about 10 s"):
            with lane.turn(f"t{visitor}", exclusive=True, only_one="training step"):
                pass
    assert time.monotonic() - began < 1.0
    at_once = threading.Event()
    at_once.set()
    compare = hold(lane, "c", order, at_once, exclusive=True, only_one="comparison")  # waits its turn
    time.sleep(0.3)
    assert order == ["t0"]
    release.set()
    first.join(5)
    compare.join(15)
    assert order == ["t0", "c"]
