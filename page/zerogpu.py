"""The ZeroGPU contexts: whether this process runs under ZeroGPU, the decorator that makes a GPU function, the GPU
seconds each asks for, and the training step's GPU function (the answer's, `page.asking.answer_on_gpu`, sits beside
the answer it runs). Only the model work: reading, planning and turns happen before, in the handlers. Off ZeroGPU
only the training step's function runs, undecorated.
"""

from __future__ import annotations

import os

try:  # Hugging Face Spaces ship `spaces`; imported before torch so that ZeroGPU can patch CUDA first
    import spaces
except ImportError:
    spaces = None

from longqa.serving import policy
from longqa.session import NO_MODEL
from longqa_core.errors import ModelLoadError
from page.context import CONTEXTS
from page.hardening import user_errors
from page.words import PICK_MODEL

ZERO_GPU = os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")  # as the `spaces` package reads it
# GPU functions then run in a forked worker: what their forward passes measured comes back in the readout.
RUNS_IN_WORKER = ZERO_GPU and spaces is not None


def gpu_function(duration):
    """`@spaces.GPU(duration=...)` where the `spaces` package is installed (a no-op outside ZeroGPU), else nothing."""
    if spaces is None:
        return lambda fn: fn
    return spaces.GPU(duration=duration)


def answer_duration(context_key: str, plan, extract_s: float = 0.0, progress=None, stop_key=None,
                    work_s: float | None = None) -> float:
    """Seconds of GPU to ask ZeroGPU for: the start-up allowance and `work_s`, the forward seconds the page
    predicted for the windows the plan expects to read (`policy.answer_work_s`: what the ranking picked, or every
    window; predicted here where the caller gave none)."""
    if work_s is not None:
        return policy.gpu_seconds(work_s)
    return policy.answer_gpu_seconds(plan, CONTEXTS[context_key].measured())


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
