"""Serving policy, free of gradio: when a request counts as abandoned (the server stopping among the reasons), the
key under which a ZeroGPU worker finds a request's stop check, how many seconds of GPU a ZeroGPU request asks for, and the memory settings a server process
starts with. Turns on the model are the lane's (`ModelLane.turn`, `lane.request_turn`).

It holds no model and formats nothing; the page supplies what only gradio knows (its queue, the visitor).
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from typing import Callable, Iterator

from longqa_core import telemetry
from longqa_core.batching import BatchState

# A stream that has held more than this many unread messages (progress comes about once a batch) for this long has
# no reader: the caller has gone. A slow but present reader drains it now and then.
UNREAD_MESSAGES_LIMIT = 16
UNREAD_STALL_S = 30.0
# ZeroGPU attaches a GPU for the duration a function asks for: a fixed start-up allowance plus the request's
# predicted forward time (the tokens of its planned windows at the loaded model's measured throughput).
GPU_DURATION_BASE_S = 20.0
GPU_DURATION_MAX_S = 300.0
ASSUMED_TOKENS_PER_S = 2_000.0  # until the loaded model has measured its own
TRAINING_STEP_WINDOWS = 6  # two forward+backward steps cost about six forward passes of the window


class UnreadStall:
    """Whether a request's stream has gone unread: more than `limit` messages waiting for longer than `stall_s`.
    Each call passes the number of messages waiting now; a reader that keeps the stream short resets the clock."""

    def __init__(self, limit: int | None = None, stall_s: float | None = None, clock=time.monotonic):
        self.limit = UNREAD_MESSAGES_LIMIT if limit is None else limit
        self.stall_s = UNREAD_STALL_S if stall_s is None else stall_s
        self.clock = clock
        self.drained_at = clock()

    def is_unread(self, waiting: int | None) -> bool:
        now = self.clock()
        if waiting is None or waiting <= self.limit:
            self.drained_at = now
        return now - self.drained_at > self.stall_s


# Set once the server is told to stop (SIGTERM): every request in progress counts as abandoned and ends before its
# next batch, so that the model can be freed and the process exit within seconds, not after the reads in flight.
STOPPING = threading.Event()


def stop_serving() -> None:
    """From now on every request's stop check says stop."""
    STOPPING.set()


# How a GPU function run in ZeroGPU's forked worker learns that its request was abandoned (Stop, a closed tab, a
# vanished client), by key: ZeroGPU pickles a GPU function's arguments, so the request carries the key, never the
# check; a forked worker sees a frozen copy and never stops early, which is safe. A request answered in this process
# is handed its stop check and its gate directly (`lane.request_turn`).
STOP_CHECKS: dict[str, Callable[[], bool]] = {}


@contextlib.contextmanager
def stop_key(should_stop: Callable[[], bool]) -> Iterator[str]:
    """The key under which `should_stop` is found (`stop_check`) while the `with` body runs."""
    key = uuid.uuid4().hex
    STOP_CHECKS[key] = should_stop
    try:
        yield key
    finally:
        STOP_CHECKS.pop(key, None)


def stop_check(stop_key: str | None) -> Callable[[], bool] | None:
    """The stop check registered under `stop_key`, or None (a direct call, or a forked worker's stale key)."""
    return STOP_CHECKS.get(stop_key) if stop_key is not None else None


def gpu_seconds(work_s: float) -> float:
    """Seconds of GPU to ask ZeroGPU for: the start-up allowance plus `work_s` of predicted forward time, capped."""
    return min(GPU_DURATION_MAX_S, GPU_DURATION_BASE_S + work_s)


def answer_gpu_seconds(plan, measured: BatchState | None) -> float:
    """Seconds of GPU for a planned answer (`longqa_core.plan.RequestPlan`): the start-up allowance plus its forward
    work (`answer_work_s`), capped."""
    return gpu_seconds(answer_work_s(plan, measured))


def answer_work_s(plan, measured: BatchState | None) -> float:
    """A planned answer's forward seconds: the windows it expects to read, at the throughput the plan predicted
    with, so that the grant (and the worker's budget within it) agrees with the plan's own prediction; at the loaded
    model's measured throughput where the plan had none (`measured`; an assumed one before any was measured)."""
    planned_s = plan.guided_read_s if plan.guided_read_s is not None else plan.full_read_s
    return planned_s if planned_s is not None else _forward_s(plan.expected_window_tokens, measured)


def granted_work_s(work_s: float) -> float:
    """The forward seconds a grant for `work_s` covers: all of it, or what the cap leaves after the start-up
    allowance. Not the grant less the allowance: `(20 + x) - 20` may come out a hair under `x`, and a full read
    predicted at x was then refused a budget of x (1.11317 s, 4.44026 s)."""
    return min(work_s, GPU_DURATION_MAX_S - GPU_DURATION_BASE_S)


def training_gpu_seconds(window_tokens: int, measured: BatchState | None) -> float:
    """Seconds of GPU for the training-step readout on one window of `window_tokens`."""
    return gpu_seconds(_forward_s(TRAINING_STEP_WINDOWS * window_tokens, measured))


def _forward_s(tokens: int, measured: BatchState | None) -> float:
    return (measured or BatchState(1)).seconds_for_tokens(tokens, ASSUMED_TOKENS_PER_S)


def tune_server_process() -> dict[str, int]:
    """A server process's memory settings, set before the model loads: glibc's arenas (`telemetry.tune_allocator`:
    few) and start-up's objects frozen out of later garbage collections (`telemetry.freeze_start_up`).
    docs/crowd-lane.md measures what they change. Returns what was set (glibc's variables, and `frozen_objects`)."""
    return {**telemetry.tune_allocator(), "frozen_objects": telemetry.freeze_start_up()}
