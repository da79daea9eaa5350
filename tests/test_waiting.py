"""The one polling wait: it returns when what it waits for is there, hears a stop between polls, and runs the
caller's step (progress, another limit) only while the request goes on."""

from __future__ import annotations

import threading

import pytest

from longqa_core.errors import Cancelled
from longqa_core.waiting import wait_until


def test_it_returns_once_the_wait_is_over_and_runs_the_step_after_every_poll_that_was_not():
    polls, steps = [], []
    wait_until(lambda poll_s: polls.append(poll_s) or len(polls) == 3, lambda: False, "stopped", 0.25,
               between=lambda: steps.append(len(polls)))
    assert polls == [0.25, 0.25, 0.25] and steps == [1, 2]


def test_a_stop_ends_the_wait_with_its_message_before_the_step_runs():
    steps = []
    stop = threading.Event()
    with pytest.raises(Cancelled, match="^stopped while waiting$"):
        wait_until(lambda _: stop.set() or False, stop.is_set, "stopped while waiting", 0.01,
                   between=lambda: steps.append(1))
    assert steps == []


def test_a_step_that_raises_ends_the_wait():
    def over_time() -> None:
        raise TimeoutError("over the time limit")

    with pytest.raises(TimeoutError, match="over the time limit"):
        wait_until(lambda _: False, None, "stopped", 0.01, between=over_time)


def test_a_real_wait_returns_when_another_thread_sets_the_event():
    ready = threading.Event()
    threading.Timer(0.05, ready.set).start()
    wait_until(ready.wait, lambda: False, "stopped", 0.01)
    assert ready.is_set()
