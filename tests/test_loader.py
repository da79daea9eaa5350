"""The loader: what a profile turns into, readouts, refusals, the offline fallback, and freeing on switch."""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
import weakref
from pathlib import Path

import huggingface_hub.constants
import pytest
import torch
from transformers import BertConfig, BertModel, LongformerModel

from longqa import loader, models
from longqa.loader import LoadedModel, load_model
from longqa_core.batching import BatchState, ModelRunner
from longqa_core.limits import PASSAGE_WINDOW_TOKENS, EngineSettings
from longqa_core.errors import ModelLoadError, ProfileError
from strategies import band_kernel
from strategies.auto import resolve_profile
from strategies.base import from_pretrained_kwargs
from strategies.hardware import Hardware, detect_hardware
from strategies.profiles import custom_profile
from strategies.replicas import ReplicaRunner
from tests.tiny import build_tokenizer, qa_batch, requires_cuda, tiny_checkpoint, tiny_config, tiny_encoder_checkpoint

CPU = Hardware(cpu_bf16=True)
CPU_PLAIN = Hardware(cpu_bf16=False)


@pytest.fixture(scope="module")
def folder():
    return tiny_checkpoint()


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def parameter_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters()) + \
        sum(b.numel() * b.element_size() for b in model.buffers())


@pytest.mark.slow
def test_a_quantized_model_is_ready_without_the_float_checkpoint_mapped(tmp_path, folder):
    """Loading ends with nothing left holding the fp32 file int8 quantization read (no collection by the caller)."""
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(folder, checkpoint)
    loaded = load_model(str(checkpoint), custom_profile(["int8_dynamic"]), hardware=CPU)
    assert str((checkpoint / "model.safetensors").resolve()) not in Path("/proc/self/maps").read_text()
    assert loaded.readout.strategies == ["int8_dynamic"]


@pytest.mark.slow
def test_baseline_load_and_readout(folder):
    progress = []
    loaded = load_model(str(folder), "baseline-fp32", hardware=CPU, on_progress=lambda f, m: progress.append((f, m)))
    assert isinstance(loaded, LoadedModel) and isinstance(loaded.runner, ModelRunner)
    assert loaded.source.kind == "local" and loaded.profile.name == "baseline-fp32"
    assert {p.dtype for p in loaded.model.parameters()} == {torch.float32} and not loaded.model.training
    readout = loaded.readout
    assert readout.weight_bytes_per_device == {"cpu": parameter_bytes(loaded.model)}
    assert readout.dtype == "float32" and readout.strategies == [] and readout.device_map is None
    assert readout.fallback_reason is None and readout.load_time_s > 0
    assert readout.host_peak_rss_bytes >= readout.host_rss_before_bytes * 0.5 > 0
    assert set(readout.step_time_s) == {"download", "load", "strategies"}
    assert loaded.settings == EngineSettings(batch_size=1, passage_window_tokens=PASSAGE_WINDOW_TOKENS)
    resolved = loaded.settings.resolved(loaded.tokenizer)  # sized where the model's windows are longer
    assert resolved.passage_window_tokens == (PASSAGE_WINDOW_TOKENS if resolved.max_seq_len > PASSAGE_WINDOW_TOKENS
                                              else None)
    assert loaded.batch_state == BatchState(size=1, window_tokens=resolved.max_seq_len)  # what a window's seconds are
    fractions = [fraction for fraction, _ in progress]
    assert fractions == sorted(fractions) and fractions[0] == 0.0 and fractions[-1] == 1.0
    start, end = loaded.runner(qa_batch(loaded.tokenizer))
    assert start.dtype == torch.float32 and start.shape == end.shape


@pytest.mark.slow
@pytest.mark.requires_cpu_bf16  # the stack loads (prepacks bf16 weights with oneDNN) only on such a CPU
def test_cpu_profile_uses_bf16_where_the_cpu_has_it(folder):
    loaded = load_model(str(folder), "cpu", hardware=CPU)
    assert loaded.readout.strategies == ["half_precision", "fast_attention", "prepacked_linear"]
    assert loaded.readout.dtype == "bfloat16"
    assert loaded.readout.notes == [band_kernel.status(torch.bfloat16)]  # whether the band kernel runs, or why not
    assert loaded.readout.weight_bytes_per_device["cpu"] == parameter_bytes(loaded.model)
    baseline = load_model(str(folder), "baseline-fp32", hardware=CPU)
    assert loaded.readout.weight_bytes_per_device["cpu"] * 2 == baseline.readout.weight_bytes_per_device["cpu"]


