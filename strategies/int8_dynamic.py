"""Int8 dynamic quantization of the encoder's Linear layers for CPU inference, with
`torch.ao.quantization.quantize_dynamic` (its deprecation warnings silenced locally). `qa_outputs` stays float.

torchao's `quantize_`, which torch's warning recommends, was slower here and noisier to import: the measurement
side by side is in docs/int8-torchao-vs-torch-ao.md.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from strategies.base import TRANSFORM, Strategy
from strategies.hardware import Hardware


class Int8Dynamic(Strategy):
    """Store Linear weights as int8; quantize activations on the fly per batch.

    Saves: about 3/4 of the Linear weight memory (most of the model) compared with fp32; int8 matmuls where
        the CPU has VNNI. Activations stay fp32 between the layers, so the peak falls far less than the
        weights do (measured in docs/results/bench-cpu).
    Costs: accuracy of int8 activations (the top answer can change); quantization at load time; on CPUs with
        native bf16, bf16 is faster and smaller (docs/results/bench-cpu).
    Requires: CPU execution (the quantized kernels are CPU-only); fp32 weights to start from.
    """

    name = "int8_dynamic"
    description = "Quantize the encoder's Linear layers to int8 with dynamic activation scales (CPU)."
    phase = TRANSFORM
    conflicts_with = ("half_precision", "autocast", "bnb_8bit", "bnb_4bit", "model_split", "offload", "replicas")

    def unavailable_reason(self, hardware: Hardware) -> str | None:
        if self.on_cuda:
            return "int8 dynamic quantization runs on CPU only"
        if "fbgemm" not in torch.backends.quantized.supported_engines and \
                "x86" not in torch.backends.quantized.supported_engines:
            return "this torch build has no x86 quantized kernels (fbgemm)"
        return None

    def transform(self, model):
        with torch.no_grad():
            for linear in model.longformer.modules():  # the quantized layers keep their float bias tensors
                if isinstance(linear, nn.Linear) and linear.bias is not None:
                    linear.bias.data = linear.bias.data.clone()
            quantize_linears(model.longformer)
            copy_off_the_mapped_file(model)
        return model


def copy_off_the_mapped_file(model: nn.Module) -> None:
    """Give the remaining float parameters and buffers private memory, so no tensor views the memory-mapped
    checkpoint any more and the mapping is released. Otherwise every page of the fp32 file that quantization
    read stays resident."""
    for parameter in model.parameters():
        parameter.data = parameter.data.clone()
    for module in model.modules():
        for key, buffer in module._buffers.items():
            if buffer is not None:
                module._buffers[key] = buffer.clone()


def quantize_linears(module: nn.Module) -> None:
    """Swap every nn.Linear under `module` for torch.ao's dynamic-quantized Linear, in place."""
    with warnings.catch_warnings():
        # torch.ao.quantization announces its removal in favour of torchao (see the module docstring)
        warnings.filterwarnings("ignore", message=r".*torch\.ao\.quantization is deprecated.*")
        warnings.filterwarnings("ignore", message=r".*quantize_per_tensor.*")
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.jit.*")
        torch.ao.quantization.quantize_dynamic(module, {nn.Linear}, dtype=torch.qint8, inplace=True)
