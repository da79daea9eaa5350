"""The ZeroGPU contexts: the GPU functions (answer, training step), the GPU seconds each asks for, and whether this
process runs under ZeroGPU. Only the model work: reading, planning and turns happen before, in the handlers.
"""

from __future__ import annotations

import os

try:  # Hugging Face Spaces ship `spaces`; imported before torch so that ZeroGPU can patch CUDA first
    import spaces
except ImportError:
    spaces = None

from longqa.readout import Readout
from longqa.serving import policy
from longqa.session import NO_MODEL
from longqa_core.errors import ModelLoadError
from page import format as fmt
from page.context import CONTEXTS
from page.errors import user_errors
from page.streaming import candidate_listener
from page.words import PICK_MODEL

ZERO_GPU = os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")  # as the `spaces` package reads it
# GPU functions then run in a forked worker: what their forward passes measured comes back in the readout.
RUNS_IN_WORKER = ZERO_GPU and spaces is not None


def gpu_function(duration):
    """`@spaces.GPU(duration=...)` where the `spaces` package is installed (a no-op outside ZeroGPU), else nothing."""
    if spaces is None:
        return lambda fn: fn
    return spaces.GPU(duration=duration)


def answer_duration(context_key: str, plan, extract_s: float = 0.0, progress=None, stop_key=None) -> float:
    """Seconds of GPU to ask ZeroGPU for (`policy.answer_gpu_seconds`): the windows the plan expects to read (what
    the ranking picked, or every window) at the loaded model's measured throughput."""
    return policy.answer_gpu_seconds(plan, CONTEXTS[context_key].measured())


@gpu_function(duration=answer_duration)
def answer_on_gpu(context_key: str, plan, extract_s: float = 0.0, progress=None,
                  stop_key: str | None = None) -> Readout:
    """The model work of one planned request, and nothing else: its arguments and its readout pickle (ZeroGPU runs
    it in a forked worker), and it reaches the loaded model through the module's contexts. Ends between batches
    when the request is abandoned; under ZeroGPU the plan's time budget is no more than the GPU time it asked for
    (a guided read whose answer stays weak then keeps what it read). The best answer so far goes to the page's
    listener after each batch, where one listens (`page.streaming`)."""
    ctx = CONTEXTS[context_key]
    on_window_progress = None
    if progress is not None:
        def on_window_progress(state):
            left = f", about {fmt.format_seconds(state.eta_s)} left" if state.eta_s is not None else ""
            progress((state.windows_done, state.windows_total),
                     desc=f"{state.windows_done:,} windows done, {state.windows_left:,} to go{left}",
                     unit="windows")
    if spaces is not None:  # ZeroGPU ends the function at the duration it asked for: read no further than that
        granted_s = answer_duration(context_key, plan)
        budget_s = plan.settings.max_request_s or granted_s
        plan = plan.with_budget(min(budget_s, max(1.0, granted_s - policy.GPU_DURATION_BASE_S)))
    with user_errors("Answering"):  # inside: ZeroGPU passes only gr.Error through from its worker
        if ctx.session.loaded is None:
            raise ModelLoadError(f"{NO_MODEL} {PICK_MODEL}")
        listener = candidate_listener()  # none in a ZeroGPU worker: the page shows the final answer only
        on_candidate = None if listener is None else lambda best: listener(best, plan.documents)
        return ctx.session.ask(plan, extract_s=extract_s, gate=policy.gate(stop_key),
                               should_stop=policy.stop_check(stop_key), on_window_progress=on_window_progress,
                               on_candidate=on_candidate)


def training_duration(context_key: str, window_tokens: int) -> float:
    """Two forward+backward steps of one window (`policy.training_gpu_seconds`) at the loaded model's measured
    throughput."""
    return policy.training_gpu_seconds(window_tokens, CONTEXTS[context_key].measured())


@gpu_function(duration=training_duration)
def training_step_on_gpu(context_key: str, window_tokens: int):
    """One forward+backward step with and without gradient checkpointing on the loaded model (picklable in and
    out, like `answer_on_gpu`): the readout and the window's length in tokens."""
    ctx = CONTEXTS[context_key]
    with user_errors("The training step"):
        if ctx.session.loaded is None:
            raise ModelLoadError(f"{NO_MODEL} {PICK_MODEL}")
        return ctx.session.training_step(window_tokens)
