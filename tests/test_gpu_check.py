"""scripts/gpu_check.sh: its profiles all run and are planned on one (simulated) H200, its dry mode runs every
step end to end on CPU with the demo model, and it stops at once, naming the interpreter, when its PYTHON has no
torch."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from longqa.bench import report as bench_report, runner as bench
from longqa.bench.worker import parse_profile
from longqa_core.errors import ProfileError
from strategies.hardware import Gpu, Hardware
from strategies.profiles import build_strategies

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SCRIPT = PROJECT_ROOT / "scripts" / "gpu_check.sh"
H200 = Hardware(gpus=(Gpu(0, "NVIDIA H200", 143771 * 1024**2, (9, 0)),), cuda_available=True)
NEEDS_CUDA = {"rtx-3090-24gb", "t4-16gb", "consumer-gpu", "datacenter", "custom:offload"}
DRY_PROFILES = ["baseline-fp32", "t4-16gb"]  # the dry run's: one measured, one skipped for want of CUDA


def script_profiles() -> list[str]:
    """The --profiles list the script passes to the bench, read from its PROFILES= / PROFILES+= lines."""
    parts = re.findall(r'^PROFILES\+?="([^"]*)"', SCRIPT.read_text(), flags=re.MULTILINE)
    return [name for name in ",".join(parts).split(",") if name]


def test_the_gpu_check_covers_every_one_gpu_profile_and_stack():
    profiles = script_profiles()
    assert {"baseline-fp32", "custom:half_precision", "rtx-3090-24gb", "t4-16gb", "consumer-gpu", "datacenter",
            "custom:half_precision+bnb_4bit", "custom:offload"} <= set(profiles)
    for fast in [name for name in profiles if "+fast_attention" in name or name == "custom:fast_attention"]:
        eager = fast.replace("+fast_attention", "").replace("custom:fast_attention", "baseline-fp32")
        assert eager in profiles, f"{fast} has no eager row in the same dtype"
    assert "custom:half_precision(dtype=bf16)+fast_attention" in profiles  # the fast-attention targets are in bf16


def test_every_gpu_check_profile_runs_on_one_h200():
    chosen, skipped = bench.choose_profiles(",".join(script_profiles()), H200)
    assert skipped == [] and chosen == script_profiles()


@pytest.mark.parametrize("cpu_bf16", [False, True])
def test_on_a_cpu_the_gpu_check_builds_the_cpu_profiles_and_lists_the_cuda_ones_as_skipped(cpu_bf16):
    """What the dry run would measure of the whole list on either CPU kind (it measures one profile and one skipped,
    below): every profile chosen or skipped with its reason, the CUDA ones skipped, the fp32 ones chosen and built."""
    hardware = Hardware(cpu_bf16=cpu_bf16)
    chosen, skipped = bench.choose_profiles(",".join(script_profiles()), hardware)
    assert sorted(chosen + [s.profile for s in skipped]) == sorted(script_profiles())
    assert NEEDS_CUDA <= {s.profile for s in skipped} and all(s.reason for s in skipped)
    assert {"baseline-fp32", "custom:fast_attention"} <= set(chosen)
    for name in chosen:
        profile = parse_profile(name)
        assert [strategy.name for strategy in build_strategies(profile, hardware)] == list(profile.strategies), name


@pytest.mark.parametrize("batch", [1, 8])
def test_the_planner_predicts_every_gpu_check_row_on_an_h200(batch):
    for profile in script_profiles():
        row = {"model": "arch:large", "profile": profile, "tokens": 4096, "batch": batch}
        plan = bench_report.inference_plan(row, H200)
        assert 0.2e9 < plan.peak_bytes < H200.gpus[0].total_bytes, profile
        assert plan.fits(H200), profile


def test_a_custom_stack_takes_strategy_options():
    profile = parse_profile("custom:half_precision(dtype=bf16)+fast_attention")
    assert profile.strategies == ("half_precision", "fast_attention")
    assert profile.options == {"half_precision": {"dtype": "bf16"}}
    assert parse_profile("custom:half_precision").options == {}
    with pytest.raises(ProfileError, match="key=value"):
        parse_profile("custom:half_precision(bf16)")
    with pytest.raises(ProfileError, match="Bad options"):
        build_strategies(parse_profile("custom:half_precision(dtype=fp8)"), H200)


def test_dry_mode_refuses_to_write_the_gpu_results():
    done = subprocess.run([str(SCRIPT), "--dry", "--out", "docs/results/bench-gpu"], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "never writes docs/results/bench-gpu" in done.stderr


def test_without_torch_it_stops_before_any_step_and_names_the_interpreter(tmp_path):
    # A bare venv (no pip, no packages, well under a second) is a python without torch, like the python3 on PATH
    # when the tests run from a virtual environment that is not activated. Named relative to the caller's folder:
    # the script resolves it there, before it moves to the project root.
    venv.create(tmp_path / "bare", with_pip=False)
    bare = tmp_path / "bare" / "bin" / "python"
    out = tmp_path / "out"
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}  # which might reach a torch
    done = subprocess.run([str(SCRIPT), "--dry", "--out", str(out)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=30, env={**env, "PYTHON": "bare/bin/python", "TMPDIR": str(tmp_path)})
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{bare} (Python {platform.python_version()}) cannot import torch" in done.stderr
    assert "PYTHON=" in done.stderr  # and how to choose another
    assert not out.exists() and done.stdout == ""  # no step ran, nothing was written


def test_a_python_that_is_not_there_is_bad_usage(tmp_path):
    done = subprocess.run([str(SCRIPT), "--dry", "--out", str(tmp_path / "out")], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PYTHON": str(tmp_path / "no-python")})
    assert done.returncode == 2 and f"PYTHON={tmp_path / 'no-python'}: no such interpreter" in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_dry_mode_runs_every_step_on_cpu(tmp_path):
    """Every step end to end on one profile measured and one skipped: a bench row costs a worker process, and the
    other profiles' rows run the same worker (the profiles themselves: the tests above and tests/test_bench.py)."""
    gpu_results = PROJECT_ROOT / "docs" / "results" / "bench-gpu" / "results.json"
    before = gpu_results.stat().st_mtime if gpu_results.exists() else None
    out = tmp_path / "dry"
    # PYTHON is this interpreter, the one with torch: python3 on PATH need not be (a virtual environment run as
    # .venv/bin/python -m pytest, not activated, leaves PATH as it was).
    done = subprocess.run([str(SCRIPT), "--dry", "--out", str(out)], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "TMPDIR": str(tmp_path), "PYTHON": sys.executable,
                                            "GPU_CHECK_PROFILES": ",".join(DRY_PROFILES), "TOKENS": "256"})
    assert done.returncode == 0, done.stdout[-4000:]
    log = (out / "gpu_check.log").read_text()
    assert f"python: {sys.executable} (Python {platform.python_version()};" in log
    assert "tests rc=0, bench rc=0" in log and re.search(r"\d+ skipped", log)  # the CUDA-gated tests, skipped here
    results = json.loads((out / "results.json").read_text())
    assert results["model"] == "demo" and results["settings"]["batch"] == [1, 8]
    assert results["settings"]["tokens"] == [256]  # the steps are checked, not the model's speed: short inputs
    assert results["settings"]["profiles"] == ["baseline-fp32"]
    assert [(entry["profile"], bool(entry["reason"])) for entry in results["skipped"]] == [("t4-16gb", True)]
    assert "skipped t4-16gb: needs a CUDA GPU" in log
    rows = results["rows"]
    assert [row for row in rows if row.get("error")] == []
    measured = {(row["kind"], row["profile"], row["batch"], row["checkpointing"]) for row in rows}
    assert {("inference", "baseline-fp32", 1, False), ("inference", "baseline-fp32", 8, False)} <= measured
    assert {("training", "baseline-fp32", 1, False), ("training", "baseline-fp32", 1, True)} <= measured
    for row in rows:
        assert row["peak_bytes"] > 0 and row["latency_s_median"] > 0, row["profile"]
        assert row["predicted_peak_bytes"] > 0 and row["prediction_error_pct"] is not None, row["profile"]
    assert all((out / name).stat().st_size > 0 for name in ("results.md", "results.png", "workers.log"))
    plan = json.loads((out / "plan.json").read_text())
    assert plan["model"] == "demo" and plan["hardware"]["gpu"] == "H200" and plan["recommended"] == "datacenter"
    assert "python -m longqa plan --gpu H200: recommends datacenter" in log
    assert (gpu_results.stat().st_mtime if gpu_results.exists() else None) == before


