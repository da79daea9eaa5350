"""Gradient checkpointing, and the training-step readout (forward + backward, with and without) that shows what
it saves. It acts only while gradients are computed: at inference it saves nothing and never claims to.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map_only

from strategies.base import TRANSFORM, Strategy


class GradientCheckpointing(Strategy):
    """Recompute each layer's activations in the backward pass instead of storing them.

    Saves: activation memory of a TRAINING step (forward + backward): the per-layer activations are not kept,
        only each layer's input. Nothing at inference: no activations are stored for a backward pass there.
    Costs: one extra forward per layer in the backward pass (the training-step rows of docs/results/bench-cpu time it).
    Requires: a model with `supports_gradient_checkpointing` (Longformer has it); training mode to act.
    """

    name = "gradient_checkpointing"
    description = "Recompute activations in backward: saves training-step memory only, nothing at inference."
    phase = TRANSFORM

    def transform(self, model):
        enable_checkpointing(model, True)
        return model


def enable_checkpointing(model, enabled: bool) -> None:
    """Switch checkpointing through the transformers 5 API (`activation_*`, else the older `gradient_*` names)."""
    if enabled:
        method = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    else:
        method = getattr(model, "activation_checkpointing_disable", None) or model.gradient_checkpointing_disable
    method()


def is_checkpointing(model) -> bool:
    flag = getattr(type(model), "is_activation_checkpointing", None)
    return bool(model.is_activation_checkpointing if flag is not None else model.is_gradient_checkpointing)


class LiveTensorPeak(TorchDispatchMode):
    """Peak bytes of tensor storages created inside the block and still alive (CPU has no allocator statistics).

    Storages are tracked from every op's outputs and released through a finalizer when their last reference
    (including autograd's saved tensors) goes, so the peak includes activations kept for backward.
    """

    def __init__(self):
        super().__init__()
        self.live: dict[int, int] = {}
        self.current_bytes = 0
        self.peak_bytes = 0

    def _track(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key in self.live or storage.device.type == "meta":
            return
        self.live[key] = storage.nbytes()
        self.current_bytes += self.live[key]
        self.peak_bytes = max(self.peak_bytes, self.current_bytes)
        weakref.finalize(storage, self._release, key)

    def _release(self, key: int) -> None:
        self.current_bytes -= self.live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tree_map_only(torch.Tensor, self._track, out)
        return out


@dataclass(frozen=True)
class TrainingStepReadout:
    peak_bytes_without: int
    peak_bytes_with: int
    time_s_without: float
    time_s_with: float
    measured_by: str  # "cuda max_memory_allocated" | "cpu live tensor bytes"

    @property
    def saved_bytes(self) -> int:
        return self.peak_bytes_without - self.peak_bytes_with

    @property
    def saved_fraction(self) -> float:
        return self.saved_bytes / self.peak_bytes_without if self.peak_bytes_without else 0.0

    @property
    def time_ratio(self) -> float:
        return self.time_s_with / self.time_s_without if self.time_s_without else float("nan")


def with_span_labels(batch: dict) -> dict:
    """The batch plus start/end positions (the last context token) when it has none: any valid span will do."""
    if "start_positions" in batch and "end_positions" in batch:
        return dict(batch)
    last = batch["attention_mask"].sum(dim=1) - 2  # (B,) the token before the final </s>
    return {**batch, "start_positions": last, "end_positions": last}


def _training_step(model, batch: dict) -> None:
    model(**batch).loss.backward()


def _measure_step(model, batch: dict, device: torch.device) -> tuple[int, float]:
    model.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        baseline = torch.cuda.memory_allocated(device)
        start = time.perf_counter()
        _training_step(model, batch)
        torch.cuda.synchronize(device)
        elapsed = time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated(device) - baseline
    else:
        tracker = LiveTensorPeak()
        start = time.perf_counter()
        with tracker:
            _training_step(model, batch)
        elapsed = time.perf_counter() - start
        peak = tracker.peak_bytes
    model.zero_grad(set_to_none=True)
    return peak, elapsed


def training_step_readout(model, batch: dict, *, warmup: bool = True) -> TrainingStepReadout:
    """Forward + backward of the QA loss on `batch`, without then with checkpointing: peak bytes and seconds.

    The model is left as it was (mode, checkpointing flag, no gradients kept). Weights are not counted: both
    peaks are the memory the step itself allocates, so their difference is what checkpointing saves.
    """
    device = next(model.parameters()).device
    batch = {key: value.to(device) for key, value in with_span_labels(batch).items()}
    was_training, was_checkpointing = model.training, is_checkpointing(model)
    model.train()
    try:
        if warmup:
            enable_checkpointing(model, False)
            _measure_step(model, batch, device)
        enable_checkpointing(model, False)
        peak_without, time_without = _measure_step(model, batch, device)
        enable_checkpointing(model, True)
        peak_with, time_with = _measure_step(model, batch, device)
    finally:
        enable_checkpointing(model, was_checkpointing)
        model.train(was_training)
    return TrainingStepReadout(
        peak_bytes_without=peak_without, peak_bytes_with=peak_with, time_s_without=time_without,
        time_s_with=time_with,
        measured_by="cuda max_memory_allocated" if device.type == "cuda" else "cpu live tensor bytes")
