"""Layer split across GPUs: accelerate plans a balanced device map and `from_pretrained` places each layer.

For models larger than one GPU but smaller than all of them together; spilling to CPU or disk is `offload`.
"""

from __future__ import annotations

from longqa_core.errors import ProfileError
from strategies.base import PLACEMENT, Strategy
from strategies.device_map import devices_in, gpu_budgets, plan_device_map, weight_dtype
from strategies.hardware import Hardware


class ModelSplit(Strategy):
    """Split the layers of one model across every GPU (pipeline style, one GPU busy at a time).

    Saves: per-GPU weight memory: each GPU holds about 1/N of the layers.
    Costs: no speed-up (layers run one after another) plus a hidden-state copy between GPUs at each boundary.
    Requires: two or more CUDA GPUs; the whole model must fit in their combined memory (else use offload).
    """

    name = "model_split"
    description = "Split the layers across all GPUs with an accelerate device map (balanced)."
    phase = PLACEMENT
    conflicts_with = ("replicas", "offload", "int8_dynamic")

    def __init__(self, hardware: Hardware | None = None, device: str = "cuda", *, max_memory: dict | None = None):
        super().__init__(hardware, device)
        self.max_memory = max_memory

    def unavailable_reason(self, hardware: Hardware) -> str | None:
        if hardware.gpu_count < 2:
            return f"needs 2+ CUDA GPUs, found {hardware.gpu_count}"
        return None

    def adjust_load_kwargs(self, kwargs: dict) -> dict:
        max_memory = self.max_memory or gpu_budgets(self.hardware)
        skip = tuple(getattr(kwargs.get("quantization_config"), "llm_int8_skip_modules", None) or ())
        device_map = plan_device_map(kwargs["config"], max_memory, dtype=weight_dtype(kwargs), balanced=True,
                                     skip_modules=skip)
        spilled = devices_in(device_map) & {"cpu", "disk"}
        if spilled:
            raise ProfileError(f"The model does not fit in the GPUs' memory ({', '.join(sorted(spilled))} "
                               "needed): choose a profile with offload or quantization (consumer-gpu).")
        return {**kwargs, "device_map": device_map}
