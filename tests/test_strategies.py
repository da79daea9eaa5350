"""Each strategy checked on a tiny model on CPU by what it changes: dtypes, contexts, flags, module types,
device maps, settings, runner outputs, checkpoint files."""

from __future__ import annotations

import contextlib
import copy
import gc
import importlib.util
import shutil
import sys
import types
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from transformers import AutoTokenizer, LongformerForQuestionAnswering

from longqa.models import architecture_config
from longqa_core.batching import ModelRunner
from longqa_core.limits import EngineSettings
from longqa_core.errors import ProfileError
from strategies import band_kernel
from strategies.autocast import Autocast
from strategies.base import Strategy, runtime_contexts
from strategies.bitsandbytes_quantization import Bnb4bit, Bnb8bit, bitsandbytes_missing_reason
from strategies.dynamic_batching import DynamicBatching
from strategies.fast_attention import FastAttention, SlidingWindowSelfAttention
from strategies.gradient_checkpointing import (GradientCheckpointing, LiveTensorPeak, is_checkpointing,
                                               training_step_readout)
from strategies.half_precision import HalfPrecision
from strategies.hardware import Gpu, Hardware
from strategies.int8_dynamic import Int8Dynamic
from strategies.mmap_loading import MmapLoading, has_safetensors
from strategies.model_split import ModelSplit
from strategies.offload import Offload
from strategies.registry import STRATEGIES
from strategies.replicas import ReplicaRunner, Replicas
from tests.tiny import qa_batch, tiny_checkpoint, tiny_config

CPU = Hardware(cpu_bf16=True)
ONE_GPU = Hardware(gpus=(Gpu(0, "Tesla T4", 16 * 10**9, (7, 5)),), cuda_available=True, cpu_bf16=True)
TWO_GPUS = Hardware(gpus=(Gpu(0, "A100", 40 * 10**9, (8, 0)), Gpu(1, "A100", 40 * 10**9, (8, 0))),
                    cuda_available=True, cpu_bf16=True)


@pytest.fixture(scope="module")
def folder():
    return tiny_checkpoint()


@pytest.fixture(scope="module")
def tokenizer(folder):
    return AutoTokenizer.from_pretrained(folder)


@pytest.fixture(scope="module")
def batch(tokenizer):
    return qa_batch(tokenizer)


def load(folder, **kwargs) -> nn.Module:
    return LongformerForQuestionAnswering.from_pretrained(folder, **{"dtype": torch.float32, **kwargs}).eval()


def logits(model, batch) -> torch.Tensor:
    with torch.inference_mode():
        out = model(**batch)
    return torch.stack([out.start_logits, out.end_logits]).float()  # (2, B, L)


def base_kwargs(config=None) -> dict:
    return {"config": config or architecture_config("arch:base"), "dtype": torch.float32}


# ------------------------------------------------------------------------------------------ all strategies
@pytest.mark.parametrize("name", list(STRATEGIES))
def test_hooks_return_new_objects_and_never_mutate(name):
    hardware = TWO_GPUS
    device = "cpu" if name == "int8_dynamic" else "cuda"
    strategy = STRATEGIES[name](hardware, device)
    kwargs = base_kwargs()
    snapshot = dict(kwargs)
    if strategy.unavailable_reason(hardware) is None:
        new = strategy.adjust_load_kwargs(kwargs)
        assert new is not kwargs and kwargs == snapshot
    settings = EngineSettings()
    assert strategy.adjust_settings(settings) == settings or name == "dynamic_batching"
    assert settings == EngineSettings()


