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
    with the length and the work is a batched fused SDPA call instead of chunk copies.
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

    def _bands(self, x: torch.Tensor, pad_value) -> torch.Tensor:
        """(..., L, *) -> (..., nb, 3w, *): for block i, positions [i*w - w, i*w + 2w), padded at the edges."""
        w = self.one_sided_attn_window_size
        dim = x.dim() - 2 if x.dim() == 4 else x.dim() - 1  # the length dimension
        pad = [0, 0] * (x.dim() - 1 - dim) + [w, w]
        padded = F.pad(x, pad, value=pad_value)
        bands = padded.unfold(dim, 3 * w, w)  # (..., nb, *, 3w)
        return bands.movedim(-1, dim + 1)  # (..., nb, 3w, *)

    def forward(self, hidden_states, attention_mask=None, is_index_masked=None, is_index_global_attn=None,
                is_global_attn=None, output_attentions=False):
        batch, length, _ = hidden_states.shape
        w = self.one_sided_attn_window_size
        heads, head_dim = self.num_heads, self.head_dim
        n_blocks = length // w  # the model pads the length to a multiple of the window (2w)
        is_pad = is_index_masked  # (B, L)
        is_global = is_index_global_attn  # (B, L)
        dropout = self.dropout if self.training else 0.0

        q = self._heads(self.query(hidden_states))  # (B, H, L, d)
        k = self._heads(self.key(hidden_states))
        v = self._heads(self.value(hidden_states))

        # Global tokens first, in order; `n_global` slots (the most any row has), unused slots masked.
        n_global = max(int(is_global.sum(dim=1).max()), 1)
        order = torch.argsort((~is_global).to(torch.int8), dim=1, stable=True)[:, :n_global]  # (B, G)
        slot_used = torch.gather(is_global, 1, order)  # (B, G)
        gather_index = order[:, None, :, None].expand(batch, heads, n_global, head_dim)  # (B, H, G, d)
        k_global = torch.gather(k, 2, gather_index)  # (B, H, G, d)
        v_global = torch.gather(v, 2, gather_index)

        q_blocks = q.reshape(batch, heads, n_blocks, w, head_dim)  # (B, H, nb, w, d)
        k_bands = self._bands(k, 0.0)  # (B, H, nb, 3w, d)
        v_bands = self._bands(v, 0.0)
        keys = torch.cat([k_global[:, :, None].expand(-1, -1, n_blocks, -1, -1), k_bands], dim=3)  # (B,H,nb,G+3w,d)
        values = torch.cat([v_global[:, :, None].expand(-1, -1, n_blocks, -1, -1), v_bands], dim=3)

        offsets = torch.arange(3 * w, device=q.device)[None, :] - torch.arange(w, device=q.device)[:, None] - w
        in_window = offsets.abs() <= w  # (w, 3w): key j of the band is within ±w of query a of the block
        local_key = self._bands(~(is_pad | is_global), False)  # (B, nb, 3w): padded edges are not keys
        band_ok = in_window[None, None] & local_key[:, :, None, :]  # (B, nb, w, 3w)
        # A padding row may have no key at all; let it see itself so softmax stays finite (its output is zeroed).
        pad_rows = is_pad.view(batch, n_blocks, w)[..., None] & (offsets == 0)[None, None]  # (B, nb, w, 3w)
        global_ok = slot_used[:, None, None, :].expand(-1, n_blocks, w, -1)  # (B, nb, w, G)
        allowed = torch.cat([global_ok, band_ok | pad_rows], dim=-1)[:, None]  # (B, 1, nb, w, G+3w)
        local_out = F.scaled_dot_product_attention(q_blocks, keys, values, attn_mask=allowed, dropout_p=dropout)
        out = local_out.reshape(batch, heads, length, head_dim)  # (B, H, L, d)

        # Global rows: only the G global tokens ask, over every non-padding token, with the global projections.
        hidden_global = torch.gather(hidden_states, 1, order[:, :, None].expand(-1, -1, self.embed_dim))  # (B,G,D)
        qg = self._heads(self.query_global(hidden_global))  # (B, H, G, d)
        kg = self._heads(self.key_global(hidden_states))  # (B, H, L, d)
        vg = self._heads(self.value_global(hidden_states))
        global_out = F.scaled_dot_product_attention(qg, kg, vg, attn_mask=(~is_pad)[:, None, None, :],
                                                    dropout_p=dropout)  # (B, H, G, d)
        keep = torch.gather(out, 2, gather_index)  # unused slots point at local rows: write those back unchanged
        global_out = torch.where(slot_used[:, None, :, None], global_out.to(out.dtype), keep)
        out = out.scatter(2, gather_index, global_out)
        out = out.masked_fill(is_pad[:, None, :, None], 0.0)
        return (out.transpose(1, 2).reshape(batch, length, self.embed_dim),)


def swap_attention(model: nn.Module) -> nn.Module:
    """Swap every LongformerSelfAttention in `model` for the SDPA version, in place; returns the model."""
    for module in model.modules():
        attention = getattr(module, "self", None)
        if type(attention).__name__ == "LongformerSelfAttention":
            module.self = SlidingWindowSelfAttention(attention).train(attention.training)  # else dropout in eval
    return model


class FastAttention(Strategy):
    """Longformer's sliding-window + global attention on PyTorch's fused `scaled_dot_product_attention`.

    Saves: attention time: the eager implementation spends most of its time copying and masking chunks;
        same weights, same outputs (checked against eager to 6e-8 in fp32).
    Costs: keys are computed in bands of 3w for blocks of w queries, so about 1.5× the band's arithmetic.
    Requires: nothing beyond torch; not combinable with offload (the swap would drop accelerate's hooks).
    """

    name = "fast_attention"
    description = "Swap Longformer's eager attention for a fused SDPA version with the same weights and outputs."
    stage = TRANSFORM
    conflicts_with = ("offload",)

    def transform(self, model):
        return swap_attention(model)