@pytest.mark.slow
def test_cpu_profile_falls_back_to_int8_without_bf16(folder):
    loaded = load_model(str(folder), "cpu", hardware=CPU_PLAIN)
    assert loaded.readout.strategies == ["int8_dynamic", "fast_attention", "prepacked_linear"]
    assert loaded.readout.dtype == "float32 + int8 Linear (dynamic)"
    assert loaded.readout.notes == [band_kernel.status(torch.float32)]  # the int8 stack's attention is fp32
    query = loaded.model.longformer.encoder.layer[0].attention.self.query
    assert isinstance(query, torch.ao.nn.quantized.dynamic.Linear)
    start, _ = loaded.runner(qa_batch(loaded.tokenizer))
    assert torch.isfinite(start).all()


@pytest.mark.parametrize("hardware", [CPU, CPU_PLAIN], ids=["bf16", "avx2"])
def test_auto_resolves_to_a_concrete_profile(hardware):
    assert resolve_profile("auto", hardware).name == "cpu"


@pytest.mark.slow
def test_auto_loads_the_concrete_profile_on_this_machine(folder):
    # the load runs here: this machine's own kind (a bf16 stack would not run on an AVX2-only CPU)
    assert load_model(str(folder), "auto", hardware=detect_hardware()).profile.name == "cpu"


@pytest.mark.slow
def test_strategies_shape_settings_and_runtime(folder):
    profile = custom_profile(["autocast", "fast_attention", "dynamic_batching"], batch_size=4, max_seq_len=256)
    loaded = load_model(str(folder), profile, hardware=CPU)
    assert loaded.settings.adaptive_batching and loaded.settings.batch_size == 4
    assert loaded.settings.max_seq_len == 256 and loaded.batch_state.size == 4
    assert loaded.readout.strategies == ["autocast", "fast_attention", "dynamic_batching"]
    with loaded.runner.context_factory():
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16


def test_unavailable_profile_fails_before_loading_anything(folder, monkeypatch):
    calls = []
    monkeypatch.setattr(loader, "_from_pretrained", lambda *a, **k: calls.append(a))
    with pytest.raises(ProfileError, match="t4-16gb.*needs a CUDA GPU"):
        load_model(str(folder), "t4-16gb", hardware=CPU)
    with pytest.raises(ProfileError, match="2\\+ CUDA GPUs"):
        load_model(str(folder), custom_profile(["model_split"]), hardware=CPU)
    assert calls == []


def test_from_pretrained_kwargs_always_dtype_never_remote_code(folder):
    from strategies.half_precision import HalfPrecision

    config = tiny_config(600)
    kwargs = from_pretrained_kwargs(config, [HalfPrecision(CPU, "cpu")], "cpu", use_safetensors=True)
    assert kwargs["dtype"] == torch.bfloat16 and "torch_dtype" not in kwargs
    assert kwargs["trust_remote_code"] is False and kwargs["use_safetensors"] is True
    assert "device_map" not in kwargs
    assert from_pretrained_kwargs(config, [], "cuda")["device_map"] == {"": 0}
    assert "use_safetensors" not in from_pretrained_kwargs(config, [], "cpu")


@pytest.mark.slow
def test_the_loader_loads_with_the_keyword_arguments_the_planner_predicts_from(monkeypatch, folder):
    import transformers

    from strategies import memory_planner
    from strategies.profiles import build_strategies, device_for

    passed = {}
    real = transformers.LongformerForQuestionAnswering.from_pretrained

    def spy(path, **kwargs):
        passed.update(kwargs)
        return real(path, **kwargs)

    monkeypatch.setattr(transformers.LongformerForQuestionAnswering, "from_pretrained", spy)
    profile = custom_profile(["half_precision", "fast_attention"])
    load_model(str(folder), profile, hardware=CPU)
    planned = from_pretrained_kwargs(passed["config"], build_strategies(profile, CPU), device_for(profile, CPU))
    passed.pop("output_loading_info")
    assert passed == {**planned, "use_safetensors": True}
    plan = memory_planner.plan_profile(passed["config"], profile, CPU, runtime_bytes=0)
    assert plan.precision == "bf16"


# ------------------------------------------------------------------------------------------ refusals
def test_rejects_a_longformer_that_is_not_a_qa_model():
    with pytest.raises(ModelLoadError, match="not a question-answering checkpoint.*LongformerModel"):
        load_model(str(tiny_encoder_checkpoint()), "baseline-fp32", hardware=CPU)


