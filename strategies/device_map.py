"""Device-map planning for split and offloaded models: accelerate's planner on a meta-device copy of the model.
Plans only (no weights touched), so it runs and is tested without GPUs; `from_pretrained` does the placing.
"""

from __future__ import annotations

import logging

import torch
from accelerate import init_empty_weights
from accelerate.utils import CustomDtype, get_balanced_memory, infer_auto_device_map
from transformers import LongformerForQuestionAnswering

NO_SPLIT = ["LongformerSelfAttention"]  # its local and global projections must sit on one device
GPU_HEADROOM = 0.80  # share of each GPU for weights; the rest is for activations of 4,096-token windows




class _PlannedGpusFilter(logging.Filter):
    """Drops accelerate's "Device 0 is not available" warning: planning for GPUs this machine lacks (a machine
    planned for, tests' simulated GPUs) is this module's job, not a mistake."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "is not available, available devices are" not in record.getMessage()


logging.getLogger("accelerate.utils.modeling").addFilter(_PlannedGpusFilter())


def empty_model(config):
    """A LongformerForQuestionAnswering with every tensor on the meta device (no memory)."""
    with init_empty_weights():
        return LongformerForQuestionAnswering(config)


_EMPTY_MODELS: dict[str, torch.nn.Module] = {}  # config JSON -> its meta-device model (no memory; 0.2 s to build)


def shared_empty_model(config):
    """`empty_model(config)`, built once per distinct config: a plan reads the model's structure, never changes
    it, and planning every profile for a machine builds the same one several times."""
    key = config.to_json_string()
    if key not in _EMPTY_MODELS:
        if len(_EMPTY_MODELS) >= 8:
            _EMPTY_MODELS.pop(next(iter(_EMPTY_MODELS)))
        _EMPTY_MODELS[key] = empty_model(config)
    return _EMPTY_MODELS[key]


def weight_dtype(kwargs: dict):
    """What the planner should count per weight: the load dtype, or the quantized size under bitsandbytes."""
    quantization = kwargs.get("quantization_config")
    if getattr(quantization, "load_in_4bit", False):
        return CustomDtype.INT4
    if getattr(quantization, "load_in_8bit", False):
        return torch.int8
    return kwargs["dtype"]


def plan_device_map(config, max_memory: dict, *, dtype, balanced: bool = False,
                    skip_modules: tuple[str, ...] = ()) -> dict[str, int | str]:
    """{module name: device} for `config`'s QA model under `max_memory` (GPU indices, "cpu"; "disk" beyond).

    `balanced` spreads layers evenly over the GPUs (a split) instead of filling GPU 0 first (an offload);
    `skip_modules` stay in the load dtype (bitsandbytes leaves `qa_outputs` unquantized).
    """
    model = shared_empty_model(config)
    special = {name: torch.float32 for name, _ in model.named_parameters()
               if any(name.startswith(module) for module in skip_modules)} or None
    if balanced:
        max_memory = get_balanced_memory(model, max_memory=max_memory, no_split_module_classes=NO_SPLIT,
                                         dtype=dtype, special_dtypes=special)
    return dict(infer_auto_device_map(model, max_memory=max_memory, no_split_module_classes=NO_SPLIT,
                                      dtype=dtype, special_dtypes=special))


def gpu_budgets(hardware, fraction: float = GPU_HEADROOM) -> dict[int, int]:
    """Bytes each usable GPU may hold in weights."""
    return {gpu.index: int(gpu.total_bytes * fraction) for gpu in hardware.usable_gpus}


def devices_in(device_map: dict | None) -> set:
    return set(device_map.values()) if device_map else set()


def device_name(device) -> str:
    """One spelling per device: 0 and "cuda" -> "cuda:0"; "cpu", "disk", "cuda:1" unchanged."""
    if isinstance(device, int):
        return f"cuda:{device}"
    device = str(device)
    return "cuda:0" if device == "cuda" else device


def mapped_device(name: str, device_map: dict | None) -> str | None:
    """The device `device_map` assigns to parameter or module `name` (longest matching module prefix)."""
    if not device_map:
        return None
    best = None
    for module, device in device_map.items():
        if module == "" or name == module or name.startswith(module + "."):
            if best is None or len(module) > len(best[0]):
                best = (module, device)
    return device_name(best[1]) if best else None
