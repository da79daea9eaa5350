"""Every strategy by name, and how to build one for a machine: the single list profiles and the UI draw from.

Lookup only; which strategies make up a profile is `profiles`' job.
"""

from __future__ import annotations

from longqa_core.errors import ProfileError
from strategies.autocast import Autocast
from strategies.base import Strategy, strategy_card
from strategies.bitsandbytes_quantization import Bnb4bit, Bnb8bit
from strategies.dynamic_batching import DynamicBatching
from strategies.fast_attention import FastAttention
from strategies.gradient_checkpointing import GradientCheckpointing
from strategies.half_precision import HalfPrecision
from strategies.prepacked_linear import PrepackedLinear
from strategies.hardware import Hardware
from strategies.int8_dynamic import Int8Dynamic
from strategies.mmap_loading import MmapLoading
from strategies.model_split import ModelSplit
from strategies.offload import Offload
from strategies.replicas import Replicas

STRATEGIES: dict[str, type[Strategy]] = {  # in canonical order: a custom selection is sorted by this
    cls.name: cls for cls in (
        HalfPrecision, Autocast, Bnb8bit, Bnb4bit,  # precision: what the weights are loaded as
        MmapLoading, ModelSplit, Offload,  # placement: where the weights go
        FastAttention, Int8Dynamic, PrepackedLinear, GradientCheckpointing,  # transforms of the loaded model
        DynamicBatching, Replicas,  # runtime: how batches run
    )
}


def strategy_class(name: str) -> type[Strategy]:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ProfileError(f"Unknown strategy {name!r}; known: {', '.join(STRATEGIES)}.") from None


def make_strategy(name: str, hardware: Hardware, device: str, options: dict | None = None) -> Strategy:
    """An instance of strategy `name` for `hardware`, placing the model on `device` ("cuda" or "cpu")."""
    cls = strategy_class(name)
    try:
        return cls(hardware, device, **(options or {}))
    except (TypeError, ValueError) as exc:
        raise ProfileError(f"Bad options for strategy {name!r}: {exc}") from None


def strategy_cards() -> list[dict[str, str]]:
    """name, description, phase, saves, costs, requires for every strategy (for the UI and docs)."""
    return [strategy_card(cls) for cls in STRATEGIES.values()]
