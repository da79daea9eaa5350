"""The fast attention against transformers' eager Longformer attention: same weights, same outputs."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import LongformerConfig, LongformerForQuestionAnswering

from longqa.models import architecture_config
from strategies.fast_attention import SlidingWindowSelfAttention, band_plan, swap_attention


pytestmark = pytest.mark.torch_threads  # on a CPU with a band kernel, the fast attention runs it (threaded)


def pair(config: LongformerConfig, seed: int = 0):
    torch.manual_seed(seed)
    eager = LongformerForQuestionAnswering(config).eval()
    fast = swap_attention(copy.deepcopy(eager)).eval()
    assert sum(isinstance(m, SlidingWindowSelfAttention) for m in fast.modules()) == config.num_hidden_layers
    return eager, fast


def inputs(batch: int, length: int, vocab: int, questions=(5, 3, 9), padding=(0, 17, 40), seed: int = 1):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (batch, length), generator=generator)
    attention = torch.ones(batch, length, dtype=torch.long)
    global_mask = torch.zeros(batch, length, dtype=torch.long)
    for row in range(batch):
        pad = padding[row % len(padding)]
        if pad:
            attention[row, length - pad:] = 0
            ids[row, length - pad:] = 1
        global_mask[row, : questions[row % len(questions)]] = 1  # variable question lengths
    return dict(input_ids=ids, attention_mask=attention, global_attention_mask=global_mask)


def max_logit_gap(a, b, mask) -> float:
    keep = mask.bool()
    return max((a.start_logits.float() - b.start_logits.float())[keep].abs().max().item(),
               (a.end_logits.float() - b.end_logits.float())[keep].abs().max().item())


TINY = LongformerConfig(vocab_size=300, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, attention_window=[32, 32], max_position_embeddings=4098,
                        pad_token_id=1, bos_token_id=0, eos_token_id=2, sep_token_id=2)


@pytest.mark.slow
@pytest.mark.parametrize("batch, length", [(1, 1000), (3, 1000), (1, 4096), (3, 4096), (3, 777), (2, 65)])
def test_tiny_model_matches_eager_in_fp32(batch, length):
    eager, fast = pair(TINY)
    x = inputs(batch, length, TINY.vocab_size)
    with torch.no_grad():
        gap = max_logit_gap(eager(**x), fast(**x), x["attention_mask"])
    assert gap < 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("batch, length", [(3, 777), (2, 65), (1, 4096)])
def test_the_sdpa_band_matches_eager_in_fp32(monkeypatch, batch, length):
    """The band on SDPA, as where no band kernel runs (the tests above take the fp32 kernel where it does)."""
    monkeypatch.setattr(SlidingWindowSelfAttention, "use_band_kernel", False)
    eager, fast = pair(TINY)
    x = inputs(batch, length, TINY.vocab_size)
    with torch.no_grad():
        assert max_logit_gap(eager(**x), fast(**x), x["attention_mask"]) < 1e-4


@pytest.mark.slow
def test_global_tokens_anywhere_and_rows_without_any():
    eager, fast = pair(TINY)
    x = inputs(3, 300, TINY.vocab_size)
    x["global_attention_mask"][1] = 0
    x["global_attention_mask"][1, [0, 150, 299 - 17 - 1]] = 1  # not a prefix
    x["global_attention_mask"][2] = 0  # a row with no global token at all
    x["global_attention_mask"][2, 0] = 0
    x["global_attention_mask"][0, :5] = 1
    with torch.no_grad():
        gap = max_logit_gap(eager(**x), fast(**x), x["attention_mask"])
    assert gap < 1e-4


@pytest.mark.slow
def test_top_answers_identical_on_the_base_architecture():
    eager, fast = pair(architecture_config("arch:base"))
    x = inputs(3, 1000, 50265, questions=(12, 20, 7))
    with torch.no_grad():
        a, b = eager(**x), fast(**x)
    assert max_logit_gap(a, b, x["attention_mask"]) < 1e-4
    context = x["attention_mask"].bool() & ~x["global_attention_mask"].bool()
    masked = lambda t: t.masked_fill(~context, -1e9)  # noqa: E731
    assert torch.equal(masked(a.start_logits).argmax(-1), masked(b.start_logits).argmax(-1))
    assert torch.equal(masked(a.end_logits).argmax(-1), masked(b.end_logits).argmax(-1))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_stays_within_eagers_own_rounding(dtype):
    eager, fast = pair(TINY)
    x = inputs(2, 1000, TINY.vocab_size)
    with torch.no_grad():
        reference = eager(**x)
        eager_half = copy.deepcopy(eager).to(dtype)(**x)
        fast_half = copy.deepcopy(fast).to(dtype)(**x)
    eager_error = max_logit_gap(reference, eager_half, x["attention_mask"])
    fast_error = max_logit_gap(reference, fast_half, x["attention_mask"])
    assert fast_error <= 1.5 * eager_error + 1e-3


def test_a_plan_knows_whether_any_token_is_padding():
    """Without padding the layers skip the global rows' key mask and zeroing padding rows (1 ms a layer at 4,096
    tokens): (1, 4096) above runs that path, the padded shapes the other."""
    is_global = torch.zeros(2, 128, dtype=torch.bool)
    is_global[:, :3] = True
    is_pad = torch.zeros(2, 128, dtype=torch.bool)
    assert not band_plan(is_pad, is_global, 32, torch.float32, 32, with_bias=False).has_padding
    assert not band_plan(is_pad, is_global, 32, torch.float32, 32).has_padding
    is_pad[1, 127] = True
    assert band_plan(is_pad, is_global, 32, torch.float32, 32, with_bias=False).has_padding


@pytest.mark.slow
def test_it_compiles_without_graph_breaks_on_its_own():
    """No data-dependent Python branches: the attention module traces as one graph (dynamic shapes allowed)."""
    eager, fast = pair(TINY)
    module = next(m for m in fast.modules() if isinstance(m, SlidingWindowSelfAttention))
    hidden = torch.randn(2, 128, 64)
    is_pad = torch.zeros(2, 128, dtype=torch.bool)
    is_pad[1, 100:] = True
    is_global = torch.zeros(2, 128, dtype=torch.bool)
    is_global[:, :6] = True
    explanation = torch._dynamo.explain(module)(hidden, None, is_pad, is_global, True)
    assert explanation.graph_break_count <= 1  # the one host read: how many global slots this batch needs


def test_the_state_dict_is_the_eager_one():
    eager, fast = pair(TINY)
    a, b = eager.state_dict(), fast.state_dict()
    assert list(a) == list(b)
    assert all(torch.equal(a[name], b[name]) for name in a)


@pytest.mark.slow
def test_layers_that_are_not_plain_linears_keep_their_own_forward():
    """Quantized or hooked projections cannot be fused into one matmul: the fallback must give the same rows."""

    class Wrapped(torch.nn.Linear):
        calls = 0

        def forward(self, x):
            Wrapped.calls += 1
            return super().forward(x)

    eager, fast = pair(TINY)
    for module in fast.modules():
        if isinstance(module, SlidingWindowSelfAttention):
            wrapped = Wrapped(module.key.in_features, module.key.out_features)
            wrapped.load_state_dict(module.key.state_dict())
            module.key = wrapped
    x = inputs(2, 300, TINY.vocab_size)
    with torch.no_grad():
        gap = max_logit_gap(eager(**x), fast(**x), x["attention_mask"])
    assert Wrapped.calls == TINY.num_hidden_layers
    assert gap < 1e-4


@pytest.mark.slow
def test_bf16_on_cpu_runs_the_fused_kernel_not_the_math_fallback(monkeypatch):
    """The math path (taken for 5-D inputs) was slower than eager; this guards the 4-D layout of the SDPA band
    (the path bf16 takes where the band kernel cannot run)."""
    monkeypatch.setattr(SlidingWindowSelfAttention, "use_band_kernel", False)
    _, fast = pair(TINY)
    fast = fast.to(torch.bfloat16)
    x = inputs(2, 300, TINY.vocab_size)
    with torch.inference_mode(), torch.profiler.profile() as profile:
        fast(**x)
    ops = {event.key for event in profile.key_averages()}
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in ops
    assert "aten::_scaled_dot_product_attention_math" not in ops


@pytest.mark.slow
def test_one_plan_per_forward_shared_by_every_layer(monkeypatch):
    """The masks and global slots are built once per forward, not per layer, and rebuilt for the next forward."""
    import strategies.fast_attention as fast_attention

    built = []
    real = fast_attention.band_plan
    monkeypatch.setattr(fast_attention, "band_plan", lambda *args: built.append(1) or real(*args))
    _, fast = pair(TINY)
    with torch.no_grad():
        fast(**inputs(2, 300, TINY.vocab_size))
        assert len(built) == 1  # TINY has 2 layers
        fast(**inputs(2, 300, TINY.vocab_size))
    assert len(built) == 2


@pytest.mark.slow
def test_a_new_forward_never_reuses_the_last_plan():
    """Successive requests with different padding and question lengths each match eager: no stale masks."""
    eager, fast = pair(TINY)
    for questions, padding, length in [((5, 3), (0, 17), 300), ((12, 1), (40, 0), 300), ((2, 2), (0, 0), 500)]:
        x = inputs(2, length, TINY.vocab_size, questions=questions, padding=padding)
        with torch.no_grad():
            assert max_logit_gap(eager(**x), fast(**x), x["attention_mask"]) < 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("divisor", [2, 4])
def test_smaller_query_blocks_give_the_same_outputs(monkeypatch, divisor):
    eager, fast = pair(TINY)
    monkeypatch.setattr(SlidingWindowSelfAttention, "use_band_kernel", False)  # query blocks are SDPA's
    monkeypatch.setattr(SlidingWindowSelfAttention, "query_block_divisor", divisor)
    x = inputs(3, 777, TINY.vocab_size)
    with torch.no_grad():
        assert max_logit_gap(eager(**x), fast(**x), x["attention_mask"]) < 1e-4


@pytest.mark.slow
def test_the_plan_is_dropped_when_the_forward_ends():
    """Nothing of a request's masks stays allocated between requests."""
    _, fast = pair(TINY)
    plans = next(m for m in fast.modules() if isinstance(m, SlidingWindowSelfAttention)).plans
    with torch.no_grad():
        fast(**inputs(2, 300, TINY.vocab_size))
    assert plans._plan is None and plans._masks is None


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_first_row_mask_is_the_row_longformer_keeps(implementation, dtype):
    """transformers' Longformer builds a (B, 1, L, L) padding mask and keeps row 0; the fast attention has it build
    only that row: the same values, L times less work."""
    from transformers.masking_utils import create_bidirectional_mask

    from strategies.fast_attention import first_row_bidirectional_mask

    config = copy.deepcopy(TINY)
    config._attn_implementation = implementation
    embeds = torch.randn(3, 50, TINY.hidden_size, dtype=dtype)
    padding = torch.ones(3, 50, dtype=torch.long)
    padding[1, 40:] = 0
    padding[2, 7:] = 0
    full = create_bidirectional_mask(config, embeds, padding, allow_is_bidirectional_skip=False)
    first_row = first_row_bidirectional_mask(config, embeds, padding, allow_is_bidirectional_skip=False)
    assert full.shape == (3, 1, 50, 50) and first_row.shape == (3, 1, 1, 50)
    assert torch.equal(first_row[:, 0, 0, :], full[:, 0, 0, :])
    assert not torch.equal(first_row[1, 0, 0, :], first_row[0, 0, 0, :])  # the padding is in it


@pytest.mark.slow
def test_the_first_row_mask_holds_only_while_a_swapped_model_runs(monkeypatch):
    """A plain Longformer in the same process keeps transformers' own mask: the first-row one is set by a swapped
    model's forward and put back after it, also when that forward raises."""
    from transformers.masking_utils import create_bidirectional_mask
    from transformers.models.longformer import modeling_longformer

    from strategies.fast_attention import first_row_bidirectional_mask

    eager, fast = pair(TINY)
    seen = []
    layer = fast.longformer.encoder.layer[0]
    monkeypatch.setattr(layer, "forward", lambda *args, _forward=layer.forward, **kwargs: (
        seen.append(modeling_longformer.create_bidirectional_mask), _forward(*args, **kwargs))[1])
    x = inputs(1, 200, TINY.vocab_size)
    with torch.inference_mode():
        fast(**x)
        assert seen == [first_row_bidirectional_mask]
        assert modeling_longformer.create_bidirectional_mask is create_bidirectional_mask
        with pytest.raises(RuntimeError):  # float token ids: the embedding refuses them inside the forward
            fast(**{**x, "input_ids": x["input_ids"].float()})
        assert modeling_longformer.create_bidirectional_mask is create_bidirectional_mask
