"""Fast sliding-window attention: Longformer's local+global attention on PyTorch's fused SDPA kernel, or, on a CPU,
on the project's own band kernels (strategies/band_kernel.py: bf16 with AVX-512 BF16, fp32 with AVX2).

Computes exactly what transformers' eager `LongformerSelfAttention` computes, with the same weights, but as
masked `scaled_dot_product_attention` over blocks of queries (or the band kernel's one call per layer) instead of
chunked diagonal bookkeeping. It is a drop-in module swap, not a new model.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from transformers.masking_utils import create_bidirectional_mask
from transformers.models.longformer import modeling_longformer

from strategies import band_kernel
from strategies.base import TRANSFORM, Strategy


@dataclass(frozen=True)
class BandPlan:
    """What every layer of one forward shares: which tokens are global (in slot order) and the additive mask of
    each block of w queries over its global slots and 3w-key band. Depends only on the padding and global masks,
    which transformers computes once per forward and hands to every layer, so it is built once, not per layer."""

    n_global: int  # slots: the most global tokens any row has (at least 1)
    order: torch.Tensor  # (B, G) token index of each slot
    slot_used: torch.Tensor  # (B, G) whether the slot holds a global token
    key_ok: torch.Tensor  # (B, L) whether the token is a local key (neither padding nor global)
    bias: torch.Tensor | None  # (B*nb, 1, w, G+3w) 0 where a query may attend, -inf elsewhere, in the query dtype;
    # None for the band kernel, which masks as it goes
    has_padding: bool = True  # whether any token is padding: without, no layer masks its global rows' keys or zeroes
    # padding rows (on one CPU thread 1 ms a layer of `masked_fill_` and the global rows' mask at 4,096 tokens)


def band_plan(is_pad: torch.Tensor, is_global: torch.Tensor, w: int, dtype: torch.dtype, block: int,
              with_bias: bool = True) -> BandPlan:
    """The plan for padding mask `is_pad` and global mask `is_global` (both (B, L), L a multiple of w), for
    blocks of `block` queries (a divisor of w), each over its `block + 2w` keys; without the SDPA mask when
    `with_bias` is false."""
    batch, length = is_pad.shape
    n_blocks, span = length // block, block + 2 * w
    # Global tokens first, in order; `n_global` slots (the most any row has), unused slots masked. The int() is a
    # shape: the slot count.
    n_global = max(int(is_global.sum(dim=1).max()), 1)
    order = torch.argsort((~is_global).to(torch.int8), dim=1, stable=True)[:, :n_global]  # (B, G)
    slot_used = torch.gather(is_global, 1, order)  # (B, G)
    key_ok = ~(is_pad | is_global)
    has_padding = bool(is_pad.any())
    if not with_bias:
        return BandPlan(n_global, order, slot_used, key_ok, None, has_padding)
    offsets = (torch.arange(span, device=is_pad.device)[None, :] - torch.arange(block, device=is_pad.device)[:, None]
               - w)  # (c, c+2w): position of key j of the band minus that of query a of the block
    is_local_key = F.pad(key_ok, (w, w), value=False).unfold(1, span, block)  # (B, nb, c+2w)
    band_ok = (offsets.abs() <= w)[None, None] & is_local_key[:, :, None, :]  # (B, nb, c, c+2w)
    # A padding row may have no key at all; let it see itself so softmax stays finite (its output is zeroed).
    pad_rows = is_pad.view(batch, n_blocks, block)[..., None] & (offsets == 0)[None, None]  # (B, nb, c, c+2w)
    global_ok = slot_used[:, None, None, :].expand(-1, n_blocks, block, -1)  # (B, nb, c, G)
    allowed = torch.cat([global_ok, band_ok | pad_rows], dim=-1)  # (B, nb, c, G+c+2w)
    # An additive mask in the query dtype: a boolean one costs a conversion per call inside SDPA.
    bias = torch.zeros(allowed.shape, dtype=dtype, device=is_pad.device).masked_fill_(~allowed, float("-inf"))
    return BandPlan(n_global, order, slot_used, key_ok, bias.view(batch * n_blocks, 1, block, n_global + span),
                    has_padding)


class BandPlanCache:
    """The current forward's plan, shared by the layers of one model: reused while the masks are the very same
    tensors (transformers passes one pair to all layers), rebuilt when a new forward brings new ones. Holds the
    masks weakly, so a finished forward's plan is never mistaken for the next one's, and drops the plan (its mask is
    B × L × (G+3w) elements) as soon as the forward's masks are freed, so nothing stays allocated between requests."""

    def __init__(self):
        self._masks: tuple[weakref.ref, weakref.ref, int, torch.dtype, int, bool] | None = None
        self._plan: BandPlan | None = None

    @torch.compiler.disable  # host-side bookkeeping (and the slot count's host read): one graph break, not several
    def get(self, is_pad: torch.Tensor, is_global: torch.Tensor, w: int, dtype: torch.dtype,
            block: int, with_bias: bool = True) -> BandPlan:
        masks = self._masks
        if (masks is not None and masks[0]() is is_pad and masks[1]() is is_global
                and masks[2:] == (w, dtype, block, with_bias)):
            return self._plan
        self._plan = band_plan(is_pad, is_global, w, dtype, block, with_bias)
        self._masks = (weakref.ref(is_pad, self._forget), weakref.ref(is_global), w, dtype, block, with_bias)
        return self._plan

    def _forget(self, freed: weakref.ref) -> None:
        if self._masks is not None and self._masks[0] is freed:
            self._masks = self._plan = None


