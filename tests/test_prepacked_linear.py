"""Prepacked oneDNN Linear layers against the plain model: same outputs, same state dict, same weight bytes."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from transformers import LongformerConfig, LongformerForQuestionAnswering

from longqa.loader import weight_bytes_per_device
from strategies.fast_attention import SlidingWindowSelfAttention, swap_attention
from strategies.hardware import Hardware
from strategies.int8_dynamic import quantize_linears
from strategies.prepacked_linear import PackedLinear, PrepackedLinear, pack_linears, unpacked
from strategies.profiles import custom_profile
from tests.test_fast_attention import TINY, inputs, max_logit_gap

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch has no oneDNN")


def models(config: LongformerConfig = TINY, dtype=torch.float32, fast: bool = True):
    torch.manual_seed(0)
    plain = LongformerForQuestionAnswering(config).eval().to(dtype)
    if fast:
        plain = swap_attention(plain)
    packed = PrepackedLinear(Hardware(cpu_bf16=True), "cpu").transform(
        copy.deepcopy(plain))
    return plain, packed.eval()


def test_every_linear_is_packed_and_the_projections_are_fused_once():
    plain, packed = models()
    assert not any(type(m) is nn.Linear for m in packed.modules())
    attentions = [m for m in packed.modules() if isinstance(m, SlidingWindowSelfAttention)]
    assert all(isinstance(a.fused_projection, PackedLinear) and a.query is None and a.key_global is None
               for a in attentions)
    assert all(isinstance(a.query_global, PackedLinear) for a in attentions)  # asked by the global rows alone
    gelus = [m for m in packed.modules() if isinstance(m, PackedLinear) and m.activation == "gelu"]
    assert len(gelus) == TINY.num_hidden_layers
    assert weight_bytes_per_device([packed]) == weight_bytes_per_device([plain])  # held once, not twice


@pytest.mark.slow
@pytest.mark.parametrize("fast", [True, False])
def test_fp32_outputs_match_the_plain_model(fast):
    plain, packed = models(fast=fast)
    x = inputs(3, 777, TINY.vocab_size)
    with torch.inference_mode():
        assert max_logit_gap(plain(**x), packed(**x), x["attention_mask"]) < 1e-4


@pytest.mark.requires_cpu_bf16  # oneDNN prepacks bf16 weights only on such a CPU
def test_bf16_outputs_stay_within_bf16_rounding():
    plain, packed = models(dtype=torch.bfloat16)
    reference, _ = models()
    x = inputs(2, 500, TINY.vocab_size)
    with torch.inference_mode():
        fp32 = reference(**x)
        gap_plain = max_logit_gap(fp32, plain(**x), x["attention_mask"])
        gap_packed = max_logit_gap(fp32, packed(**x), x["attention_mask"])
    assert gap_packed < max(2 * gap_plain, 0.05)  # the fused GELU rounds once, not twice: no worse than plain bf16


@pytest.mark.parametrize("fast", [True, False])
def test_the_state_dict_is_the_plain_one(fast):
    plain, packed = models(fast=fast)
    a, b = plain.state_dict(), packed.state_dict()
    assert set(a) == set(b)
    assert all(torch.equal(a[name], b[name]) for name in a)


def test_training_is_refused_with_a_clear_message():
    _, packed = models()
    packed.train()
    x = inputs(1, 128, TINY.vocab_size)
    with pytest.raises(RuntimeError, match="prepacked_linear is for inference"):
        packed(**x)


def test_int8_layers_are_left_to_their_own_backend():
    torch.manual_seed(0)
    model = swap_attention(LongformerForQuestionAnswering(TINY).eval())
    quantize_linears(model.longformer)
    pack_linears(model)
    assert not any(isinstance(m, PackedLinear) for m in model.longformer.modules())
    assert sum(isinstance(m, torch.ao.nn.quantized.dynamic.Linear) for m in model.longformer.modules()) == \
        TINY.num_hidden_layers * 9  # q, k, v and their global three, the attention output, the feed-forward's two
    assert isinstance(model.qa_outputs, PackedLinear)  # the one float Linear int8_dynamic leaves


def test_unavailable_on_cuda_with_the_reason():
    strategy = PrepackedLinear(Hardware(cuda_available=True), "cuda")
    assert "CPU only" in strategy.unavailable_reason(strategy.hardware)


@pytest.mark.slow
def test_unpacked_gives_plain_trainable_layers_and_packs_them_again():
    plain, packed = models()
    x = inputs(2, 300, TINY.vocab_size)
    with torch.no_grad():
        expected = packed(**x)
    bytes_packed = weight_bytes_per_device([packed])
    with unpacked(packed) as model:
        assert not any(isinstance(m, PackedLinear) for m in model.modules())
        assert weight_bytes_per_device([model]) == bytes_packed  # held once while unpacked too
        model.train()
        out = model(**x, start_positions=torch.tensor([3, 5]), end_positions=torch.tensor([4, 9]))
        out.loss.backward()
        assert model.longformer.encoder.layer[0].attention.self.query.weight.grad is not None
        model.eval()
    assert isinstance(packed.qa_outputs, PackedLinear) and weight_bytes_per_device([packed]) == bytes_packed
    with torch.no_grad():
        assert max_logit_gap(expected, packed(**x), x["attention_mask"]) < 1e-5
    assert set(packed.state_dict()) == set(plain.state_dict())


@pytest.mark.slow
def test_the_training_step_runs_on_a_prepacked_profile():
    from longqa.session import Session

    session = Session()
    try:
        session.load("demo", custom_profile(["fast_attention", "prepacked_linear"], device="cpu"))
        readout, tokens = session.training_step(128)
        assert tokens == 128 and readout.peak_bytes_with > 0 and readout.peak_bytes_without > 0
        assert any(isinstance(m, PackedLinear) for m in session.loaded.model.modules())  # packed again after
    finally:
        session.unload()


def test_the_residual_adds_run_inside_the_packed_layers(monkeypatch):
    """Each attention-output and feed-forward-out block adds its residual in the packed layer's kernel: the plain
    add never runs on those blocks' outputs; unpacked (for training) they take their class's forward again."""
    from strategies import prepacked_linear

    plain, packed = models()
    blocks = [m for m in packed.modules() if type(m).__name__ in prepacked_linear.RESIDUAL_OUTPUTS]
    assert len(blocks) == 2 * TINY.num_hidden_layers and all("forward" in vars(m) for m in blocks)
    calls = []
    add_to = PackedLinear.add_to
    monkeypatch.setattr(PackedLinear, "add_to", lambda self, x, residual: calls.append(1) or add_to(self, x, residual))
    x = inputs(2, 300, TINY.vocab_size)
    with torch.inference_mode():
        assert max_logit_gap(plain(**x), packed(**x), x["attention_mask"]) < 1e-4
    assert len(calls) == 2 * TINY.num_hidden_layers
    with unpacked(packed):
        calls.clear()
        with torch.inference_mode():
            assert max_logit_gap(plain(**x), packed(**x), x["attention_mask"]) < 1e-4
        assert calls == []