def test_gpu_rows_set_the_planned_need_beside_nvmls_used_bytes():
    """On a GPU the planner's need (peak, allocator slack, CUDA context: what `plan` reports) is compared with NVML's
    used bytes, which checks the two constants the first time a GPU runs the check; off the GPU there is none."""
    gpu_row = {"kind": "inference", "model": "arch:large", "profile": "t4-16gb", "tokens": 4096, "batch": 8,
               "peak_bytes": 5e9, "nvml_used_bytes": 7e9}
    cpu_row = {"kind": "inference", "model": "arch:base", "profile": "cpu", "tokens": 1024, "batch": 1,
               "peak_bytes": 1e9, "runtime_rss_bytes": 4e8, "nvml_used_bytes": None}
    bench_report.add_predictions([gpu_row, cpu_row], H200)
    plan = bench_report.inference_plan(gpu_row, H200)
    assert gpu_row["predicted_need_bytes"] == plan.device_need_bytes["cuda:0"] > gpu_row["predicted_peak_bytes"]
    assert gpu_row["predicted_need_bytes"] - plan.device_parts["cuda:0"]["cuda_context"] == pytest.approx(
        1.1 * gpu_row["predicted_peak_bytes"], abs=2)
    assert gpu_row["need_error_pct"] == pytest.approx(100 * (gpu_row["predicted_need_bytes"] - 7e9) / 7e9)
    assert cpu_row["predicted_need_bytes"] is None and cpu_row["need_error_pct"] is None