# ------------------------------------------------------------------------------------------ half precision
@pytest.mark.slow
def test_half_precision_loads_bf16_on_cpu_and_fp16_on_cuda(folder, batch):
    on_cpu = HalfPrecision(CPU, "cpu")
    model = load(folder, **on_cpu.adjust_load_kwargs({"dtype": torch.float32}))
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert (logits(model, batch) - logits(load(folder), batch)).abs().max() < 0.05
    assert HalfPrecision(ONE_GPU, "cuda").adjust_load_kwargs({"dtype": torch.float32})["dtype"] == torch.float16
    assert HalfPrecision(TWO_GPUS, "cuda", dtype="bf16").adjust_load_kwargs({})["dtype"] == torch.bfloat16


def test_half_precision_refuses_what_would_be_slow_or_unsupported():
    assert "no native bf16" in HalfPrecision(Hardware(cpu_bf16=False), "cpu").unavailable_reason(
        Hardware(cpu_bf16=False))
    t4_bf16 = HalfPrecision(ONE_GPU, "cuda", dtype="bf16")
    assert "Ampere" in t4_bf16.unavailable_reason(ONE_GPU)
    with pytest.raises(ValueError):
        HalfPrecision(CPU, "cpu", dtype="fp8")


# ------------------------------------------------------------------------------------------ autocast
def test_autocast_keeps_fp32_weights_and_computes_in_bf16(folder, batch):
    strategy = Autocast(CPU, "cpu")
    model = load(folder, **strategy.adjust_load_kwargs({"dtype": torch.bfloat16}))
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert not torch.is_autocast_enabled("cpu")
    with strategy.runtime_context():
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
        assert model.qa_outputs(torch.randn(2, model.config.hidden_size)).dtype == torch.bfloat16
        with torch.inference_mode():
            start = model(**batch).start_logits
    assert not torch.is_autocast_enabled("cpu")
    assert (start.float() - logits(model, batch)[0]).abs().max() < 0.05


def test_a_batch_s_context_stacks_only_the_strategies_that_have_one():
    """Decided once at load: nothing around a batch where no strategy has a runtime context, the one strategy's own
    where one has, and every one entered in profile order (and left in reverse) where several have."""
    entered = []

    class Marked(Strategy):
        def __init__(self, mark):
            super().__init__(CPU, "cpu")
            self.mark = mark

        def runtime_context(self):
            @contextlib.contextmanager
            def marked():
                entered.append(f"in {self.mark}")
                yield
                entered.append(f"out {self.mark}")
            return marked()

    plain = (FastAttention(CPU, "cpu"), Int8Dynamic(CPU, "cpu"))
    assert runtime_contexts(plain) is contextlib.nullcontext
    with runtime_contexts((*plain, Autocast(CPU, "cpu")))():
        assert torch.is_autocast_enabled("cpu")
    assert not torch.is_autocast_enabled("cpu")
    with runtime_contexts((Marked("a"), *plain, Marked("b")))():
        assert entered == ["in a", "in b"]
    assert entered == ["in a", "in b", "out b", "out a"]


# ------------------------------------------------------------------------------------------ checkpointing
def test_checkpointing_sets_the_flag(folder):
    model = load(folder)
    assert not is_checkpointing(model)
    assert GradientCheckpointing(CPU).transform(model) is model and is_checkpointing(model)


def test_live_tensor_peak_counts_saved_activations():
    x = torch.randn(256, 256, requires_grad=True)  # 256 KiB
    with LiveTensorPeak() as tracker:
        y = x.sin()  # keeps x for backward and allocates 256 KiB
        z = y.cos()  # keeps y, allocates another 256 KiB
        del y
    assert tracker.peak_bytes >= 2 * 256 * 1024
    assert tracker.current_bytes == 256 * 1024 * 2  # y is still alive inside z's graph, and z itself
    del z
    assert tracker.current_bytes == 0


