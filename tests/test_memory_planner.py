"""The memory planner: exact weight counts, the activation formula against measured peaks, auto's choice."""

from __future__ import annotations

import json

import pytest
import torch

from longqa.models import architecture_config
from longqa_core.errors import InputError
from scripts.calibrate_planner import build, config_for, fit_cpu_rss, inputs
from strategies import band_kernel, memory_planner
from strategies.auto import resolve_auto
from strategies.device_map import empty_model
from strategies.gradient_checkpointing import LiveTensorPeak
from strategies.hardware import Gpu, Hardware
from strategies.memory_planner import ModelShape, activation_bytes, parameter_count, plan_profile, windows_needed
from strategies.profiles import PROFILES, custom_profile

GB = 10**9
needs_a_compiler = pytest.mark.skipif(not band_kernel.is_buildable(torch.float32),
                                      reason="no C compiler to build the band kernels, or LONGQA_BAND_KERNEL=0")
needs_band_kernel = pytest.mark.skipif(band_kernel.kernel(torch.float32) is None or band_kernel.kernel() is None,
                                       reason=f"{band_kernel.status(torch.float32)}; {band_kernel.status()}")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["arch:base", "arch:large"])
def test_parameter_count_is_exact_on_meta_models(name):
    config = architecture_config(name)
    model = empty_model(config)
    assert parameter_count(ModelShape.from_config(config)) == sum(p.numel() for p in model.parameters())


def test_weight_bytes_follow_precision():
    config = architecture_config("arch:base")
    params = parameter_count(ModelShape.from_config(config))
    cpu = Hardware(cpu_bf16=True)
    assert plan_profile(config, PROFILES["baseline-fp32"], cpu, runtime_bytes=0).predicted_weight_bytes == 4 * params
    assert plan_profile(config, PROFILES["cpu"], cpu, runtime_bytes=0).predicted_weight_bytes == 2 * params


@needs_a_compiler
def test_the_band_kernels_formula_applies_on_cpu_only():
    config = architecture_config("arch:base")
    plan = lambda profile, hardware: plan_profile(config, PROFILES[profile], hardware, runtime_bytes=0)  # noqa: E731
    assert plan("cpu", Hardware(cpu_bf16=True)).attention == "fast-kernel"
    assert plan("cpu", Hardware(cpu_bf16=False)).attention == "fast-kernel"  # int8 Linear layers, fp32 kernel
    fp32_fast = custom_profile(["fast_attention"], device="cpu")
    assert plan_profile(config, fp32_fast, Hardware(cpu_bf16=False), runtime_bytes=0).attention == "fast-kernel"
    assert plan("baseline-fp32", Hardware(cpu_bf16=True)).attention == "eager"
    gpu = Hardware(gpus=(Gpu(index=0, name="H200", total_bytes=141 * GB, compute_capability=(9, 0)),),
                   cuda_available=True, cpu_bf16=True)
    assert plan("datacenter", gpu).attention == "fast"


def test_without_a_kernel_to_run_the_planner_predicts_sdpas_attention(monkeypatch):
    """Turned off, or no compiler and nothing built: the fast attention keeps SDPA, and so does the prediction."""
    config = architecture_config("arch:base")
    monkeypatch.setenv(band_kernel.DISABLE_VARIABLE, "0")
    assert plan_profile(config, PROFILES["cpu"], Hardware(cpu_bf16=True), runtime_bytes=0).attention == "fast"
    monkeypatch.delenv(band_kernel.DISABLE_VARIABLE)
    monkeypatch.setenv("CC", "no-such-cc-here")
    monkeypatch.setattr(band_kernel, "kernel_folder", lambda: band_kernel.Path("/nonexistent/kernels"))
    assert plan_profile(config, PROFILES["cpu"], Hardware(cpu_bf16=False), runtime_bytes=0).attention == "fast"


def test_precision_is_read_from_the_loaders_keyword_arguments():
    """A strategy still using the deprecated `torch_dtype=` loads bf16 and is predicted as bf16."""
    from strategies.base import Strategy, from_pretrained_kwargs

    class OldSpelling(Strategy):
        def adjust_load_kwargs(self, kwargs):
            return {**kwargs, "torch_dtype": torch.bfloat16}

    kwargs = from_pretrained_kwargs(architecture_config("arch:base"), [OldSpelling()], "cpu")
    assert kwargs["dtype"] == torch.bfloat16
    assert memory_planner.precision_of(kwargs, ()).kind == "bf16"


@pytest.mark.parametrize("attention, dtype", [("eager", torch.float32), ("eager", torch.bfloat16),
                                              ("fast", torch.float32), ("fast", torch.bfloat16),
                                              pytest.param("fast-kernel", torch.float32, marks=needs_band_kernel),
                                              pytest.param("fast-kernel", torch.bfloat16, marks=needs_band_kernel)])
