"""Fast sliding-window attention: Longformer's local+global attention on PyTorch's fused SDPA kernel.

Computes exactly what transformers' eager `LongformerSelfAttention` computes, with the same weights, but as
masked `scaled_dot_product_attention` over blocks of queries instead of chunked diagonal bookkeeping. It is a
drop-in module swap, not a new model.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from strategies.base import TRANSFORM, Strategy


class SlidingWindowSelfAttention(nn.Module):
    """Replaces one `LongformerSelfAttention`, sharing its projection layers (so state dicts are unchanged).

    Local rows: each token attends to non-global tokens within ±w and to every global token (local projections).
    Global rows: attend to every non-padding token with the `*_global` projections. Padding rows output zeros.
    Queries go in blocks of w: a block sees its 3w-key band plus the global keys, so memory grows linearly
    with the length and the work is one fused SDPA call over (B*blocks, H, w, d) instead of chunk copies. The
    4-D layout matters: on CPU a 5-D (B, H, blocks, ...) call falls back to SDPA's math path, which was slower
    than eager. Blocks of w/2 or w/4 waste less of the band but made no measurable difference here.
    """

    def __init__(self, original: nn.Module):
        super().__init__()
        self.query, self.key, self.value = original.query, original.key, original.value
        self.query_global, self.key_global, self.value_global = (
            original.query_global, original.key_global, original.value_global)
        self.num_heads = original.num_heads
        self.head_dim = original.head_dim
        self.embed_dim = original.embed_dim
        self.one_sided_attn_window_size = original.one_sided_attn_window_size
        self.dropout = original.dropout
        self.layer_id = original.layer_id
        self.config = original.config

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, L, d)

    def _project(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """query, key, value, key_global, value_global of every token: (B, L, D) each.

        One matmul over the weights concatenated at call time (the state dict keeps the five layers) when all
        five are plain biased `nn.Linear`s with plain weights. Quantized layers (other modules, or weights that
        are tensor subclasses such as torchao's int8 tensors, which cannot be concatenated) and accelerate-hooked
        layers keep their own forward.
        """
        layers = (self.query, self.key, self.value, self.key_global, self.value_global)
        if all(type(layer) is nn.Linear and type(layer.weight) is nn.Parameter and layer.bias is not None
               and not hasattr(layer, "_hf_hook") for layer in layers):
            weight = torch.cat([layer.weight for layer in layers])  # (5D, D)
            bias = torch.cat([layer.bias for layer in layers])
            return F.linear(hidden_states, weight, bias).split(self.embed_dim, dim=-1)
        return tuple(layer(hidden_states) for layer in layers)

    def forward(self, hidden_states, attention_mask=None, is_index_masked=None, is_index_global_attn=None,
                is_global_attn=None, output_attentions=False):
        batch, length, _ = hidden_states.shape
        w = self.one_sided_attn_window_size
        heads, head_dim = self.num_heads, self.head_dim
        n_blocks = length // w  # the model pads the length to a multiple of the window (2w)
        span = 3 * w  # keys a block of w queries can reach
        is_pad = is_index_masked  # (B, L)
        is_global = is_index_global_attn  # (B, L)
        dropout = self.dropout if self.training else 0.0

        q, k, v, k_all, v_all = (x.view(batch, length, heads, head_dim)
                                 for x in self._project(hidden_states))  # (B, L, H, d) each

        # Global tokens first, in order; `n_global` slots (the most any row has), unused slots masked. The int()
        # is the one graph break: the slot count is a shape, and no static bound short of L keeps it cheap.
        n_global = max(int(is_global.sum(dim=1).max()), 1)
        order = torch.argsort((~is_global).to(torch.int8), dim=1, stable=True)[:, :n_global]  # (B, G)
        slot_used = torch.gather(is_global, 1, order)  # (B, G)
        row_index = order[:, :, None, None].expand(batch, n_global, heads, head_dim)  # (B, G, H, d)
        k_global = torch.gather(k, 1, row_index).transpose(1, 2)  # (B, H, G, d)
        v_global = torch.gather(v, 1, row_index).transpose(1, 2)

        # 4-D (B*nb, H, ...) so SDPA takes the fused flash kernel (5-D inputs fall back to the math path).
        q_blocks = q.view(batch, n_blocks, w, heads, head_dim).transpose(2, 3).reshape(
            batch * n_blocks, heads, w, head_dim)  # (B*nb, H, w, d)

        def blocks_of(x, x_global):  # (B, L, H, d) -> (B*nb, H, G+3w, d): the global keys, then the band
            bands = F.pad(x, (0, 0, 0, 0, w, w)).unfold(1, span, w).transpose(-1, -2)  # (B, nb, H, 3w, d)
            expanded = x_global[:, None].expand(-1, n_blocks, -1, -1, -1)  # (B, nb, H, G, d)
            return torch.cat([expanded, bands], dim=3).view(batch * n_blocks, heads, n_global + span, head_dim)

        keys, values = blocks_of(k, k_global), blocks_of(v, v_global)

        offsets = (torch.arange(span, device=q.device)[None, :] - torch.arange(w, device=q.device)[:, None]
                   - w)  # (w, 3w): position of key j of the band minus that of query a of the block
        is_local_key = F.pad(~(is_pad | is_global), (w, w), value=False).unfold(1, span, w)  # (B, nb, 3w)
        band_ok = (offsets.abs() <= w)[None, None] & is_local_key[:, :, None, :]  # (B, nb, w, 3w)
        # A padding row may have no key at all; let it see itself so softmax stays finite (its output is zeroed).
        pad_rows = is_pad.view(batch, n_blocks, w)[..., None] & (offsets == 0)[None, None]  # (B, nb, w, 3w)
        global_ok = slot_used[:, None, None, :].expand(-1, n_blocks, w, -1)  # (B, nb, w, G)
        allowed = torch.cat([global_ok, band_ok | pad_rows], dim=-1)  # (B, nb, w, G+3w)
        # An additive mask in the query dtype: a boolean one costs a conversion per call inside SDPA.
        bias = torch.zeros(allowed.shape, dtype=q.dtype, device=q.device).masked_fill_(~allowed, float("-inf"))
        local_out = F.scaled_dot_product_attention(
            q_blocks, keys, values, attn_mask=bias.view(batch * n_blocks, 1, w, n_global + span),
            dropout_p=dropout)  # (B*nb, H, w, d)
        out = local_out.view(batch, n_blocks, heads, w, head_dim).transpose(2, 3).reshape(
            batch, length, self.embed_dim)  # (B, L, D)

        # Global rows: only the G global tokens ask, over every non-padding token, with the global projections.
        embed_index = order[:, :, None].expand(-1, -1, self.embed_dim)  # (B, G, D)
        hidden_global = torch.gather(hidden_states, 1, embed_index)  # (B, G, D)
        qg = self._heads(self.query_global(hidden_global))  # (B, H, G, d)
        kg, vg = k_all.transpose(1, 2), v_all.transpose(1, 2)  # (B, H, L, d)
        global_out = F.scaled_dot_product_attention(qg, kg, vg, attn_mask=(~is_pad)[:, None, None, :],
                                                    dropout_p=dropout)  # (B, H, G, d)
        global_out = global_out.transpose(1, 2).reshape(batch, n_global, self.embed_dim)  # (B, G, D)
        keep = torch.gather(out, 1, embed_index)  # unused slots point at local rows: write those back unchanged
        global_out = torch.where(slot_used[:, :, None], global_out.to(out.dtype), keep)
        out = out.scatter(1, embed_index, global_out)
        return (out.masked_fill(is_pad[:, :, None], 0.0),)


def swap_attention(model: nn.Module) -> nn.Module:
    """Swap every LongformerSelfAttention in `model` for the SDPA version, in place; returns the model."""
    for module in model.modules():
        attention = getattr(module, "self", None)
        if type(attention).__name__ == "LongformerSelfAttention":
            module.self = SlidingWindowSelfAttention(attention).train(attention.training)  # else dropout in eval
    return model


class FastAttention(Strategy):
    """Longformer's sliding-window + global attention on PyTorch's fused `scaled_dot_product_attention`.

    Saves: attention time and memory: the eager implementation spends most of its time copying and masking
        chunks; the gain grows with the length and the batch (measured in docs/bench-cpu). Same weights and
        state dict, same outputs (within 1e-4 of eager in fp32; bf16 within eager's own rounding).
    Costs: keys are computed in bands of 3w for blocks of w queries, so about 1.5× the band's arithmetic; the
        q/k/v/key_global/value_global weights are concatenated on every call (a few MB) to run one matmul.
    Requires: nothing beyond torch; not combinable with offload (the swap would drop accelerate's hooks).
    """

    name = "fast_attention"
    description = "Swap Longformer's eager attention for a fused SDPA version with the same weights and outputs."
    phase = TRANSFORM
    conflicts_with = ("offload",)

    def transform(self, model):
        return swap_attention(model)