class SlidingWindowSelfAttention(nn.Module):
    """Replaces one `LongformerSelfAttention`, sharing its projection layers (so state dicts are unchanged).

    Local rows: each token attends to non-global tokens within ±w and to every global token (local projections).
    Global rows: attend to every non-padding token with the `*_global` projections. Padding rows output zeros.
    Queries go in blocks of w: a block sees its 3w-key band plus the global keys, so memory grows linearly
    with the length and the work is one fused SDPA call over (B*blocks, H, w, d) instead of chunk copies. The
    4-D layout matters: on CPU a 5-D (B, H, blocks, ...) call falls back to SDPA's math path, which was slower
    than eager. Blocks of w/2 or w/4 (`query_block_divisor`) waste less of the band but were slower in the whole
    model: more mask and more key copies (`python -m bench levers`, docs/results/cpu-floor). On a CPU the band
    goes to a band kernel instead where one runs (`use_band_kernel`; bf16 with AVX-512 BF16, fp32 with AVX2): one call
    per layer over exactly the band, without padded copies or a mask (strategies/band_kernel.py).
    """

    query_block_divisor = 1  # blocks of w / this many queries, each over its w/divisor + 2w keys
    use_band_kernel = True  # on CPU: a band kernel where one runs (strategies/band_kernel.py), else SDPA

    def __init__(self, original: nn.Module, plans: BandPlanCache | None = None):
        super().__init__()
        self.query, self.key, self.value = original.query, original.key, original.value
        self.query_global, self.key_global, self.value_global = (
            original.query_global, original.key_global, original.value_global)
        self.fused_projection: nn.Module | None = None  # set by pack_projections
        self.num_heads = original.num_heads
        self.head_dim = original.head_dim
        self.embed_dim = original.embed_dim
        self.one_sided_attn_window_size = original.one_sided_attn_window_size
        self.dropout = original.dropout
        self.layer_id = original.layer_id
        self.config = original.config
        self.plans = plans or BandPlanCache()

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, L, d)

    def _projections(self) -> tuple[nn.Module, ...]:
        return self.query, self.key, self.value, self.key_global, self.value_global

    def _project(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """query, key, value, key_global, value_global of every token: (B, L, D) each.

        One matmul: the fused projection when `pack_projections` made one, else the five weights concatenated at
        call time (the state dict keeps the five layers) when all five are plain biased `nn.Linear`s with plain
        weights. Quantized layers (other modules, or weights that are tensor subclasses such as torchao's int8
        tensors, which cannot be concatenated) and accelerate-hooked layers keep their own forward.
        """
        if self.fused_projection is not None:
            return self.fused_projection(hidden_states).split(self.embed_dim, dim=-1)
        layers = self._projections()
        if all(type(layer) is nn.Linear and type(layer.weight) is nn.Parameter and layer.bias is not None
               and not hasattr(layer, "_hf_hook") for layer in layers):
            weight = torch.cat([layer.weight for layer in layers])  # (5D, D)
            bias = torch.cat([layer.bias for layer in layers])
            return F.linear(hidden_states, weight, bias).split(self.embed_dim, dim=-1)
        return tuple(layer(hidden_states) for layer in layers)

    def pack_projections(self, make_fused, can_fuse) -> bool:
        """Replace the five token projections by one module over their concatenated weights, built by
        `make_fused(weight (5D, D), bias (5D,))` (a prepacked Linear), when `can_fuse` accepts all five and they
        all have a bias; the five layers are dropped, so the weights are held once. Returns whether it did."""
        layers = self._projections()
        if not all(layer is not None and can_fuse(layer) and layer.bias is not None for layer in layers):
            return False
        with torch.no_grad():
            self.fused_projection = make_fused(torch.cat([layer.weight for layer in layers]),
                                               torch.cat([layer.bias for layer in layers]))
        self.query = self.key = self.value = self.key_global = self.value_global = None
        if not getattr(self, "_splits_fused_state", False):
            self.register_state_dict_post_hook(_split_fused_projection)
            self._splits_fused_state = True
        return True

    def forward(self, hidden_states, attention_mask=None, is_index_masked=None, is_index_global_attn=None,
                is_global_attn=None, output_attentions=False):
        batch, length, _ = hidden_states.shape
        w = self.one_sided_attn_window_size
        heads, head_dim = self.num_heads, self.head_dim
        divisor = self.query_block_divisor
        block = w // divisor if w % divisor == 0 else w  # queries per SDPA block: c (the length is a multiple of 2w)
        is_pad = is_index_masked  # (B, L)
        dropout = self.dropout if self.training else 0.0

        q, k, v, k_all, v_all = (x.view(batch, length, heads, head_dim)
                                 for x in self._project(hidden_states))  # (B, L, H, d) each
        on_kernel = self._is_band_on_kernel(q, dropout)
        plan = self.plans.get(is_pad, is_index_global_attn, w, q.dtype, block, with_bias=not on_kernel)
        n_global, order, slot_used = plan.n_global, plan.order, plan.slot_used

        row_index = order[:, :, None, None].expand(batch, n_global, heads, head_dim)  # (B, G, H, d)
        k_global = torch.gather(k, 1, row_index).transpose(1, 2)  # (B, H, G, d)
        v_global = torch.gather(v, 1, row_index).transpose(1, 2)
        if on_kernel:
            out = band_kernel.band_attention(q, k, v, k_global, v_global, plan.key_ok, slot_used, w)  # (B, L, H, d)
            out = out.view(batch, length, self.embed_dim)
        else:
            out = self._band_sdpa(q, k, v, k_global, v_global, plan, block, dropout)
        return self._with_global_rows(out, hidden_states, k_all, v_all, plan, is_pad, dropout)

    def _is_band_on_kernel(self, q: torch.Tensor, dropout: float) -> bool:
        """Whether a band kernel computes this forward's band: on CPU in its dtype, no dropout or gradient, a head
        size it takes, not inside torch.compile (which traces SDPA into its graph); else SDPA does."""
        if not (self.use_band_kernel and q.device.type == "cpu" and dropout == 0.0 and q.stride(-1) == 1
                and not torch.compiler.is_compiling()
                and band_kernel.is_head_supported(q.dtype, q.shape[-1])
                and not (torch.is_grad_enabled() and q.requires_grad)):
            return False
        return band_kernel.kernel(q.dtype) is not None

    def _band_sdpa(self, q, k, v, k_global, v_global, plan: BandPlan, block: int, dropout: float) -> torch.Tensor:
        """The local rows' output (B, L, D) as one fused SDPA call over blocks of `block` queries."""
        batch, length, heads, head_dim = q.shape
        w = self.one_sided_attn_window_size
        n_blocks, span, n_global = length // block, block + 2 * w, plan.n_global
        # 4-D (B*nb, H, ...) so SDPA takes the fused flash kernel (5-D inputs fall back to the math path).
        q_blocks = q.view(batch, n_blocks, block, heads, head_dim).transpose(2, 3).reshape(
            batch * n_blocks, heads, block, head_dim)  # (B*nb, H, c, d)

        def blocks_of(x, x_global):  # (B, L, H, d) -> (B*nb, H, G+c+2w, d): the global keys, then the band
            bands = F.pad(x, (0, 0, 0, 0, w, w)).unfold(1, span, block).transpose(-1, -2)  # (B, nb, H, c+2w, d)
            expanded = x_global[:, None].expand(-1, n_blocks, -1, -1, -1)  # (B, nb, H, G, d)
            return torch.cat([expanded, bands], dim=3).view(batch * n_blocks, heads, n_global + span, head_dim)

        keys, values = blocks_of(k, k_global), blocks_of(v, v_global)
        local_out = F.scaled_dot_product_attention(q_blocks, keys, values, attn_mask=plan.bias,
                                                   dropout_p=dropout)  # (B*nb, H, c, d)
        return local_out.view(batch, n_blocks, heads, block, head_dim).transpose(2, 3).reshape(
            batch, length, self.embed_dim)  # (B, L, D)

    def _with_global_rows(self, out, hidden_states, k_all, v_all, plan: BandPlan, is_pad, dropout) -> tuple:
        """`out` with the global tokens' rows replaced by their attention over every token, padding rows zeroed."""
        order, slot_used, n_global = plan.order, plan.slot_used, plan.n_global
        # Global rows: only the G global tokens ask, over every non-padding token, with the global projections.
        embed_index = order[:, :, None].expand(-1, -1, self.embed_dim)  # (B, G, D)
        hidden_global = torch.gather(hidden_states, 1, embed_index)  # (B, G, D)
        qg = self._heads(self.query_global(hidden_global))  # (B, H, G, d)
        kg, vg = k_all.transpose(1, 2), v_all.transpose(1, 2)  # (B, H, L, d)
        key_mask = (~is_pad)[:, None, None, :] if plan.has_padding else None
        global_out = F.scaled_dot_product_attention(qg, kg, vg, attn_mask=key_mask, dropout_p=dropout)  # (B, H, G, d)
        global_out = global_out.transpose(1, 2).reshape(out.shape[0], n_global, self.embed_dim)  # (B, G, D)
        keep = torch.gather(out, 1, embed_index)  # unused slots point at local rows: write those back unchanged
        global_out = torch.where(slot_used[:, :, None], global_out.to(out.dtype), keep)
        # Written as rows of the flattened (B*L, D) output, in place unless autograd needs `out` as it was: it is
        # this layer's own fresh tensor, and `scatter` copied all of it (B × L × D) per layer, in bf16 about 6 ms
        # of CPU at 4,096 tokens, 100× this.
        batch, length, _ = out.shape
        in_place = not (torch.is_grad_enabled() and out.requires_grad)
        rows = (order + torch.arange(batch, device=order.device)[:, None] * length).view(-1)  # (B*G,)
        flat = out.contiguous().view(batch * length, self.embed_dim)  # (B*L, D)
        new_rows = global_out.reshape(batch * n_global, self.embed_dim)  # (B*G, D)
        flat = flat.index_copy_(0, rows, new_rows) if in_place else flat.index_copy(0, rows, new_rows)
        out = flat.view(batch, length, self.embed_dim)
        if not plan.has_padding:
            return (out,)
        padding = is_pad[:, :, None]  # (B, L, 1)
        return (out.masked_fill_(padding, 0.0) if in_place else out.masked_fill(padding, 0.0),)


PROJECTION_NAMES = ("query", "key", "value", "key_global", "value_global")


def _split_fused_projection(module, state_dict, prefix, local_metadata) -> None:
    """The state dict under the five projections' own names, as before fusing, while a fused projection exists."""
    weight = state_dict.pop(prefix + "fused_projection.weight", None)
    bias = state_dict.pop(prefix + "fused_projection.bias", None)
    if weight is None:
        return
    for name, part, part_bias in zip(PROJECTION_NAMES, weight.split(module.embed_dim), bias.split(module.embed_dim)):
        state_dict[prefix + name + ".weight"] = part
        state_dict[prefix + name + ".bias"] = part_bias


def first_row_bidirectional_mask(config, inputs_embeds, attention_mask, **kwargs):
    """transformers' `create_bidirectional_mask` for the first query row only: (B, 1, 1, L) instead of (B, 1, L, L).
    LongformerModel.forward materializes the full mask and keeps only `[:, 0, 0, :]` (a padding mask, the same in
    every row), which cost about 70 ms of CPU per 4,096-token window (docs/cpu-floor-amx.md)."""
    return create_bidirectional_mask(config, inputs_embeds[:, :1], attention_mask,
                                     encoder_hidden_states=inputs_embeds, **kwargs)


class FirstRowMask:
    """While any swapped model's forward runs, transformers' Longformer code builds only the mask row it keeps: its
    module's `create_bidirectional_mask` is `first_row_bidirectional_mask`, set by the first forward to start and
    put back by the last to end (counted under a lock, so concurrent forwards cannot leave it set). A plain
    Longformer running at the same moment gets the same row from it, so its answers cannot change; only its mask's
    memory does, and only then."""

    _lock = threading.Lock()
    _running = 0

    @classmethod
    def enter(cls, *_) -> None:
        with cls._lock:
            if cls._running == 0:
                modeling_longformer.create_bidirectional_mask = first_row_bidirectional_mask
            cls._running += 1

    @classmethod
    def leave(cls, *_) -> None:
        with cls._lock:
            cls._running -= 1
            if cls._running == 0:
                modeling_longformer.create_bidirectional_mask = create_bidirectional_mask


def build_first_mask_row_only(model: nn.Module) -> None:
    """Hook every LongformerModel in `model` so that its forward builds only the mask row it keeps (once per
    module: the hooks are marked)."""
    for module in model.modules():
        if type(module).__name__ == "LongformerModel" and not getattr(module, "_first_row_mask", False):
            module.register_forward_pre_hook(FirstRowMask.enter)
            module.register_forward_hook(FirstRowMask.leave, always_call=True)  # also when the forward raises
            module._first_row_mask = True


def swap_attention(model: nn.Module) -> nn.Module:
    """Swap every LongformerSelfAttention in `model` for the SDPA version, in place; returns the model."""
    build_first_mask_row_only(model)
    plans = BandPlanCache()  # one per model: its layers share each forward's plan
    for module in model.modules():
        attention = getattr(module, "self", None)
        if type(attention).__name__ == "LongformerSelfAttention":
            module.self = SlidingWindowSelfAttention(attention, plans).train(attention.training)  # else dropout in eval
    return model


def attention_dtype(model: nn.Module) -> torch.dtype | None:
    """The dtype the attention computes in: that of the model's floating-point parameters (the embeddings come first;
    int8 dynamic Linear layers keep fp32 activations), or None when they are not on the CPU."""
    parameter = next((p for p in model.parameters() if p.is_floating_point()), None)
    return parameter.dtype if parameter is not None and parameter.device.type == "cpu" else None


class FastAttention(Strategy):
    """Longformer's sliding-window + global attention on PyTorch's fused `scaled_dot_product_attention`, its band
    on the project's band kernels on CPU (bf16 with AVX-512 BF16, fp32 with AVX2).

    Saves: attention time and memory: the eager implementation spends most of its time copying and masking
        chunks; the gain grows with the length and the batch (measured in docs/results/bench-cpu). Same weights and
        state dict, same outputs (within 1e-4 of eager in fp32; bf16 within eager's own rounding).
    Costs: on SDPA, keys are computed in bands of 3w for blocks of w queries, so about 1.5× the band's
        arithmetic, and one additive mask per forward (B × L × (G+3w) in the model's dtype); a band kernel (on CPU)
        computes about 1.06× and needs a C compiler once per machine (about a second, at load). The
        q/k/v/key_global/value_global weights are concatenated on every call (a few MB) to run one matmul, unless
        prepacked_linear fused them once.
    Requires: nothing beyond torch (the band kernels: a C compiler, else SDPA); not combinable with offload (the
        swap would drop accelerate's hooks).
    """

    name = "fast_attention"
    description = ("Swap Longformer's eager attention for a fused SDPA version (its band on our own kernel on CPU) "
                   "with the same weights and outputs.")
    phase = TRANSFORM
    conflicts_with = ("offload",)
    _notes: tuple[str, ...] = ()  # what transform found about the band kernels, for the load readout

    def transform(self, model):
        dtype = attention_dtype(model)
        self._notes = ()
        if dtype in band_kernel.DTYPES:
            band_kernel.load(dtype)  # built (about a second, once per machine) at load time, not in the first answer
            self._notes = (band_kernel.status(dtype),)
        return swap_attention(model)

    def load_notes(self) -> tuple[str, ...]:
        return self._notes