@pytest.mark.slow
def test_training_step_readout_shows_the_saving_and_inference_shows_none(tokenizer):
    torch.manual_seed(0)
    model = LongformerForQuestionAnswering(tiny_config(len(tokenizer), layers=4, window=32)).eval()
    batch = qa_batch(tokenizer, length=256)
    readout = training_step_readout(model, batch, warmup=False)
    assert readout.measured_by == "cpu live tensor bytes"
    assert 0 < readout.peak_bytes_with < readout.peak_bytes_without
    assert readout.saved_fraction > 0.3  # four layers: all but about one layer's activations are recomputed
    assert readout.time_s_with > 0 and readout.time_s_without > 0
    assert not model.training and not is_checkpointing(model)  # left as it was
    assert all(p.grad is None for p in model.parameters())

    peaks = []
    for enabled in (False, True):
        if enabled:
            GradientCheckpointing(CPU).transform(model)
        with torch.inference_mode(), LiveTensorPeak() as tracker:
            model(**batch)
        peaks.append(tracker.peak_bytes)
    assert peaks[0] == peaks[1]  # at inference checkpointing changes nothing, and must not claim to


# ------------------------------------------------------------------------------------------ dynamic batching
def test_dynamic_batching_turns_on_adaptive_batching_only():
    settings = EngineSettings(batch_size=8, max_seq_len=1024)
    changed = DynamicBatching(CPU).adjust_settings(settings)
    assert changed.adaptive_batching and not settings.adaptive_batching
    assert changed.batch_size == 8 and changed.max_seq_len == 1024


# ------------------------------------------------------------------------------------------ int8 dynamic
@pytest.mark.slow
def test_int8_dynamic_quantizes_the_encoder_linears_quietly(folder, batch):
    reference = logits(load(folder), batch)
    model = load(folder)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = Int8Dynamic(CPU, "cpu").transform(model)
    assert not [w for w in caught if "torch.ao.quantization" in str(w.message)]
    query = model.longformer.encoder.layer[0].attention.self.query
    assert isinstance(query, torch.ao.nn.quantized.dynamic.Linear)
    assert type(model.qa_outputs) is nn.Linear
    assert not [m for m in model.longformer.modules() if type(m) is nn.Linear]
    assert (logits(model, batch) - reference).abs().max() < 0.05


def test_int8_dynamic_has_one_path_even_where_torchao_imports(monkeypatch, folder):
    model = load(folder)
    torchao, quantization = types.ModuleType("torchao"), types.ModuleType("torchao.quantization")
    quantization.quantize_ = lambda *args, **kwargs: pytest.fail("torchao's quantize_ was used")
    quantization.Int8DynamicActivationInt8WeightConfig = lambda *args, **kwargs: None
    torchao.quantization = quantization
    monkeypatch.setitem(sys.modules, "torchao", torchao)
    monkeypatch.setitem(sys.modules, "torchao.quantization", quantization)
    model = Int8Dynamic(CPU, "cpu").transform(model)
    assert isinstance(model.longformer.encoder.layer[0].output.dense, torch.ao.nn.quantized.dynamic.Linear)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads Linux's /proc/self/maps")
def test_int8_dynamic_lets_go_of_the_mapped_checkpoint(tmp_path, folder, batch):
    """The float pages read while quantizing must not stay resident through a mapping nothing needs."""
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(folder, checkpoint)
    weights = str((checkpoint / "model.safetensors").resolve())
    model = load(checkpoint)
    gc.collect()
    assert weights in Path("/proc/self/maps").read_text()  # transformers maps safetensors
    model = Int8Dynamic(CPU, "cpu").transform(model)
    gc.collect()
    assert weights not in Path("/proc/self/maps").read_text()
    assert torch.isfinite(logits(model, batch)).all()