@pytest.mark.slow
def test_rejects_a_checkpoint_without_a_qa_head(tmp_path):
    tokenizer = build_tokenizer(tmp_path)
    config = tiny_config(len(tokenizer))
    LongformerModel(config).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    del saved["architectures"]  # says nothing about itself: only the missing head gives it away
    (tmp_path / "config.json").write_text(json.dumps(saved))
    with pytest.raises(ModelLoadError, match="no trained question-answering head"):
        load_model(str(tmp_path), "baseline-fp32", hardware=CPU)


def test_rejects_other_model_types(tmp_path):
    BertModel(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64)).save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="is a bert model"):
        load_model(str(tmp_path), "baseline-fp32", hardware=CPU)


def test_unknown_references_are_load_errors():
    with pytest.raises(ModelLoadError):
        load_model("arch:huge", "baseline-fp32", hardware=CPU)
    with pytest.raises(ModelLoadError):
        load_model("./no/such/folder", "baseline-fp32", hardware=CPU)


# ------------------------------------------------------------------------------------------ offline fallback
def test_offline_hub_model_is_a_load_error_naming_it(offline):
    with pytest.raises(ModelLoadError, match="longqa-tests/no-such-model.*HF_HUB_OFFLINE") as refused:
        load_model("longqa-tests/no-such-model", "baseline-fp32", hardware=CPU)
    assert "not in the local cache and downloads are off" in str(refused.value)
    assert "Error:" not in str(refused.value)  # the page's banner shows it: no library exception's own words


@pytest.mark.slow
def test_offline_hub_model_falls_back_to_the_demo(offline, monkeypatch, folder):
    monkeypatch.setattr(models, "DEMO_MODEL_DIR", folder)  # the real demo model may still be training
    loaded = load_model("longqa-tests/no-such-model", "baseline-fp32", hardware=CPU, fallback_to_demo=True)
    assert loaded.source.kind == "demo" and loaded.model_ref == "demo"
    assert "longqa-tests/no-such-model" in loaded.readout.fallback_reason
    assert "demo" in loaded.readout.fallback_reason


def test_fallback_does_not_hide_a_bad_checkpoint(monkeypatch, folder):
    monkeypatch.setattr(models, "DEMO_MODEL_DIR", folder)
    with pytest.raises(ModelLoadError):
        load_model(str(tiny_encoder_checkpoint()), "baseline-fp32", hardware=CPU, fallback_to_demo=True)


def test_demo_without_weights_says_so(monkeypatch, tmp_path):
    monkeypatch.setattr(models, "DEMO_MODEL_DIR", tmp_path)
    with pytest.raises(ModelLoadError, match="demo model has no weights yet"):
        load_model("demo", "baseline-fp32", hardware=CPU)


# ------------------------------------------------------------------------------------------ architectures
@pytest.mark.slow
@pytest.mark.requires_cpu_bf16  # the cpu profile's bf16 stack is what it loads first
def test_architecture_refs_build_random_weights_once(monkeypatch, tmp_path, folder):
    monkeypatch.setenv("LONGQA_CACHE", str(tmp_path))
    monkeypatch.setattr(models, "DEMO_MODEL_DIR", folder)  # its tokenizer is used for arch: models
    monkeypatch.setitem(models.ARCHITECTURES, "arch:base", dict(hidden_size=32, num_hidden_layers=1,
                                                               num_attention_heads=2, intermediate_size=64))
    first = load_model("arch:base", "cpu", hardware=CPU)
    weights = tmp_path / "architectures" / "arch-base" / "model.safetensors"
    written = weights.stat().st_mtime_ns
    assert first.source.kind == "architecture" and first.model.config.attention_window == [512]
    assert first.readout.dtype == "bfloat16"
    second = load_model("arch:base", "baseline-fp32", hardware=CPU)
    assert weights.stat().st_mtime_ns == written
    assert torch.equal(second.model.qa_outputs.weight.bfloat16(), first.model.qa_outputs.weight)


# ------------------------------------------------------------------------------------------ mmap loading
@pytest.mark.slow
def test_mmap_profile_loads_a_bin_checkpoint_through_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("LONGQA_CACHE", str(tmp_path))
    loaded = load_model(str(tiny_checkpoint(safetensors=False)), custom_profile(["mmap_loading"]), hardware=CPU)
    assert len(list((tmp_path / "converted").glob("*/model.safetensors"))) == 1
    reference = load_model(str(tiny_checkpoint()), "baseline-fp32", hardware=CPU)
    batch = qa_batch(loaded.tokenizer)
    assert torch.equal(loaded.runner(batch)[0], reference.runner(batch)[0])
    assert loaded.readout.host_peak_rss_bytes > 0


