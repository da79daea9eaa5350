"""`python -m bench peers`: which systems run here, the agreement check, and the report built from a record.
No model, no subprocess, none of the peers' packages: their absence is simulated."""

import numpy as np
import pytest

from bench import peers
from bench.peers_report import markdown, ratios_to_project
from longqa_core.errors import InputError
from strategies.hardware import Hardware


def hardware(cpu_bf16: bool) -> Hardware:
    return Hardware(cpu_bf16=cpu_bf16)


def nothing_installed(name):
    return None


def everything_installed(name):
    return object()


def row(name, status="ok", median_s=None, **fields):
    return {"name": name, "description": f"{name} described", "status": status, "median_s": median_s,
            "min_s": median_s, "first_call_s": 1.0, "prepare_s": 2.0, "peak_rss_bytes": 3_000_000_000,
            "notes": [], "agreement": None, "error": None, **fields}


def record(systems):
    return {"command": "python -m bench peers --model arch:base --rounds 5", "model": "arch:base", "tokens": 4096,
            "rounds": 5, "warmup": 1, "threads": 2, "pause_between_forwards_s": 1.0, "reference": "eager-fp32",
            "commit": "abc1234",
            "machine": {"cpu_model": "AMD EPYC", "kind": "avx2", "cpu_flags": ["avx2"],
                        "versions": {"torch": "2.13.0", "openvino": None, "onnxruntime": "1.32.0"},
                        "load_average_before": [0.4, 0, 0], "load_average_after": [1.2, 0, 0]},
            "systems": systems}


def test_a_system_whose_package_is_missing_says_how_to_install_it():
    message = peers.missing_packages(peers.BY_NAME["onnxruntime-fp32"], nothing_installed)
    assert message == ("onnxruntime, onnx are not installed: pip install -r requirements-peers.txt "
                       "(or pip install onnxruntime onnx)")
    assert peers.missing_packages(peers.BY_NAME["openvino-fp32"], everything_installed) is None
    assert peers.missing_packages(peers.BY_NAME["eager-fp32"], nothing_installed) is None  # torch alone


def test_missing_packages_are_rows_and_the_rest_still_runs():
    names = [system.name for system in peers.SYSTEMS]
    to_run, not_run = peers.plan_systems(names, hardware(cpu_bf16=False), nothing_installed)
    assert [system.name for system in to_run] == ["project", "eager-fp32", "compile-fp32"]
    statuses = {row["name"]: row["status"] for row in not_run}
    assert statuses == {"eager-bf16": "skipped", "openvino-fp32": "missing", "openvino-default": "missing",
                        "onnxruntime-fp32": "missing"}
    assert "pip install -r requirements-peers.txt" in next(r for r in not_run if r["name"] == "openvino-fp32")["error"]
    assert "emulated" in next(r for r in not_run if r["name"] == "eager-bf16")["error"]


def test_bf16_runs_only_with_native_bf16_and_openvino_default_waits_for_openvino_fp32():
    to_run, not_run = peers.plan_systems(["eager-bf16", "openvino-fp32", "openvino-default"],
                                         hardware(cpu_bf16=True), everything_installed)
    assert [system.name for system in to_run] == ["eager-bf16", "openvino-fp32"]
    assert not_run == []  # openvino-default is decided once openvino-fp32 says its default precision
    alone, _ = peers.plan_systems(["openvino-default"], hardware(cpu_bf16=True), everything_installed)
    assert [system.name for system in alone] == ["openvino-default"]


def test_an_unknown_system_is_refused():
    with pytest.raises(InputError, match="Unknown system tensorrt"):
        peers.plan_systems(["project", "tensorrt"], hardware(cpu_bf16=False), everything_installed)


def test_agreement_gives_the_largest_difference_and_whether_the_best_tokens_agree():
    reference = (np.array([0.0, 3.0, 1.0]), np.array([2.0, 0.0, 1.0]))
    found = peers.agreement(reference, ([0.5, 2.0, 2.5], [2.0, 0.25, 1.0]))
    assert found == {"max_abs_start_diff": 1.5, "max_abs_end_diff": 0.25, "same_start_argmax": False,
                     "same_end_argmax": True}


def test_error_line_names_the_root_cause_and_drops_colour_codes():
    try:
        try:
            raise ValueError("Could not guard on data-dependent expression\nmore detail")
        except ValueError as cause:
            raise RuntimeError("\x1b[96mFailed to export\x1b[0m the model.\nNext steps: ...") from cause
    except RuntimeError as exc:
        line = peers.error_line(exc)
    assert line == ("RuntimeError: Failed to export the model. "
                    "(caused by ValueError: Could not guard on data-dependent expression)")


def test_report_gives_medians_and_ratios_to_the_project():
    systems = [row("project", median_s=5.0), row("eager-fp32", median_s=15.0),
               row("openvino-fp32", median_s=10.0,
                   agreement={"max_abs_start_diff": 2e-6, "max_abs_end_diff": 3e-6, "same_start_argmax": True,
                              "same_end_argmax": False})]
    assert ratios_to_project(systems) == {"project": 1.0, "eager-fp32": 3.0, "openvino-fp32": 2.0}
    text = markdown(record(systems))
    assert "| `project` | 5.00 | 5.00 | 1.00× |" in text
    assert "| `eager-fp32` | 15.00 | 15.00 | 3.00× |" in text
    assert "| `openvino-fp32` | 10.00 | 10.00 | 2.00× | 1.00 | 2.00 | 3.0 | 2e-06 | 3e-06 | yes/no |" in text
    assert "commit abc1234" in text and "not installed: openvino" in text


def test_report_lists_missing_and_failed_systems_without_a_time():
    systems = [row("project", median_s=5.0),
               row("onnxruntime-fp32", status="failed", error="RuntimeError: dynamo exporter failed"),
               row("openvino-fp32", status="missing",
                   error="openvino is not installed: pip install -r requirements-peers.txt")]
    text = markdown(record(systems))
    assert "- `onnxruntime-fp32` (onnxruntime-fp32 described): failed: RuntimeError: dynamo exporter failed" in text
    assert ("- `openvino-fp32` (openvino-fp32 described): missing: openvino is not installed: "
            "pip install -r requirements-peers.txt") in text
    assert "| `openvino-fp32` |" not in text and "| `onnxruntime-fp32` |" not in text


def test_without_a_project_time_there_is_no_ratio():
    systems = [row("project", status="failed", error="boom"), row("eager-fp32", median_s=15.0)]
    assert ratios_to_project(systems) == {"project": None, "eager-fp32": None}
    assert "| `eager-fp32` | 15.00 | 15.00 | — |" in markdown(record(systems))


def test_model_slug_names_the_output_files():
    assert peers.model_slug("arch:base") == "base"
    assert peers.model_slug("allenai/longformer-large-4096-finetuned-triviaqa") == \
        "allenai-longformer-large-4096-finetuned-triviaqa"
