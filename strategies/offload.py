"""CPU and disk offload: fill the GPU first, spill the remaining layers to host RAM, then disk (accelerate hooks).
Not an even split across GPUs (that is `model_split`).
"""

from __future__ import annotations

import copy
from pathlib import Path

import psutil

from longqa_core.cache import cache_dir
from strategies.base import PLACEMENT, Strategy
from strategies.device_map import devices_in, gpu_budgets, plan_device_map, weight_dtype
from strategies.hardware import Hardware

HOST_RAM_SHARE = 0.5  # of the RAM available at load time; the rest is for documents, activations, the UI


class Offload(Strategy):
    """Keep on the GPU what fits; offload the remaining layers to CPU RAM, then to disk.

    Saves: GPU memory: a model larger than the GPU still runs (weights beyond the budget never sit on the GPU).
    Costs: every offloaded layer is copied to the GPU on every forward (PCIe-bound: many times slower when a
        large part is offloaded; disk-offloaded layers are slower still).
    Requires: a CUDA GPU; free disk space in the offload folder for what does not fit in RAM.
    """

    name = "offload"
    description = "Fill the GPU first, offload the remaining layers to CPU RAM and then disk (accelerate)."
    phase = PLACEMENT
    conflicts_with = ("model_split", "replicas", "int8_dynamic")

    def __init__(self, hardware: Hardware | None = None, device: str = "cuda", *, max_memory: dict | None = None,
                 offload_folder: str | None = None):
        super().__init__(hardware, device)
        self.max_memory = max_memory
        self.offload_folder = Path(offload_folder) if offload_folder else cache_dir() / "offload"

    def unavailable_reason(self, hardware: Hardware) -> str | None:
        if hardware.gpu_count < 1:
            return "needs a CUDA GPU to offload from"
        return None

    def budgets(self) -> dict:
        if self.max_memory is not None:
            return dict(self.max_memory)
        host = self.hardware.host_memory_bytes  # a planned machine's RAM, else what is free on this one
        host = psutil.virtual_memory().available if host is None else host
        return {**gpu_budgets(self.hardware), "cpu": int(host * HOST_RAM_SHARE)}

    def adjust_load_kwargs(self, kwargs: dict) -> dict:
        quantization = kwargs.get("quantization_config")
        skip = tuple(getattr(quantization, "llm_int8_skip_modules", None) or ())
        device_map = plan_device_map(kwargs["config"], self.budgets(), dtype=weight_dtype(kwargs), skip_modules=skip)
        new = {**kwargs, "device_map": device_map}
        if "disk" in devices_in(device_map):
            self.offload_folder.mkdir(parents=True, exist_ok=True)
            new["offload_folder"] = str(self.offload_folder)
        if quantization is not None and devices_in(device_map) & {"cpu", "disk"}:
            # bitsandbytes refuses GPU+CPU maps unless the offloaded modules stay unquantized fp32
            new["quantization_config"] = copy_quantization(quantization, llm_int8_enable_fp32_cpu_offload=True)
        return new


def copy_quantization(config, **changes):
    """A copy of a BitsAndBytesConfig with some fields changed (the config is mutable; never edit the input)."""
    new = copy.deepcopy(config)
    for key, value in changes.items():
        setattr(new, key, value)
    return new
