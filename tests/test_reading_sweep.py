"""The reading sweep of the bench: full against guided by document length, full reads past the limit predicted."""

from __future__ import annotations

import json

import pytest

from bench import reading_report
from bench.reading_sweep import predict_full_rows
from bench.__main__ import main


def row(mode, tokens, chars, windows_read, windows_total, forward, **extra):
    latency = {"extract": 0.01 * chars / 1000, "tokenize": 0.1 * chars / 1000, "rank": 0.0, "forward": forward,
               "decode": 0.01}
    latency["total"] = sum(latency.values())
    return {"mode": mode, "doc_tokens": tokens, "chars": chars, "windows_read": windows_read,
            "windows_total": windows_total, "latency_s": latency, "predicted": False, **extra}


def test_full_reads_not_run_are_predicted_from_the_largest_measured():
    rows = [row("full", 10_000, 32_000, 4, 4, 8.0), row("full", 100_000, 320_000, 30, 30, 60.0),
            row("guided", 500_000, 1_600_000, 3, 150, 6.0)]
    predicted = predict_full_rows(rows, [10_000, 100_000, 500_000, 2_000_000])
    assert [p["doc_tokens"] for p in predicted] == [500_000, 2_000_000]
    at_500k = predicted[0]
    assert at_500k["predicted"] and at_500k["windows_read"] == 150  # the guided row's estimate of the total
    assert at_500k["latency_s"]["forward"] == pytest.approx(60.0 / 30 * 150)
    assert at_500k["latency_s"]["tokenize"] == pytest.approx(0.1 * 320 / 320_000 * 1_600_000)
    assert predicted[1]["windows_read"] == round(30 * predicted[1]["chars"] / 320_000)
    assert predict_full_rows([row("guided", 10_000, 32_000, 2, 4, 1.0)], [10_000]) == []


def test_the_report_puts_each_guided_read_beside_the_full_one():
    rows = [row("full", 100_000, 320_000, 30, 30, 60.0), row("guided", 100_000, 320_000, 3, 30, 6.0),
            row("full", 500_000, 1_600_000, 150, 150, 300.0, predicted=True), row("guided", 500_000, 1_600_000, 3, 150, 6.0)]
    reading_report.add_ratios(rows)
    assert rows[1]["speedup_vs_full"] == pytest.approx(rows[0]["latency_s"]["total"] / rows[1]["latency_s"]["total"])
    assert not rows[1]["speedup_predicted"] and rows[3]["speedup_predicted"]
    before = sum(rows[3]["latency_s"][s] for s in ("extract", "tokenize", "rank"))
    assert rows[3]["before_forward_share"] == pytest.approx(before / rows[3]["latency_s"]["total"])
    results = {"model": "arch:base", "profile": "cpu", "command": "python -m bench reading --modes full,guided",
               "started": "now", "stopping": "the engine's own", "rows": rows,
               "machine": {"cpu_model": "AMD EPYC", "cpu_cores_logical": 2, "cpu_bf16": True, "torch": "2.13.0"}}
    markdown = reading_report.format_markdown(results)
    assert "native bf16: yes" in markdown and "full (predicted)" in markdown and "(full predicted)" in markdown


@pytest.mark.slow
def test_the_sweep_runs_each_row_in_its_own_process_and_writes_the_curve(tmp_path, capsys):
    out = tmp_path / "curve"
    code = main(["reading", "--model", "demo", "--profile", "baseline-fp32", "--modes", "full,guided",
                 "--doc-tokens", "3000,20000", "--max-full-tokens", "3000", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    results = json.loads((out / "reading.json").read_text())
    rows = {(r["mode"], r["doc_tokens"]): r for r in results["rows"]}
    assert set(rows) == {("full", 3000), ("guided", 3000), ("full", 20000), ("guided", 20000)}
    assert rows[("full", 20000)]["predicted"] and not rows[("full", 3000)]["predicted"]
    assert rows[("guided", 20000)]["chars"] > 4 * rows[("guided", 3000)]["chars"]
    assert all(r["host_peak_rss_bytes"] > 0 for r in results["rows"] if not r["predicted"])
    assert (out / "reading.md").exists() and (out / "reading.png").stat().st_size > 0
    assert "--modes full,guided" in results["command"]


def test_an_unknown_mode_is_refused(tmp_path, capsys):
    assert main(["reading", "--modes", "skim", "--out", str(tmp_path)]) == 2
    assert "--modes takes auto, full, guided" in capsys.readouterr().err
