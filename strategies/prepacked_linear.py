"""Prepacked Linear layers for CPU inference: every float `nn.Linear` of the model keeps its weight in oneDNN's
blocked layout, packed once at load time, and runs through oneDNN's fused linear (bias, the feed-forward's GELU and the
residual adds after the attention output and the feed-forward, inside the same kernel). Same arithmetic: the same
outputs bit for bit on the model's shapes in fp32, and in bf16 except that a fused GELU or residual add rounds a bf16
result once instead of twice.

Not a quantization (the dtype stays what precision chose) and not a compiler: `torch.compile` with freezing packs
weights the same way but costs tens of seconds per shape (README, "The compute floor").
"""

from __future__ import annotations

import contextlib
import types

import torch
from torch import nn

from strategies.base import TRANSFORM, Strategy
from strategies.hardware import Hardware

PACKABLE_DTYPES = (torch.float32, torch.bfloat16)
# oneDNN's GELU post-op names: "none" is the exact (erf) GELU, "tanh" the approximation; other activations stay apart
GELU_ALGORITHMS = {"none": "none", "tanh": "tanh"}


def can_pack(linear: nn.Module) -> bool:
    """A plain float nn.Linear on CPU: not quantized, not a tensor subclass, not hooked by accelerate."""
    return (type(linear) is nn.Linear and type(linear.weight) is nn.Parameter
            and linear.weight.device.type == "cpu" and linear.weight.dtype in PACKABLE_DTYPES
            and not hasattr(linear, "_hf_hook"))


class PackedLinear(nn.Module):
    """`nn.Linear`'s inference forward over a weight packed for oneDNN, with an optional fused GELU.

    The packed weight and the bias are buffers (counted in the weight readout, moved by nothing: the layer is
    CPU-only); `weight` unpacks a plain copy, and the state dict holds plain `weight` and `bias` as the nn.Linear
    did. Inference only: oneDNN's fused linear has no backward (`unpacked` gives plain layers for a training step).
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, activation: str = "none",
                 gelu_algorithm: str = "none", unfused_activation: nn.Module | None = None):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.activation = activation  # "none" | "gelu"
        self.gelu_algorithm = gelu_algorithm
        self.__dict__["_unfused_activation"] = unfused_activation  # the GELU it replaced; kept off the children
        with torch.no_grad():
            self.register_buffer("packed_weight", torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None))
            self.register_buffer("bias", None if bias is None else bias.detach().clone())

    @classmethod
    def from_linear(cls, linear: nn.Linear, activation: str = "none", gelu_algorithm: str = "none",
                    unfused_activation: nn.Module | None = None):
        return cls(linear.weight, linear.bias, activation, gelu_algorithm, unfused_activation)

    def to_linear(self) -> nn.Linear:
        """A plain nn.Linear with this layer's weight and bias (fresh Parameters)."""
        return plain_linear(self.weight, self.bias)

    @property
    def weight(self) -> torch.Tensor:
        """A plain copy of the weight (out, in), for reading (writing to it changes nothing the layer computes)."""
        return self.packed_weight.to_dense()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() and (x.requires_grad or self.training):
            raise RuntimeError("prepacked_linear is for inference: oneDNN's fused linear has no backward. "
                               "Train inside the strategy's training_context (which unpacks the layers).")
        if self.activation == "gelu":
            return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, "gelu", [],
                                                      self.gelu_algorithm)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, "none", [], "")

    def add_to(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """`self(x) + residual` in one oneDNN call (the add in the kernel's epilogue, one rounding in bf16)."""
        if torch.is_grad_enabled() and (x.requires_grad or residual.requires_grad or self.training):
            raise RuntimeError("prepacked_linear is for inference: oneDNN's fused linear has no backward.")
        return torch.ops.mkldnn._linear_pointwise.binary(x, residual, self.packed_weight, self.bias, "add")

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        destination[prefix + "weight"] = self.weight
        if self.bias is not None:
            destination[prefix + "bias"] = self.bias

    def extra_repr(self) -> str:
        fused = f", fused {self.activation}" if self.activation != "none" else ""
        return f"in_features={self.in_features}, out_features={self.out_features}{fused}"


def _gelu_algorithm(activation: nn.Module) -> str | None:
    """oneDNN's algorithm for a transformers GELU activation module, or None when it is something else."""
    if type(activation).__name__ == "GELUActivation" and getattr(activation, "act", None) is nn.functional.gelu:
        return "none"  # transformers' "gelu": torch's exact (erf) GELU
    if isinstance(activation, nn.GELU):
        return GELU_ALGORITHMS.get(activation.approximate)
    return None


def pack_feed_forward(model: nn.Module) -> int:
    """Fuse each `LongformerIntermediate`'s dense layer with its GELU; returns how many were fused."""
    fused = 0
    for module in model.modules():
        if type(module).__name__ != "LongformerIntermediate" or not can_pack(module.dense):
            continue
        algorithm = _gelu_algorithm(module.intermediate_act_fn)
        if algorithm is None:
            continue
        module.dense = PackedLinear.from_linear(module.dense, "gelu", algorithm,
                                                unfused_activation=module.intermediate_act_fn)
        module.intermediate_act_fn = nn.Identity()
        fused += 1
    return fused


RESIDUAL_OUTPUTS = ("LongformerSelfOutput", "LongformerOutput")  # LayerNorm(dropout(dense(h)) + input)


def residual_output_forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
    """A Longformer output block's forward with the residual add inside the packed dense layer's kernel; the
    class's own forward where the layer is not packed (unpacked for training) or dropout is active."""
    if isinstance(self.dense, PackedLinear) and not self.training:
        return self.LayerNorm(self.dense.add_to(hidden_states, input_tensor))
    return type(self).forward(self, hidden_states, input_tensor)


def fuse_residual_adds(model: nn.Module) -> int:
    """Give each Longformer output block (attention output, feed-forward out) the fused residual add; returns how
    many. The block keeps its class, children and state dict: only its instance's forward is set."""
    fused = 0
    for module in model.modules():
        if type(module).__name__ in RESIDUAL_OUTPUTS and "forward" not in vars(module):
            module.forward = types.MethodType(residual_output_forward, module)
            fused += 1
    return fused


def pack_linears(model: nn.Module) -> int:
    """Swap every packable nn.Linear under `model` for a PackedLinear, in place; returns how many. The fast
    attention's five token projections are packed as its one fused projection (its own `pack_projections`)."""
    packed = 0
    for module in list(model.modules()):
        pack_projections = getattr(module, "pack_projections", None)
        if pack_projections is not None and pack_projections(PackedLinear, can_pack):
            packed += 5
    packed += pack_feed_forward(model)
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if can_pack(child):
                setattr(module, name, PackedLinear.from_linear(child))
                packed += 1
    fuse_residual_adds(model)
    return packed


def plain_linear(weight: torch.Tensor, bias: torch.Tensor | None) -> nn.Linear:
    """An nn.Linear holding `weight` (out, in) and `bias` themselves as Parameters (no copy, no random init)."""
    linear = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device="meta")
    linear.weight = nn.Parameter(weight.detach())
    if bias is not None:
        linear.bias = nn.Parameter(bias.detach())
    return linear


