"""bitsandbytes quantization at load time: LLM.int8 (`bnb_8bit`) and NF4 (`bnb_4bit`) via `BitsAndBytesConfig`.
`qa_outputs` (2 outputs) is never quantized: 4-bit kernels need outputs divisible by their block size.
"""

from __future__ import annotations

import abc
import importlib.util
from pathlib import Path

import torch
from transformers import BitsAndBytesConfig

from strategies.base import PRECISION, Strategy
from strategies.hardware import Hardware

SKIP_MODULES = ["qa_outputs"]


def bitsandbytes_missing_reason(hardware: Hardware, on_cuda: bool) -> str | None:
    """Why bitsandbytes cannot quantize here, or None. Its files are looked at, not imported: the page's pickers ask
    on every build, and importing bitsandbytes (which imports torch's compiler for its default kernels) took 1.8 s of
    each `python app.py` start on a 2-core AMD (AVX2 only). A build without CPU kernels lacks `backends/cpu` or the
    native CPU library; one that has them but fails to load them says why when the strategy loads."""
    spec = importlib.util.find_spec("bitsandbytes")
    if spec is None or spec.origin is None:
        return "bitsandbytes is not installed"
    if not on_cuda:
        package = Path(spec.origin).parent
        if not (package / "backends" / "cpu").is_dir() or not any(package.glob("libbitsandbytes_cpu.*")):
            return "bitsandbytes has no CPU kernels here (its build has no CPU backend)"
    return None


class BitsAndBytesQuantization(Strategy, abc.ABC):
    """The outline both bitsandbytes strategies share: available where bitsandbytes' kernels are, and a
    `BitsAndBytesConfig` (with `qa_outputs` left float) added to the load keyword arguments. A subclass says
    which quantization in `quantization_options`."""

    phase = PRECISION

    def unavailable_reason(self, hardware: Hardware) -> str | None:
        return bitsandbytes_missing_reason(hardware, self.on_cuda)

    @abc.abstractmethod
    def quantization_options(self, kwargs: dict) -> dict:
        """`BitsAndBytesConfig` keyword arguments for this quantization, given the load arguments so far."""

    def adjust_load_kwargs(self, kwargs: dict) -> dict:
        config = BitsAndBytesConfig(**self.quantization_options(kwargs), llm_int8_skip_modules=list(SKIP_MODULES))
        return {**kwargs, "quantization_config": config}


class Bnb8bit(BitsAndBytesQuantization):
    """LLM.int8: int8 weights, outlier features computed in 16 bits.

    Saves: about 3/4 of the weight memory compared with fp32 (half compared with fp16).
    Costs: slower matmuls than fp16 on GPU (mixed int8/fp16 decomposition); small accuracy loss.
    Requires: bitsandbytes; a CUDA GPU, or its CPU kernels (bitsandbytes 0.50+).
    """

    name = "bnb_8bit"
    description = "Quantize Linear weights to int8 at load time with bitsandbytes (LLM.int8), qa_outputs kept."
    conflicts_with = ("bnb_4bit", "int8_dynamic", "replicas")

    def quantization_options(self, kwargs: dict) -> dict:
        return {"load_in_8bit": True}


class Bnb4bit(BitsAndBytesQuantization):
    """NF4: 4-bit normal-float weights, dequantized block by block to the compute dtype.

    Saves: about 7/8 of the weight memory compared with fp32.
    Costs: more accuracy loss than 8-bit; dequantization work on every matmul.
    Requires: bitsandbytes; a CUDA GPU, or its CPU kernels (bitsandbytes 0.50+).
    """

    name = "bnb_4bit"
    description = "Quantize Linear weights to 4-bit NF4 at load time with bitsandbytes, qa_outputs kept."
    conflicts_with = ("bnb_8bit", "int8_dynamic", "replicas")

    def compute_dtype(self, kwargs: dict) -> torch.dtype:
        dtype = kwargs.get("dtype", torch.float32)
        if dtype in (torch.float16, torch.bfloat16):
            return dtype
        return torch.float16 if self.on_cuda else torch.bfloat16 if self.hardware.cpu_bf16 else torch.float32

    def quantization_options(self, kwargs: dict) -> dict:
        return {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
                "bnb_4bit_compute_dtype": self.compute_dtype(kwargs)}
