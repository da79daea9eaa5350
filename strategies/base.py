"""The `Strategy` base class: one memory/speed technique as no-op hooks (availability, load kwargs, model
transform, runtime context, engine settings, runner) that subclasses override, the one function that turns a
stack of strategies into `from_pretrained` keyword arguments, and the stack's runtime contexts around a batch
(`runtime_contexts`, decided once at load).
It never loads a model (the loader does), never prints, and holds no global state.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
from pathlib import Path
from typing import Callable, ClassVar

import torch

from longqa_core.limits import EngineSettings
from strategies.hardware import CPU_ONLY, Hardware

# A strategy's phase fixes the order in which strategies compose: what a later phase reads, an earlier phase has
# already set (a device map is planned from the dtype and quantization that precision strategies chose).
PRECISION = 0  # dtype / quantization_config keyword arguments
PLACEMENT = 1  # device_map, max_memory, offload, checkpoint format
TRANSFORM = 2  # module swaps on the loaded model
RUNTIME = 3  # contexts, settings and runners used while answering

PHASE_NAMES = {PRECISION: "precision", PLACEMENT: "placement", TRANSFORM: "transform", RUNTIME: "runtime"}


class Strategy:
    """Base class; every hook is a no-op.

    Saves: nothing.
    Costs: nothing.
    Requires: nothing.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    phase: ClassVar[int] = TRANSFORM
    conflicts_with: ClassVar[tuple[str, ...]] = ()

    def __init__(self, hardware: Hardware | None = None, device: str = "cpu"):
        self.hardware = hardware or CPU_ONLY
        self.device = device  # "cuda" or "cpu": where the profile puts the model

    @property
    def on_cuda(self) -> bool:
        return self.device == "cuda"

    def unavailable_reason(self, hardware: Hardware) -> str | None:
        """Why this strategy cannot run on `hardware`, or None when it can."""
        return None

    def prepare_checkpoint(self, folder: Path) -> Path:
        """The folder to load weights from (a strategy may convert the checkpoint first)."""
        return folder

    def adjust_load_kwargs(self, kwargs: dict) -> dict:
        """New `from_pretrained` keyword arguments; `kwargs["config"]` and `kwargs["dtype"]` are always present."""
        return dict(kwargs)

    def transform(self, model):
        """The model after this strategy's change (may be the same object, changed in place)."""
        return model

    def runtime_context(self) -> contextlib.AbstractContextManager:
        """A context every forward pass runs inside (entered fresh for each batch)."""
        return contextlib.nullcontext()

    def training_context(self, model) -> contextlib.AbstractContextManager:
        """A context a training step on the transformed model runs inside (an inference-only change undone for the
        step and redone after)."""
        return contextlib.nullcontext()

    def load_notes(self) -> tuple[str, ...]:
        """What this strategy chose while transforming the model that a reader of the load readout should know (a
        kernel it could or could not use, and why); asked after `transform`."""
        return ()

    def adjust_settings(self, settings: "EngineSettings") -> "EngineSettings":
        return settings

    def make_runner(self, model, context_factory: Callable[[], contextlib.AbstractContextManager]):
        """A runner replacing the engine's default `ModelRunner`, or None to keep it."""
        return None


def from_pretrained_kwargs(config, strategies: list[Strategy], device: str, *, use_safetensors: bool = False) -> dict:
    """The `from_pretrained` keyword arguments for `strategies` placing the model on `device` ("cuda" or "cpu"):
    fp32 (on one GPU for "cuda"), then each strategy's changes in profile order. The loader loads with them and
    the memory planner predicts from them, so a prediction describes the load that happens. `use_safetensors`:
    the checkpoint folder holds safetensors (the planner has no folder; the choice changes no memory)."""
    kwargs: dict = {"config": config, "dtype": torch.float32}
    if use_safetensors:
        kwargs["use_safetensors"] = True
    if device == "cuda":
        kwargs["device_map"] = {"": 0}
    for strategy in strategies:
        kwargs = strategy.adjust_load_kwargs(kwargs)
    if "torch_dtype" in kwargs:  # deprecated spelling: a strategy must use dtype=
        kwargs["dtype"] = kwargs.pop("torch_dtype")
    kwargs["trust_remote_code"] = False  # never run code shipped with a checkpoint, whatever a strategy said
    return kwargs


def strategy_card(cls: type[Strategy]) -> dict[str, str]:
    """name, description, phase, saves, costs, requires: read from the class and its docstring."""
    doc = cls.__doc__ or ""
    card = {"name": cls.name, "description": cls.description, "phase": PHASE_NAMES[cls.phase]}
    for field in ("Saves", "Costs", "Requires"):
        match = re.search(rf"^\s*{field}:\s*(.+?)(?=^\s*(?:Saves|Costs|Requires):|\Z)", doc, re.S | re.M)
        card[field.lower()] = " ".join(match.group(1).split()) if match else ""
    return card


def replace_settings(settings, **changes):
    """`dataclasses.replace` for EngineSettings (kept here so strategies need not import the engine)."""
    return dataclasses.replace(settings, **changes)


def stacked_contexts(strategies: tuple[Strategy, ...]) -> contextlib.ExitStack:
    """All strategies' runtime contexts entered in profile order (a fresh stack per batch)."""
    stack = contextlib.ExitStack()
    for strategy in strategies:
        stack.enter_context(strategy.runtime_context())
    return stack


def runtime_contexts(strategies: tuple[Strategy, ...]) -> Callable[[], contextlib.AbstractContextManager]:
    """What makes a batch's context, decided once at load: the runtime contexts of the strategies that have one,
    stacked in profile order (`stacked_contexts`) where several do, the one strategy's own where one does, and
    nothing (`contextlib.nullcontext`) where none does, as on most CPU profiles."""
    own = tuple(strategy for strategy in strategies
                if type(strategy).runtime_context is not Strategy.runtime_context)
    if not own:
        return contextlib.nullcontext
    if len(own) == 1:
        return own[0].runtime_context
    return functools.partial(stacked_contexts, own)