# ------------------------------------------------------------------------------------------ switching
@pytest.mark.slow
def test_unload_releases_the_model_tensors_on_cpu(folder):
    loaded = load_model(str(folder), "baseline-fp32", hardware=CPU)
    parameter = weakref.ref(loaded.model.longformer.encoder.layer[0].attention.self.query.weight)
    model = weakref.ref(loaded.model)
    loaded.unload()
    gc.collect()
    assert loaded.model is None and loaded.runner is None
    assert model() is None and parameter() is None


@pytest.mark.parametrize("profile", ["cpu", "custom-fast"])
@pytest.mark.slow
def test_unload_releases_transformed_models_too(folder, profile):
    profile = custom_profile(["fast_attention", "dynamic_batching"]) if profile == "custom-fast" else profile
    loaded = load_model(str(folder), profile, hardware=detect_hardware())  # this host's own stack runs here
    parameter = weakref.ref(next(loaded.model.parameters()))
    loaded.runner(qa_batch(loaded.tokenizer))
    loaded.unload()
    gc.collect()
    assert parameter() is None


@requires_cuda
def test_cuda_memory_returns_after_unload(folder):
    gc.collect()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated()
    loaded = load_model(str(folder), "baseline-fp32")
    loaded.runner(qa_batch(loaded.tokenizer))
    during = torch.cuda.memory_allocated()
    assert during > before
    loaded.unload()
    after = torch.cuda.memory_allocated()
    assert abs(after - before) <= 0.05 * max(before, during - before)


@requires_cuda
def test_cuda_half_precision_loads_fp16_on_the_gpu(folder):
    loaded = load_model(str(folder), custom_profile(["half_precision"], device="cuda"))
    assert {p.dtype for p in loaded.model.parameters()} == {torch.float16}
    assert set(loaded.readout.weight_bytes_per_device) == {"cuda:0"}
    start, _ = loaded.runner(qa_batch(loaded.tokenizer))
    assert start.device.type == "cpu" and torch.isfinite(start).all()
    loaded.unload()


@requires_cuda
def test_replicas_on_every_gpu(folder):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    loaded = load_model(str(folder), custom_profile(["replicas"], device="cuda"))
    assert isinstance(loaded.runner, ReplicaRunner) and len(loaded.runner.models) == torch.cuda.device_count()
    batch = {k: torch.cat([v] * 4) for k, v in qa_batch(loaded.tokenizer).items()}
    assert loaded.runner(batch)[0].shape[0] == 4
    loaded.unload()


