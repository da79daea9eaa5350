"""The floor beside the product bench's rows (bench/floor_report.py): "× floor" per CPU row on made-up rows, the
floor's section put into a bench folder's results.json and results.md, and one real run of both commands."""

from __future__ import annotations

import json
import re

import pytest

from bench import floor as floor_module
from bench import floor_report
from bench.floor import Shapes, window_flops
from longqa.bench import report as bench_report
from longqa.cli import main
from tests.test_bench_report import fake_results, fake_row

BASE_SHAPES = Shapes(hidden=768, ffn=3072, layers=12, heads=12, one_sided_window=256)
TOKENS = 192


def fake_floor(cpu_bf16=True):
    """A recorded floor of arch:base at 4,096 tokens: 100 GFLOP/s fp32, 200 bf16, 250 int8; band 25 (50 in bf16)."""
    rates = {"fp32": (100e9, 25e9), "bf16": (200e9, 50e9), "int8": (250e9, 25e9)}
    if not cpu_bf16:
        del rates["bf16"]
    flops = window_flops(BASE_SHAPES, 4096)
    return {"model": "arch:base", "tokens": 4096, "threads": 2, "linear_flops": flops.linear,
            "band_flops": flops.band, "cpu_bf16": cpu_bf16, "load_average": [0.1, 0.1, 0.1],
            "skipped": {} if cpu_bf16 else {"bf16": "this CPU has no native bf16"},
            "precisions": {name: {"precision": name, "linear_flops_per_s": linear, "band_flops_per_s": band,
                                  "floor_s": flops.linear / linear + flops.band / band}
                           for name, (linear, band) in rates.items()}}


def test_x_floor_divides_the_best_time_per_window_by_the_floor_of_the_rows_precision():
    flops = window_flops(BASE_SHAPES, 4096)
    fp32_floor, bf16_floor = flops.linear / 100e9 + flops.band / 25e9, flops.linear / 200e9 + flops.band / 50e9
    int8_floor = flops.linear / 250e9 + flops.band / 25e9
    rows = [fake_row("baseline-fp32", latency_s_min=20.0, window_tokens=4096),
            fake_row("cpu", strategies=["half_precision", "fast_attention"], dtype="bfloat16",
                     latency_s_min=12.0, windows=2, window_tokens=4096),
            fake_row("cpu", strategies=["int8_dynamic", "fast_attention"], dtype="float32 + int8 Linear (dynamic)",
                     latency_s_min=7.0, window_tokens=4096),
            fake_row("baseline-fp32", tokens=1024, window_tokens=1024, latency_s_min=3.0),
            fake_row("datacenter", devices=["cuda:0"], dtype="bfloat16")]  # no CPU floor for a GPU row
    floor_report.add_floor_ratios(rows, fake_floor())
    assert rows[0]["floor_precision"] == "fp32" and rows[0]["x_floor"] == pytest.approx(20.0 / fp32_floor)
    assert rows[1]["window_s"] == 6.0 and rows[1]["x_floor"] == pytest.approx(6.0 / bf16_floor)
    assert rows[2]["floor_precision"] == "int8" and rows[2]["x_floor"] == pytest.approx(7.0 / int8_floor)
    assert rows[3]["floor_s"] == pytest.approx(fp32_floor / 4)  # a quarter of the window: a quarter of the floor
    assert rows[4]["x_floor"] is None and rows[4]["floor_precision"] is None
    # the second floor: the band's needed products at the Linear layers' rate
    assert rows[1]["floor_band_at_linear_rate_s"] == pytest.approx(flops.total / 200e9)
    assert rows[1]["x_floor_band_at_linear_rate"] == pytest.approx(6.0 / (flops.total / 200e9))
    assert rows[2]["x_floor_band_at_linear_rate"] == pytest.approx(7.0 / (flops.total / 250e9))
    floor_report.add_floor_ratios(rows, {"error": "floor exited with code 1"})
    assert rows[0]["x_floor"] is None and rows[0]["window_s"] == 20.0


def test_add_floor_puts_the_floor_and_each_row_beside_it_into_the_bench_folder(tmp_path):
    rows = [fake_row("baseline-fp32", latency_s_min=20.0, window_tokens=4096),
            fake_row("cpu", strategies=["int8_dynamic", "fast_attention"], dtype="float32 + int8 Linear (dynamic)",
                     latency_s_min=7.0, window_tokens=4096)]
    results = fake_results(rows)
    results["machine"].update(cpu_bf16=False, cpu_flags=["avx2"])
    (tmp_path / "results.json").write_text(json.dumps(results))
    (tmp_path / "results.md").write_text(bench_report.format_markdown(results))
    assert floor_report.add_floor(tmp_path, fake_floor(cpu_bf16=False))["floor"]["tokens"] == 4096
    assert floor_report.add_floor(tmp_path, fake_floor(cpu_bf16=False)) is not None  # again: replaced, not added
    row = json.loads((tmp_path / "results.json").read_text())["rows"][1]
    markdown = (tmp_path / "results.md").read_text()
    assert markdown.startswith("# Benchmark: arch:base") and markdown.count("## The floor") == 1
    assert "CPU kind: AMD EPYC, no native bf16 (bf16 emulated) (avx2)" in markdown
    assert "| bf16 | not measured: this CPU has no native bf16 |" in markdown
    cpu_lines = [line for line in markdown.splitlines() if line.startswith("| cpu |")]
    assert f"{row['x_floor']:.2f}× int8 ({row['floor_s']:.2f} s); " \
           f"{row['x_floor_band_at_linear_rate']:.2f}× ({row['floor_band_at_linear_rate_s']:.2f} s)" in cpu_lines[-1]
    table = markdown[markdown.index("| profile | tokens | batch | best s per window"):].splitlines()[:4]
    assert len({len(re.findall(r"(?<!\\)\|", line)) for line in table}) == 1
    assert floor_report.floor_lines(json.loads((tmp_path / "results.json").read_text()))[1] == (
        f"cpu 4,096 tokens, batch 1: 7.00 s a window, floor {row['floor_s']:.2f} s (int8), "
        f"{row['x_floor']:.2f}× floor; band at the Linear rate {row['floor_band_at_linear_rate_s']:.2f} s, "
        f"{row['x_floor_band_at_linear_rate']:.2f}×")


def test_add_floor_writes_nothing_where_no_bench_ran(tmp_path):
    assert floor_report.add_floor(tmp_path, fake_floor()) is None
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # the rows, then the floor in its own process: about 20 s on 2 cores
def test_python_m_bench_floor_puts_a_bench_run_beside_the_floor(tiny_model_dir, tmp_path):
    assert main(["bench", "--model", str(tiny_model_dir), "--profiles", "cpu", "--tokens", str(TOKENS),
                 "--repeat", "1", "--checks", "2", "--no-training", "--out", str(tmp_path)]) == 0
    assert "floor" not in json.loads((tmp_path / "results.json").read_text())  # the product measures no floor
    assert floor_module.main(["--model", str(tiny_model_dir), "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["floor"]["precisions"]["fp32"]["floor_s"] > 0
    assert all(row["x_floor"] > 0 for row in results["rows"] if row["kind"] == "inference")
    markdown = (tmp_path / "results.md").read_text()
    assert "× floor" in markdown and "## The floor" in markdown and "CPU kind: " in markdown
