"""The benchmark: planning, agreement, formatting as plain functions, and one real run on the tiny model."""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import pytest

from longqa.bench import runner as bench
from longqa.bench.worker import WorkerSpec, agreement_inputs, compare_outputs, count_tokens, memory_fields
from longqa.cli import main
from longqa_core.limits import EngineSettings
from longqa_core.telemetry import MemoryReadout
from longqa_core.windows import make_windows
from longqa_core.errors import InputError, ProfileError
from strategies.hardware import Gpu, Hardware

CPU_BF16 = Hardware(cpu_bf16=True)
CPU_NO_BF16 = Hardware(cpu_bf16=False)
A100 = Hardware(gpus=(Gpu(0, "A100", 80 * 10**9, (8, 0)),), cuda_available=True, cpu_bf16=True)

INFERENCE_FIELDS = {
    "kind", "model", "profile", "profile_resolved", "strategies", "devices", "dtype", "tokens", "batch",
    "load_time_s", "weight_bytes", "weight_bytes_per_device", "peak_bytes", "peak_source", "peak_allocated_bytes",
    "nvml_used_bytes", "process_peak_rss_bytes", "load_peak_rss_bytes", "latency_s_median", "latency_s_min",
    "latency_s_max", "latency_s_runs", "tokens_per_s", "windows", "window_tokens", "document_tokens", "same_top_answer_pct",
    "agreement_checks", "max_abs_delta_start_logit", "max_abs_delta_end_logit", "flagged", "memory_x_baseline",
    "latency_x_baseline", "error",
}
TRAINING_FIELDS = INFERENCE_FIELDS | {"checkpointing", "step_peak_bytes"}
TOKENS = 192


