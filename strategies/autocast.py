"""Autocast mixed precision: fp32 weights, 16-bit compute inside `torch.autocast` for every forward pass.

Changes the runtime context only; the weights stay fp32 (unlike `half_precision`).
"""

from __future__ import annotations

import contextlib

import torch

from strategies.base import PRECISION
from strategies.half_precision import SixteenBitStrategy
from strategies.hardware import Hardware


class Autocast(SixteenBitStrategy):
    """Matmuls in fp16/bf16, weights kept in fp32.

    Saves: activation memory (matmul outputs are 16-bit) and matmul time; weight memory is NOT reduced
        (fp32 weights, plus transient 16-bit copies of each weight while it is used).
    Costs: a cast of every weight on every forward; accuracy close to fp32 (reductions and softmax stay fp32).
    Requires: a CUDA GPU, or a CPU with native bf16 (AVX512-BF16 / AMX).
    """

    name = "autocast"
    description = "Keep fp32 weights; run matmuls in fp16/bf16 under torch.autocast."
    phase = PRECISION  # it pins the load dtype to fp32
    conflicts_with = ("half_precision", "int8_dynamic")

    def unavailable_reason(self, hardware: Hardware) -> str | None:
        if self.on_cuda:
            if self.dtype == torch.bfloat16 and not all(gpu.supports_bf16 for gpu in hardware.usable_gpus):
                return "bf16 autocast needs an Ampere-or-later GPU (compute capability 8.0+)"
            return None
        if self.dtype != torch.bfloat16:
            return "CPU autocast is only worthwhile in bf16"
        if not hardware.cpu_bf16:
            return "this CPU has no native bf16 (AVX512-BF16 or AMX); autocast would be slower than fp32"
        return None

    def adjust_load_kwargs(self, kwargs: dict) -> dict:
        return {**kwargs, "dtype": torch.float32}

    def runtime_context(self) -> contextlib.AbstractContextManager:
        return torch.autocast(device_type="cuda" if self.on_cuda else "cpu", dtype=self.dtype)
