"""The serving policy without gradio: unread streams, a request's turn and its stop check, ZeroGPU durations."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from longqa.serving import policy
from longqa_core.batching import BatchState
from tests.conftest import Clock


def test_a_stream_is_unread_only_after_it_stays_long_for_the_stall_time():
    clock = Clock()
    stall = policy.UnreadStall(limit=4, stall_s=10.0, clock=clock)
    assert not stall.is_unread(10)  # long, but only just now
    clock.now = 9.0
    assert not stall.is_unread(10)
    clock.now = 10.5
    assert stall.is_unread(10)
    assert not stall.is_unread(3)  # a reader drained it: the clock starts again
    clock.now = 15.0
    assert not stall.is_unread(10)
    assert not stall.is_unread(None)  # no stream at all is no unread stream


def test_a_stop_key_finds_its_stop_check_while_it_is_held_and_only_then():
    check = lambda: False  # noqa: E731
    with policy.stop_key(check) as key:
        assert policy.stop_check(key) is check
    assert policy.stop_check(key) is None
    assert policy.stop_check(None) is None


def test_the_stop_check_is_released_when_the_request_fails():
    with pytest.raises(RuntimeError):
        with policy.stop_key(lambda: False) as key:
            raise RuntimeError("the model failed")
    assert policy.stop_check(key) is None


def planned(window_tokens: int, mode: str = "full", full_read_s=None, guided_read_s=None):
    """A plan as far as the GPU duration reads it (`RequestPlan.expected_window_tokens`: all windows' tokens for a
    full read, the expected rounds' for a guided one, counted when planning; what the plan expected them to take,
    None where it had no measured rate)."""
    return SimpleNamespace(mode=mode, expected_window_tokens=window_tokens, full_read_s=full_read_s,
                           guided_read_s=guided_read_s)


def measured(tokens_per_s: float) -> BatchState:
    state = BatchState(1)
    state.record_forward(int(tokens_per_s * 10), 10.0, 10)
    return state


def test_gpu_seconds_grow_with_the_planned_windows_and_shrink_with_the_measured_speed():
    small, large = policy.answer_gpu_seconds(planned(3_000), None), policy.answer_gpu_seconds(planned(100_000), None)
    assert policy.GPU_DURATION_BASE_S < small < large
    assert large == pytest.approx(policy.GPU_DURATION_BASE_S + 100_000 / policy.ASSUMED_TOKENS_PER_S)
    assert policy.answer_gpu_seconds(planned(100_000), measured(10 * policy.ASSUMED_TOKENS_PER_S)) < large
    guided = policy.answer_gpu_seconds(planned(3 * 4096, "guided"), measured(4096.0))
    assert guided == pytest.approx(policy.GPU_DURATION_BASE_S + 3)  # three whole windows, 1 s a window here
    assert policy.answer_gpu_seconds(planned(10**9), None) == policy.GPU_DURATION_MAX_S
    # the plan's own prediction where it has one, not a newer rate: the worker's budget (the grant less its start-up
    # allowance) must not refuse the read the plan predicted (1.13 s predicted, refused a budget of 1.11 s once)
    fast_now = measured(20 * policy.ASSUMED_TOKENS_PER_S)
    assert policy.answer_gpu_seconds(planned(100_000, full_read_s=1.13), fast_now) == pytest.approx(
        policy.GPU_DURATION_BASE_S + 1.13)
    assert policy.answer_gpu_seconds(planned(12_288, "guided", 9.0, 2.5), fast_now) == pytest.approx(
        policy.GPU_DURATION_BASE_S + 2.5)
    # the worker's budget is the work itself, not the grant less its allowance: (20 + x) - 20 < x for this x
    assert (policy.gpu_seconds(4.4402613) - policy.GPU_DURATION_BASE_S) < 4.4402613
    assert policy.granted_work_s(4.4402613) == 4.4402613
    assert policy.granted_work_s(10**6) == policy.GPU_DURATION_MAX_S - policy.GPU_DURATION_BASE_S
    assert policy.training_gpu_seconds(512, None) == pytest.approx(
        policy.GPU_DURATION_BASE_S + policy.TRAINING_STEP_WINDOWS * 512 / policy.ASSUMED_TOKENS_PER_S)