# ------------------------------------------------------------------------------------------------ one real run
@pytest.fixture(scope="module")
def bench_run(tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    code = main(["bench", "--model", str(tiny_model_dir), "--profiles", "cpu", "--tokens", str(TOKENS),
                 "--repeat", "1", "--checks", "3", "--out", str(out)])
    return code, out, json.loads((out / "results.json").read_text())


def rows_of(results, kind, **match):
    return [r for r in results["rows"] if r["kind"] == kind and all(r.get(k) == v for k, v in match.items())]


@pytest.mark.slow
def test_bench_writes_every_row_with_every_field(bench_run):
    code, out, results = bench_run
    assert code == 0
    assert [r["error"] for r in results["rows"]] == [None] * 4
    assert [r["profile"] for r in rows_of(results, "inference")] == ["baseline-fp32", "cpu"]
    assert [r["checkpointing"] for r in rows_of(results, "training")] == [False, True]
    for row in rows_of(results, "inference"):
        assert INFERENCE_FIELDS <= row.keys(), INFERENCE_FIELDS - row.keys()
    for row in rows_of(results, "training"):
        assert TRAINING_FIELDS <= row.keys(), TRAINING_FIELDS - row.keys()
    machine = results["machine"]
    assert machine["cpu_cores_logical"] >= 1 and machine["torch"] and machine["transformers"]
    assert machine["gpus"] == []


@pytest.mark.slow
def test_bench_numbers_make_sense(bench_run):
    _, _, results = bench_run
    for row in results["rows"]:
        assert row["peak_bytes"] >= row["weight_bytes"] > 0
        assert 0 < row["latency_s_min"] <= row["latency_s_median"] <= row["latency_s_max"]
        assert row["tokens_per_s"] > 0 and row["load_time_s"] > 0
    for row in rows_of(results, "inference"):
        assert row["peak_source"] == "peak RSS while answering" and row["devices"] == ["cpu"]
        assert row["window_tokens"] == TOKENS and row["windows"] == 1  # question + document fill one window
        assert row["agreement_checks"] == 3
    cpu = rows_of(results, "inference", profile="cpu")[0]
    assert cpu["dtype"] != "float32" and cpu["strategies"] in (["half_precision", "fast_attention", "prepacked_linear"],
                                                                ["int8_dynamic", "fast_attention", "prepacked_linear"])
    assert cpu["max_abs_delta_start_logit"] > 0  # a lower precision really was compared with the fp32 logits
    assert cpu["flagged"] == (cpu["same_top_answer_pct"] < 95)


@pytest.mark.slow
def test_baseline_agrees_with_itself(bench_run):
    _, out, results = bench_run
    baseline = rows_of(results, "inference", profile="baseline-fp32")[0]
    assert baseline["same_top_answer_pct"] == 100.0 and not baseline["flagged"]
    assert baseline["max_abs_delta_start_logit"] == 0.0 and baseline["max_abs_delta_end_logit"] == 0.0
    assert baseline["memory_x_baseline"] == 1.0 and baseline["latency_x_baseline"] == 1.0
    assert (out / f"baseline-logits-{TOKENS}t-b1.npz").exists()


@pytest.mark.slow
def test_checkpointing_lowers_the_training_step_peak(bench_run):
    _, _, results = bench_run
    without, with_ = rows_of(results, "training")
    assert with_["strategies"] == ["gradient_checkpointing"] and without["strategies"] == []
    assert 0 < with_["step_peak_bytes"] < without["step_peak_bytes"]
    assert with_["memory_x_baseline"] < 1.0 and without["memory_x_baseline"] == 1.0


@pytest.mark.slow
def test_bench_writes_markdown_and_chart(bench_run):
    _, out, _ = bench_run
    markdown = (out / "results.md").read_text()
    assert "| baseline-fp32 |" in markdown and "| cpu |" in markdown
    assert "memory × baseline" in markdown and "time × baseline" in markdown
    assert "## Training step" in markdown
    assert (out / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------------------------------------ planning
def test_all_means_every_available_profile_with_the_baseline_first():
    chosen, skipped = bench.choose_profiles("all", CPU_BF16)
    assert chosen == ["baseline-fp32", "cpu"]
    assert {s.profile for s in skipped} == {"rtx-3090-24gb", "t4-16gb", "consumer-gpu", "multi-gpu", "datacenter"}
    assert all("CUDA" in s.reason for s in skipped)
    chosen, _ = bench.choose_profiles("all", A100)
    assert chosen[0] == "baseline-fp32" and "datacenter" in chosen and "auto" not in chosen
    chosen, _ = bench.choose_profiles("all,custom:int8_dynamic", CPU_BF16)
    assert chosen == ["baseline-fp32", "cpu", "custom:int8_dynamic"]


def test_named_profiles_get_the_baseline_and_custom_stacks_parse():
    chosen, skipped = bench.choose_profiles("custom:int8_dynamic+gradient_checkpointing,datacenter", CPU_NO_BF16)
    assert chosen == ["baseline-fp32", "custom:int8_dynamic+gradient_checkpointing"]
    assert [s.profile for s in skipped] == ["datacenter"]
    with pytest.raises(ProfileError):
        bench.choose_profiles("no-such-profile", CPU_BF16)


def test_plan_runs_the_baseline_first_at_each_length_then_training(tmp_path):
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--tokens", "1024,16384", "--batch", "2"])
    specs = bench.plan_specs(args, ["baseline-fp32", "cpu"], tmp_path)
    assert [(s.mode, s.profile, s.tokens, s.baseline) for s in specs] == [
        ("inference", "baseline-fp32", 1024, True), ("inference", "cpu", 1024, False),
        ("inference", "baseline-fp32", 16384, True), ("inference", "cpu", 16384, False),
        ("training", "baseline-fp32", 1024, False), ("training", "baseline-fp32", 4096, False)]
    assert {s.batch for s in specs} == {2} and args.model == "arch:base" and args.out == "bench-results"


# ------------------------------------------------------------------------------------------------ inputs
def test_agreement_inputs_fill_the_requested_window(tiny_tokenizer):
    settings = EngineSettings(max_seq_len=4096).resolved(tiny_tokenizer)
    inputs = agreement_inputs(tiny_tokenizer, 300, 4)
    lengths = [len(make_windows(tiny_tokenizer, c.question, [c.document], settings)[0][0].input_ids)
               for c in inputs]
    assert lengths[0] == 300 and all(length <= 300 for length in lengths)
    assert len({c.question for c in inputs}) == 4
    again = agreement_inputs(tiny_tokenizer, 300, 4)
    assert [c.document.text for c in again] == [c.document.text for c in inputs]  # every worker sees the same
    with pytest.raises(InputError):
        agreement_inputs(tiny_tokenizer, 20, 1)


def test_agreement_inputs_over_one_window_make_several(tiny_tokenizer):
    settings = EngineSettings(max_seq_len=256).resolved(tiny_tokenizer)
    check = agreement_inputs(tiny_tokenizer, 1000, 1)[0]
    assert count_tokens(tiny_tokenizer, check.document.text) > 900
    assert len(make_windows(tiny_tokenizer, check.question, [check.document], settings)[0]) >= 4


# ------------------------------------------------------------------------------------------------ agreement
def outputs(spans, shift=0.0):
    return [{"ids": np.arange(10), "start": np.linspace(0, 1, 10) + shift, "end": np.zeros(10),
             "span": np.asarray(span)} for span in spans]


def test_agreement_counts_changed_top_answers_and_flags_over_five_percent():
    reference = outputs([[0, 3]] * 20)
    one_changed = outputs([[0, 3]] * 19 + [[4, 6]], shift=0.25)
    result = compare_outputs(one_changed, reference)
    assert result["same_top_answer_pct"] == 95.0 and result["changed_checks"] == [19]
    assert result["max_abs_delta_start_logit"] == pytest.approx(0.25) and result["max_abs_delta_end_logit"] == 0
    assert not result["flagged"]  # exactly 5 %: not over
    assert compare_outputs(outputs([[0, 3]] * 18 + [[4, 6]] * 2), reference)["flagged"]
    assert compare_outputs([], [])["same_top_answer_pct"] is None


def test_agreement_refuses_logits_of_other_inputs():
    other = outputs([[0, 3]])
    other[0]["ids"] = np.arange(1, 11)
    with pytest.raises(InputError, match="other input ids"):
        compare_outputs(other, outputs([[0, 3]]))


# ------------------------------------------------------------------------------------------------ memory
def test_gpu_rows_report_torch_peak_allocated_and_nvml():
    readings = [MemoryReadout(peak_allocated_bytes=5 * 10**9, nvml_used_bytes=7 * 10**9),
                MemoryReadout(peak_allocated_bytes=6 * 10**9, nvml_used_bytes=6 * 10**9)]
    fields = memory_fields(["cuda:0"], readings, run_peak_rss=2 * 10**9, process_peak_rss=3 * 10**9)
    assert fields["peak_bytes"] == 6 * 10**9 and fields["peak_source"] == "torch peak allocated"
    assert fields["nvml_used_bytes"] == 7 * 10**9 and fields["process_peak_rss_bytes"] == 3 * 10**9


def test_cpu_rows_report_the_process_peak_rss():
    readings = [MemoryReadout()]
    fields = memory_fields(["cpu"], readings, run_peak_rss=2 * 10**9, process_peak_rss=3 * 10**9)
    assert fields["peak_bytes"] == 2 * 10**9 and fields["peak_source"] == "peak RSS while answering"
    assert fields["process_peak_rss_bytes"] == 3 * 10**9
    assert fields["peak_allocated_bytes"] is None and fields["nvml_used_bytes"] is None


# ------------------------------------------------------------------------------------------------ running
def test_a_failing_worker_becomes_an_error_row(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "worker_command",
                        lambda spec, result: [sys.executable, "-c", "raise SystemExit('out of memory here')"])
    spec = WorkerSpec(mode="inference", model="arch:base", profile="cpu", tokens=4096, batch=1, repeat=1,
                      checks=1, out_dir=str(tmp_path))
    rows = bench.run_worker(spec, tmp_path, tmp_path / "workers.log")
    assert len(rows) == 1 and "out of memory here" in rows[0]["error"] and rows[0]["profile"] == "cpu"
