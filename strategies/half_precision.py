"""Half precision: load the weights directly as fp16 (CUDA) or bf16 (bf16-capable GPUs and CPUs) via `dtype=`.

Changes only the load dtype; it does not touch activations' dtype beyond what half weights imply.
"""

from __future__ import annotations

import torch

from strategies.base import PRECISION, Strategy
from strategies.hardware import Hardware

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


class SixteenBitStrategy(Strategy):
    """Shared by the strategies that pick a 16-bit dtype: fp16 on CUDA, bf16 elsewhere, unless one is asked for."""

    def __init__(self, hardware: Hardware | None = None, device: str = "cpu", *, dtype: str | None = None):
        super().__init__(hardware, device)
        if dtype is not None and dtype not in DTYPES:
            raise ValueError(f"{self.name} dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
        self.requested = dtype

    @property
    def dtype(self) -> torch.dtype:
        if self.requested is not None:
            return DTYPES[self.requested]
        return torch.float16 if self.on_cuda else torch.bfloat16


class HalfPrecision(SixteenBitStrategy):
    """Weights and activations in 16 bits.

    Saves: half the weight memory (0.87 GB instead of 1.73 GB for Longformer-large) and roughly half the
        activation memory; faster matmuls on tensor cores and on CPUs with bf16 instructions.
    Costs: about 3 significant digits; answers almost always identical, logits differ in the 2nd-3rd decimal.
    Requires: a CUDA GPU (fp16; bf16 on Ampere or later) or a CPU with native bf16 (AVX512-BF16 / AMX).
    """

    name = "half_precision"
    description = "Load the weights as fp16 (CUDA) or bf16 (bf16-capable GPUs/CPUs)."
    phase = PRECISION
    conflicts_with = ("autocast", "int8_dynamic")

    def unavailable_reason(self, hardware: Hardware) -> str | None:
        if self.on_cuda:
            if self.dtype == torch.bfloat16 and not all(gpu.supports_bf16 for gpu in hardware.usable_gpus):
                return "bf16 needs an Ampere-or-later GPU (compute capability 8.0+)"
            return None
        if self.dtype == torch.float16:
            return "fp16 on CPU is emulated and slower than fp32; use bf16 or int8_dynamic"
        if not hardware.cpu_bf16:
            return "this CPU has no native bf16 (AVX512-BF16 or AMX); bf16 would be emulated and slow"
        return None

    def adjust_load_kwargs(self, kwargs: dict) -> dict:
        return {**kwargs, "dtype": self.dtype}