# ------------------------------------------------------------------------------------------ what a checkpoint may do
class _Payload:
    """Unpickling this runs a shell command: what a hostile pytorch_model.bin can hold."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


def _copy_checkpoint(source, target):
    import shutil

    shutil.copytree(source, target)
    return target


@pytest.mark.slow
def test_a_pickled_checkpoint_that_would_run_code_is_refused_and_the_code_never_runs(tmp_path):
    from longqa.session import Session

    marker = tmp_path / "code-ran"
    folder = _copy_checkpoint(tiny_checkpoint(safetensors=False), tmp_path / "hostile")
    state = torch.load(folder / "pytorch_model.bin", weights_only=True)
    torch.save({**state, "payload": _Payload(marker)}, folder / "pytorch_model.bin")
    torch.load(folder / "pytorch_model.bin", weights_only=False)
    assert marker.exists(), "the payload must be live for this test to mean anything"
    marker.unlink()
    for profile in ("baseline-fp32", custom_profile(["mmap_loading"])):  # transformers' own load, and our conversion
        with pytest.raises(ModelLoadError, match="hostile"):
            Session().load(str(folder), profile)
        assert not marker.exists()


@pytest.mark.slow
def test_safetensors_are_loaded_when_a_folder_also_has_pickled_weights(tmp_path):
    folder = _copy_checkpoint(tiny_checkpoint(), tmp_path / "both")
    safe = load_model(str(folder), "baseline-fp32", hardware=CPU).model.qa_outputs.weight.clone()
    state = {key: torch.zeros_like(value) for key, value in safe_state(folder).items()}
    torch.save(state, folder / "pytorch_model.bin")  # different weights: whichever file is read shows
    for profile in ("baseline-fp32", custom_profile(["mmap_loading"])):
        loaded = load_model(str(folder), profile, hardware=CPU)
        assert torch.equal(loaded.model.qa_outputs.weight, safe) and safe.abs().sum() > 0


def safe_state(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


@pytest.mark.slow
def test_code_shipped_with_a_checkpoint_never_runs(tmp_path):
    marker = tmp_path / "code-ran"
    folder = _copy_checkpoint(tiny_checkpoint(), tmp_path / "with-code")
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "configuration_custom.CustomConfig",
                          "AutoModelForQuestionAnswering": "modeling_custom.CustomModel"}
    (folder / "config.json").write_text(json.dumps(config))
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    tokenizer_config["auto_map"] = {"AutoTokenizer": ["tokenization_custom.CustomTokenizer", None]}
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    code = (f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n"
            "from transformers import LongformerConfig, LongformerForQuestionAnswering, PreTrainedTokenizerFast\n"
            "CustomConfig, CustomModel, CustomTokenizer = LongformerConfig, LongformerForQuestionAnswering, "
            "PreTrainedTokenizerFast\n")
    for name in ("configuration_custom.py", "modeling_custom.py", "tokenization_custom.py"):
        (folder / name).write_text(code)
    loaded = load_model(str(folder), "baseline-fp32", hardware=CPU)
    assert type(loaded.model).__name__ == "LongformerForQuestionAnswering"
    assert type(loaded.model).__module__.startswith("transformers.")
    assert not marker.exists()


@pytest.mark.slow
@pytest.mark.parametrize("name, layer_type", [("bnb_4bit", "Linear4bit"), ("bnb_8bit", "Linear8bitLt")])
def test_bitsandbytes_on_a_cpu_only_machine_really_quantizes(name, layer_type):
    """The custom profile's bitsandbytes strategies are applied on CPU (bitsandbytes 0.50's CPU kernels), not just
    listed in the readout: every encoder Linear is quantized, qa_outputs stays float, and the model still answers."""
    from longqa.models import DEMO_MODEL_DIR
    from longqa_core.files import read_document
    from longqa_core.answering import answer

    example = json.loads((DEMO_MODEL_DIR.parent / "samples" / "examples.json").read_text())[0]
    loaded = load_model("demo", custom_profile([name]), hardware=CPU_PLAIN)
    assert loaded.readout.strategies == [name] and loaded.runner.devices == [torch.device("cpu")]
    layers = {module_name: type(module).__name__ for module_name, module in loaded.model.named_modules()
              if isinstance(module, torch.nn.Linear)}
    assert type(loaded.model.qa_outputs) is torch.nn.Linear
    assert {kind for module_name, kind in layers.items() if module_name != "qa_outputs"} == {layer_type}
    document = read_document(DEMO_MODEL_DIR.parent / "samples" / example["file"])
    result = answer(loaded.runner, loaded.tokenizer, [document], example["question"], loaded.settings)
    assert result.answers[0].text.strip() == example["answer"]


# A process's start as `python app.py` makes it, offline: the loader imported, the demo model loaded in place of the
# Hub default, then every strategy's availability probed as the page's pickers do (without importing bitsandbytes),
# then bitsandbytes imported, as loading a profile with a bitsandbytes strategy does.
QUIET_START = """
import sys
from longqa.loader import load_model
from strategies.bitsandbytes_quantization import bitsandbytes_missing_reason
from strategies.hardware import detect_hardware

loaded = load_model("allenai/longformer-large-4096-finetuned-triviaqa", "cpu", fallback_to_demo=True)
reason = bitsandbytes_missing_reason(detect_hardware(), on_cuda=False)
probed_without_importing = "bitsandbytes" not in sys.modules
import bitsandbytes
print(loaded.model_ref, reason, probed_without_importing)
"""


@pytest.mark.slow
def test_an_offline_start_writes_nothing_to_stderr():
    """Issue 49 item 12: no "Loading weights 0/73" progress bar, and none of bitsandbytes' warning that a Hub kernel
    it would like is not cached ("Failed to load CPU gemm_4bit_forward … pip install kernels"), which it gives at
    import on a CPU with AVX-512 BF16; nothing else either."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", QUIET_START], capture_output=True, text=True, env=env,
                          cwd=Path(__file__).resolve().parents[1], timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["demo", "None", "True"]  # the demo stood in; bitsandbytes was probed, then imported
    assert proc.stderr == ""