@pytest.mark.slow
@pytest.mark.parametrize("tokens, batch", [(512, 1), (1024, 2), (700, 1)])
def test_activation_formula_matches_measured_peaks_of_a_small_model(attention, dtype, tokens, batch):
    config = config_for(hidden=128, heads=4, ffn=512, window=128)
    model = build(config, dtype, attention)
    tracker = LiveTensorPeak()
    with torch.inference_mode(), tracker:
        model(**inputs(tokens, batch))
    predicted = activation_bytes(ModelShape.from_config(config), tokens=tokens, batch=batch,
                                 compute_bytes=torch.finfo(dtype).bits // 8, attention=attention)
    assert abs(predicted - tracker.peak_bytes) <= 0.2 * tracker.peak_bytes


@needs_a_compiler
@pytest.mark.parametrize("cpu_bf16, cpu_group", [(True, "bf16-fast-kernel"), (False, "int8-fast-kernel")])
def test_cpu_resident_memory_fit_recovers_a_known_overhead(tmp_path, cpu_bf16, cpu_group):
    """The rows are grouped by the machine the results.json records, whatever CPU runs the fit."""
    config, cpu = architecture_config("arch:base"), Hardware(cpu_bf16=cpu_bf16)
    rows, truth = [], {"baseline-fp32": (1.25, 40e6), "cpu": (1.5, 90e6)}
    for profile, (factor, constant) in truth.items():
        for tokens, batch in [(512, 1), (2048, 1), (1024, 2)]:
            plan = plan_profile(config, PROFILES[profile], cpu, tokens=tokens, batch=batch, runtime_bytes=300e6)
            peak = 300e6 + plan.predicted_weight_bytes + factor * plan.activation_bytes + constant
            rows.append({"kind": "inference", "error": None, "devices": ["cpu"], "model": "arch:base",
                         "profile": profile, "tokens": tokens, "batch": batch, "runtime_rss_bytes": 300e6,
                         "peak_bytes": peak})
    machine = {"cpu_bf16": cpu_bf16, "gpus": []}
    (tmp_path / "results.json").write_text(json.dumps({"machine": machine, "rows": rows}))
    fits = fit_cpu_rss([tmp_path])
    assert set(fits) == {"fp32-eager", cpu_group, "default"}
    for group, (factor, constant) in zip(("fp32-eager", cpu_group), truth.values()):
        assert fits[group]["activation_factor"] == pytest.approx(factor, rel=1e-3)
        assert fits[group]["constant_bytes"] == pytest.approx(constant, rel=1e-3)
        assert fits[group]["max_abs_error_pct"] < 0.1
    assert fits["default"]["samples"] == 6


def test_a_bench_without_its_machine_cannot_be_fitted(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(InputError, match="does not record the machine"):
        fit_cpu_rss([tmp_path])


def test_a_calibration_for_other_features_is_refused(tmp_path):
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"feature_names": ["hidden"], "activations": {}}))
    with pytest.raises(ValueError, match="calibrate_planner"):
        memory_planner.load_calibration(path)


def test_windows_needed_grows_with_the_document():
    assert windows_needed(1000, 4096, 128) == 1
    assert windows_needed(4096, 4096, 128) == 2
    assert windows_needed(40_000, 4096, 128) == 11


def gpu_box(total_gb: float) -> Hardware:
    return Hardware(gpus=(Gpu(0, f"GPU {total_gb} GB", int(total_gb * GB), (8, 6)),), cuda_available=True)


@pytest.mark.parametrize("total_gb", [8, 16, 24, 80])
@pytest.mark.parametrize("document_tokens", [4096, 40_000])
def test_auto_picks_the_profile_named_for_the_card_where_it_fits(total_gb, document_tokens):
    config = architecture_config("arch:large")
    hardware = gpu_box(total_gb)
    chosen = resolve_auto(hardware, config, document_tokens=document_tokens)
    plan = plan_profile(config, chosen, hardware, document_tokens=document_tokens)
    assert plan.fits(hardware)
    assert max(plan.device_need_bytes.values()) <= 0.9 * total_gb * GB
    # Longformer-large fits each card's own profile for these documents; the GPU profiles are not measured apart
    assert chosen.name == {8: "consumer-gpu", 16: "t4-16gb", 24: "rtx-3090-24gb", 80: "datacenter"}[total_gb]


def test_auto_steps_down_when_the_cards_own_does_not_fit():
    config = architecture_config("arch:large")
    tiny_card = gpu_box(3)
    worst_case = resolve_auto(tiny_card, config)  # no document: a full batch of 32 windows must fit
    assert worst_case.name != "datacenter"
    assert plan_profile(config, worst_case, tiny_card).fits(tiny_card)