def unpack_linears(model: nn.Module) -> int:
    """`pack_linears` undone, in place: plain nn.Linear layers with Parameters again (the fast attention's five
    projections split back out, the feed-forward's GELU apart again); returns how many layers were unpacked."""
    unpacked = 0
    for module in list(model.modules()):
        fused = getattr(module, "fused_projection", None)
        if isinstance(fused, PackedLinear):
            weights = fused.weight.split(module.embed_dim)  # 5 × (D, D)
            biases = fused.bias.split(module.embed_dim)
            (module.query, module.key, module.value, module.key_global, module.value_global) = (
                plain_linear(weight, bias) for weight, bias in zip(weights, biases))
            module.fused_projection = None
            unpacked += 5
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, PackedLinear):
                setattr(module, name, child.to_linear())
                if child._unfused_activation is not None:
                    module.intermediate_act_fn = child._unfused_activation
                unpacked += 1
    return unpacked


@contextlib.contextmanager
def unpacked(model: nn.Module):
    """The model with plain Linear layers inside the block (for a training step), packed again after it. The weights
    are held once throughout: the packed copies are dropped while the plain ones exist, and the other way round."""
    with torch.no_grad():
        count = unpack_linears(model)
    try:
        yield model
    finally:
        if count:
            with torch.no_grad():
                pack_linears(model)


class PrepackedLinear(Strategy):
    """Pack every float Linear weight once for oneDNN and run the fused linear (bias and GELU in the kernel).

    Saves: time: the Linear layers are most of a window's arithmetic, and eager `F.linear` re-lays the weight
        out and adds the bias in a separate pass on every call, the residual adds and the GELU in passes of their
        own (measured in docs/results/cpu-floor).
    Costs: packing at load time (well under a second for Longformer-base); no backward: a training step unpacks
        the layers for its duration and packs them again after; the layers run on CPU only. Memory unchanged: the
        packed weight replaces the plain one.
    Requires: CPU execution with a torch built with oneDNN (mkldnn); fp32 or bf16 weights (int8 dynamic layers are
        packed by their own backend and left alone).
    """

    name = "prepacked_linear"
    description = "Pack Linear weights once for oneDNN and fuse bias and GELU into the matmul (CPU inference)."
    phase = TRANSFORM
    conflicts_with = ("autocast", "offload", "model_split", "replicas", "gradient_checkpointing", "bnb_8bit",
                      "bnb_4bit")

    def unavailable_reason(self, hardware: Hardware) -> str | None:
        if self.on_cuda:
            return "prepacked oneDNN Linear layers run on CPU only"
        if not torch.backends.mkldnn.is_available():
            return "this torch build has no oneDNN (mkldnn)"
        return None

    def transform(self, model):
        with torch.no_grad():
            pack_linears(model)
        return model

    def training_context(self, model):
        return unpacked(model)