# ------------------------------------------------------------------------------------------ bitsandbytes
@pytest.mark.slow
@pytest.mark.parametrize("strategy_class, module_name", [(Bnb8bit, "Linear8bitLt"), (Bnb4bit, "Linear4bit")])
def test_bitsandbytes_on_cpu_quantizes_all_but_the_head(folder, batch, strategy_class, module_name):
    strategy = strategy_class(CPU, "cpu")
    if strategy.unavailable_reason(CPU):
        pytest.skip(strategy.unavailable_reason(CPU))
    kwargs = strategy.adjust_load_kwargs({"dtype": torch.float32})
    assert kwargs["quantization_config"].llm_int8_skip_modules == ["qa_outputs"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "inputs will be cast to float16" from the 8-bit matmul
        model = load(folder, **kwargs)
        out = logits(model, batch)
    assert type(model.longformer.encoder.layer[0].intermediate.dense).__name__ == module_name
    assert type(model.qa_outputs) is nn.Linear
    assert torch.isfinite(out).all()
    assert (out - logits(load(folder), batch)).abs().max() < 0.1


def _fake_bitsandbytes(root: Path, *files: str) -> Path:
    for name in ("__init__.py", *files):
        path = root / "bitsandbytes" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("raise ImportError('the probe imported me')\n")
    return root


@pytest.mark.parametrize("files, on_cuda, reason", [
    (("backends/cpu/__init__.py", "libbitsandbytes_cpu.so"), False, None),
    (("backends/cpu/__init__.py", "libbitsandbytes_cuda128.so"), False, "no CPU kernels"),  # a CUDA-only build
    (("libbitsandbytes_cpu.so",), False, "no CPU kernels"),  # no CPU backend package
    ((), True, None),  # on CUDA, installed is enough
])
def test_bitsandbytes_is_probed_by_its_files_without_importing_it(tmp_path, monkeypatch, files, on_cuda, reason):
    """The page's pickers probe on every build: the probe reads the installed package's files and never imports it
    (the fake package here raises on import)."""
    monkeypatch.syspath_prepend(str(_fake_bitsandbytes(tmp_path, *files)))
    monkeypatch.delitem(sys.modules, "bitsandbytes", raising=False)
    found = bitsandbytes_missing_reason(CPU, on_cuda=on_cuda)
    assert found is None if reason is None else reason in found
    assert "bitsandbytes" not in sys.modules


def test_bitsandbytes_not_installed_is_said(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None)
    assert bitsandbytes_missing_reason(CPU, on_cuda=False) == "bitsandbytes is not installed"


# ------------------------------------------------------------------------------------------ device maps
def test_model_split_plans_a_balanced_map_over_both_gpus():
    strategy = ModelSplit(TWO_GPUS, "cuda", max_memory={0: 250 * 10**6, 1: 250 * 10**6})
    kwargs = strategy.adjust_load_kwargs({**base_kwargs(), "dtype": torch.float16})
    device_map = kwargs["device_map"]
    assert set(device_map.values()) == {0, 1}
    assert not [name for name in device_map if ".attention.self." in name]  # LongformerSelfAttention unsplit
    assert "max_memory" not in kwargs


def test_model_split_refuses_a_model_that_does_not_fit():
    strategy = ModelSplit(TWO_GPUS, "cuda", max_memory={0: 50 * 10**6, 1: 50 * 10**6})
    with pytest.raises(ProfileError, match="offload"):
        strategy.adjust_load_kwargs(base_kwargs())


def test_offload_spills_to_cpu_then_disk(tmp_path):
    strategy = Offload(ONE_GPU, "cuda", max_memory={0: "100MB", "cpu": "200MB"}, offload_folder=str(tmp_path))
    kwargs = strategy.adjust_load_kwargs({**base_kwargs(), "dtype": torch.float16})
    assert set(kwargs["device_map"].values()) == {0, "cpu", "disk"}
    assert kwargs["offload_folder"] == str(tmp_path)
    assert kwargs["device_map"]["longformer.embeddings"] == 0  # GPU first, in model order


def test_offload_with_8bit_keeps_offloaded_layers_fp32_and_plans_smaller_weights(tmp_path):
    strategy = Offload(ONE_GPU, "cuda", max_memory={0: "100MB", "cpu": "200MB"}, offload_folder=str(tmp_path))
    quantized = Bnb8bit(ONE_GPU, "cuda").adjust_load_kwargs(base_kwargs())
    kwargs = strategy.adjust_load_kwargs(quantized)
    assert kwargs["quantization_config"].llm_int8_enable_fp32_cpu_offload
    assert not quantized["quantization_config"].llm_int8_enable_fp32_cpu_offload  # input untouched
    fp32_map = strategy.adjust_load_kwargs(base_kwargs())["device_map"]
    on_gpu = lambda device_map: sum(1 for device in device_map.values() if device == 0)  # noqa: E731
    assert on_gpu(kwargs["device_map"]) > on_gpu(fp32_map)


# ------------------------------------------------------------------------------------------ replicas
@pytest.mark.slow
def test_replica_runner_matches_one_runner(folder, tokenizer):
    model = load(folder)
    batch = {key: torch.cat([value] * 3) for key, value in qa_batch(tokenizer).items()}  # (3, L)
    single = ModelRunner(model)(batch)
    runner = ReplicaRunner([ModelRunner(model), ModelRunner(copy.deepcopy(model))])
    start, end = runner(batch)
    assert start.shape == single[0].shape == (3, batch["input_ids"].shape[1])
    assert torch.allclose(start, single[0], atol=1e-5) and torch.allclose(end, single[1], atol=1e-5)
    assert len(runner.models) == 2


def test_replicas_need_two_gpus():
    assert Replicas(ONE_GPU, "cuda").unavailable_reason(ONE_GPU) == "needs 2+ CUDA GPUs, found 1"
    assert Replicas(TWO_GPUS, "cuda").unavailable_reason(TWO_GPUS) is None


# ------------------------------------------------------------------------------------------ mmap loading
def test_strategies_that_write_files_share_the_one_cache_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("LONGQA_CACHE", str(tmp_path))
    assert MmapLoading(CPU).cache_folder == tmp_path / "converted"
    assert Offload(ONE_GPU, "cuda").offload_folder == tmp_path / "offload"
    assert band_kernel.kernel_folder() == tmp_path / "kernels"


@pytest.mark.slow
def test_mmap_loading_converts_a_bin_checkpoint_once(tmp_path, batch, monkeypatch):
    bin_folder = tiny_checkpoint(safetensors=False)
    assert not has_safetensors(bin_folder)
    loads = []
    real_load = torch.load

    def spy(*args, **kwargs):
        loads.append(kwargs.get("weights_only"))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    strategy = MmapLoading(CPU, "cpu", cache_folder=str(tmp_path))
    converted = strategy.prepare_checkpoint(bin_folder)
    assert converted.parent == tmp_path and (converted / "model.safetensors").exists()
    assert loads == [True]  # weights_only: nothing in the pickle can run
    written = (converted / "model.safetensors").stat().st_mtime_ns
    assert strategy.prepare_checkpoint(bin_folder) == converted and loads == [True]
    assert (converted / "model.safetensors").stat().st_mtime_ns == written
    assert strategy.adjust_load_kwargs({})["use_safetensors"] is True
    model = load(converted, **strategy.adjust_load_kwargs({}))
    assert torch.equal(logits(model, batch), logits(load(tiny_checkpoint()), batch))
    assert strategy.prepare_checkpoint(tiny_checkpoint()) == tiny_checkpoint()  # already safetensors


# ------------------------------------------------------------------------------------------ fast attention
def test_fast_attention_swaps_every_layer_and_keeps_the_outputs(folder, batch):
    reference = logits(load(folder), batch)
    model = FastAttention(CPU).transform(load(folder))
    swapped = [m for m in model.modules() if isinstance(m, SlidingWindowSelfAttention)]
    assert len(swapped) == model.config.num_hidden_layers
    assert not any(module.training for module in swapped)  # a fresh module defaults to training: dropout on
    assert (logits(model, batch) - reference).abs().max() < 1e-4
