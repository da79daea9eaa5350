"""The bench's report: ratios against the baseline, the planner's predictions, markdown and `--rescore`, on
made-up rows (no model runs here; tests/test_bench.py runs one)."""

from __future__ import annotations

import json
import re

import pytest

from longqa.bench import report as bench_report
from longqa.cli import main
from strategies.hardware import Hardware


def fake_row(profile, **values):
    row = {"kind": "inference", "model": "arch:base", "profile": profile, "strategies": [], "devices": ["cpu"],
           "dtype": "float32",
           "tokens": 4096, "batch": 1, "windows": 1, "weight_bytes": 6 * 10**8, "peak_bytes": 16 * 10**8,
           "latency_s_median": 18.8, "latency_s_min": 18.5, "latency_s_max": 19.0, "tokens_per_s": 217.0,
           "same_top_answer_pct": 100.0, "agreement_checks": 20, "max_abs_delta_start_logit": 0.0,
           "max_abs_delta_end_logit": 0.0, "flagged": False, "load_time_s": 2.0, "checkpointing": False,
           "error": None}
    row.update(values)
    return row


def fake_results(rows):
    machine = {"cpu_model": "AMD EPYC", "cpu_cores_logical": 2, "ram_bytes": 25 * 10**9, "gpus": [], "cpu_bf16": True,
               "torch": "2.13.0", "transformers": "5.24.0", "accelerate": "1.16.0", "python": "3.11",
               "load_average_start": [0.1, 0.1, 0.1]}
    return {"model": "arch:base", "command": "python -m longqa bench", "started": "now", "machine": machine,
            "skipped": [{"profile": "datacenter", "reason": "needs a CUDA GPU"}], "rows": rows}


def test_ratios_compare_with_the_baseline_and_training_with_the_step_without_checkpointing():
    rows = [fake_row("baseline-fp32"), fake_row("cpu", peak_bytes=11 * 10**8, latency_s_median=8.0),
            fake_row("baseline-fp32", kind="training", peak_bytes=10 * 10**9, latency_s_median=60.0),
            fake_row("baseline-fp32", kind="training", checkpointing=True, peak_bytes=4 * 10**9,
                     latency_s_median=78.0),
            fake_row("cpu", tokens=1024)]  # no baseline at this length: no ratio rather than a wrong one
    bench_report.add_baseline_ratios(rows)
    assert rows[1]["memory_x_baseline"] == pytest.approx(11 / 16)
    assert rows[1]["latency_x_baseline"] == pytest.approx(8 / 18.8)
    assert rows[3]["memory_x_baseline"] == pytest.approx(0.4) and rows[3]["latency_x_baseline"] == 1.3
    assert rows[4]["memory_x_baseline"] is None


def test_markdown_flags_changed_answers_and_lists_what_was_not_measured():
    rows = [fake_row("baseline-fp32"),
            fake_row("cpu", same_top_answer_pct=80.0, flagged=True, max_abs_delta_start_logit=0.31),
            {"kind": "inference", "profile": "custom:int8_dynamic", "tokens": 4096, "batch": 1,
             "checkpointing": None, "error": "worker exited with code 1: boom"}]
    bench_report.add_baseline_ratios(rows)
    markdown = bench_report.format_markdown(fake_results(rows))
    cpu_line = next(line for line in markdown.splitlines() if line.startswith("| cpu |"))
    assert "80 % of 20" in cpu_line and "⚠" in cpu_line and "0.31" in cpu_line and "18,800" in markdown
    table = [line for line in markdown.splitlines() if line.startswith("|")]
    assert len({len(re.findall(r"(?<!\\)\|", line)) for line in table}) == 1  # every line has the same columns
    assert "custom:int8_dynamic at 4,096 tokens: worker exited with code 1: boom" in markdown
    assert "datacenter: needs a CUDA GPU" in markdown
    assert "busy" not in markdown


def test_the_terminal_summary_gives_each_row_its_best_time_per_window():
    rows = [fake_row("baseline-fp32", latency_s_min=20.0), fake_row("cpu", latency_s_min=12.0, windows=2),
            fake_row("baseline-fp32", kind="training", checkpointing=True)]
    assert bench_report.summary_lines(fake_results(rows)) == ["baseline-fp32 4,096 tokens, batch 1: 20.00 s a window",
                                                              "cpu 4,096 tokens, batch 1: 6.00 s a window"]


def test_markdown_warns_when_the_machine_was_busy():
    results = fake_results([fake_row("baseline-fp32")])
    results["machine"]["load_average_start"] = [3.0, 3.0, 3.0]
    assert "busy" in bench_report.format_markdown(results)


@pytest.mark.slow
def test_rescore_recomputes_ratios_and_predictions_for_the_recorded_machine(tmp_path):
    rows = [fake_row("baseline-fp32", runtime_rss_bytes=3 * 10**8),
            fake_row("cpu", peak_bytes=8 * 10**8, latency_s_median=4.7, runtime_rss_bytes=3 * 10**8)]
    results = fake_results(rows)
    results["machine"]["cpu_bf16"] = False  # measured on a CPU without bf16, whatever rescores it
    (tmp_path / "results.json").write_text(json.dumps(results))
    assert main(["bench", "--rescore", "--out", str(tmp_path)]) == 0
    rescored = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert rescored[1]["memory_x_baseline"] == pytest.approx(0.5) and rescored[1]["latency_x_baseline"] == 0.25
    recorded = bench_report.inference_plan(rows[1], Hardware(cpu_bf16=False)).peak_bytes  # int8 there
    assert rescored[1]["predicted_peak_bytes"] == recorded
    assert recorded != bench_report.inference_plan(rows[1], Hardware(cpu_bf16=True)).peak_bytes  # bf16 there
    assert rescored[0]["prediction_error_pct"] == pytest.approx(
        100 * (rescored[0]["predicted_peak_bytes"] - 16e8) / 16e8)
    assert "| cpu |" in (tmp_path / "results.md").read_text()
    assert (tmp_path / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_rescore_refuses_results_without_their_machine(tmp_path, capsys):
    results = fake_results([fake_row("baseline-fp32")])
    del results["machine"]["cpu_bf16"]
    (tmp_path / "results.json").write_text(json.dumps(results))
    assert main(["bench", "--rescore", "--out", str(tmp_path)]) == 2
    assert "does not record the machine" in capsys.readouterr().err
