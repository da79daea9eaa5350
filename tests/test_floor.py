"""The compute floor: FLOPs of a window counted by hand, the floor per precision from injected timers and hardware
(no real timing here but one small smoke run), and which floor a bench row is compared with."""

from __future__ import annotations

import json

import pytest
from transformers import LongformerConfig

from bench import floor as floor_module
from bench.floor import Shapes, measure_floor, window_flops
from bench.floor_report import floor_for_tokens, row_precision
from strategies.hardware import Hardware

BASE = Shapes(hidden=768, ffn=3072, layers=12, heads=12, one_sided_window=256)


def test_window_flops_of_longformer_base_match_a_hand_count():
    flops = window_flops(BASE, 4096)
    # per layer: 5 projections (q, k, v, k_global, v_global) + output, each 2·4096·768·768; FFN 2 × 2·4096·768·3072
    per_layer_linear = 6 * 2 * 4096 * 768 * 768 + 2 * 2 * 4096 * 768 * 3072
    qa_outputs = 2 * 4096 * 768 * 2
    assert flops.linear == 12 * per_layer_linear + qa_outputs == 811_761_401_856
    # per layer: scores and weighted values, 2·768 FLOPs per query-key pair over 513 keys
    assert flops.band == 12 * 2 * 2 * 4096 * 768 * 513 == 77_460_406_272
    assert flops.total == pytest.approx(0.889e12, rel=1e-3)  # issue 29's "about 0.89 TFLOP"


def test_shapes_come_from_the_config():
    config = LongformerConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                              attention_window=[64, 64])
    assert Shapes.from_config(config) == Shapes(64, 128, 2, 4, 32)


def fake_linear(precision, tokens, in_features, out_features, repeat):
    rate = {"fp32": 100e9, "bf16": 200e9, "int8": 250e9}[precision]
    return 2.0 * tokens * in_features * out_features / rate


def fake_band(precision, shapes, tokens, repeat):
    _, flops = floor_module.band_products(shapes, tokens)
    return flops / (50e9 if precision == "bf16" else 25e9), flops


@pytest.mark.parametrize("hardware, expected", [(Hardware(cpu_bf16=True), ["fp32", "bf16", "int8"]),
                                                (Hardware(cpu_bf16=False), ["fp32", "int8"])])
def test_floor_per_precision_skips_bf16_where_it_is_not_native(hardware, expected):
    floor = measure_floor("arch:base", hardware=hardware, time_linear=fake_linear, time_band=fake_band)
    assert list(floor.precisions) == expected
    assert ("bf16" in floor.skipped) == (not hardware.cpu_bf16)
    flops = window_flops(BASE, 4096)
    for name, measured in floor.precisions.items():
        assert measured.floor_s > 0
    fp32 = floor.precisions["fp32"]
    assert fp32.linear_flops_per_s == pytest.approx(100e9) and fp32.band_flops_per_s == pytest.approx(25e9)
    assert fp32.floor_s == pytest.approx(flops.linear / 100e9 + flops.band / 25e9)
    assert fp32.floor_band_at_linear_rate_s == pytest.approx(flops.total / 100e9)
    int8 = floor.precisions["int8"]  # int8 Linear layers, the band in fp32 as the int8 profile runs it
    assert int8.floor_s == pytest.approx(flops.linear / 250e9 + flops.band / 25e9)


def test_a_recorded_floor_scales_with_the_window_length():
    recorded = measure_floor("arch:base", hardware=Hardware(cpu_bf16=False), time_linear=fake_linear,
                             time_band=fake_band).to_dict()
    full, quarter = floor_for_tokens(recorded, "fp32", 4096), floor_for_tokens(recorded, "fp32", 1024)
    assert full == pytest.approx(recorded["precisions"]["fp32"]["floor_s"]) and quarter == pytest.approx(full / 4)
    assert quarter == pytest.approx(window_flops(BASE, 1024).linear / 100e9 + window_flops(BASE, 1024).band / 25e9)
    assert floor_for_tokens(recorded, "bf16", 4096) is None  # not measured on that machine
    linear_rate = recorded["precisions"]["fp32"]["linear_flops_per_s"]
    assert floor_for_tokens(recorded, "fp32", 4096, band_at_linear_rate=True) == pytest.approx(
        window_flops(BASE, 4096).total / linear_rate)


def test_a_row_is_compared_with_the_precision_its_products_run_in():
    assert row_precision(["half_precision", "fast_attention"], "bfloat16") == "bf16"  # cpu with native bf16
    assert row_precision(["int8_dynamic", "fast_attention"], "float32 + int8 Linear (dynamic)") == "int8"  # without
    assert row_precision([], "float32") == "fp32"
    assert row_precision(["half_precision"], "float16") is None


def test_measured_throughputs_are_positive():
    tiny = Shapes(hidden=64, ffn=128, layers=1, heads=4, one_sided_window=32)
    assert floor_module.time_linear("fp32", 256, 64, 128, repeat=1) > 0
    assert floor_module.time_linear("int8", 256, 64, 128, repeat=1) > 0
    seconds, flops = floor_module.time_band("fp32", tiny, 256, repeat=1)
    assert seconds > 0 and flops == 2 * 2 * (256 // 32 * 4) * 32 * 96 * 16


def test_the_cpu_kind_names_amx_where_the_cpu_has_it():
    from bench.floor import kind_name

    amx = frozenset({"avx512_bf16", "amx_bf16", "amx_tile"})
    assert kind_name(Hardware(cpu_bf16=True), amx) == "amx-bf16"
    assert kind_name(Hardware(cpu_bf16=True), amx - {"amx_bf16"}) == "avx512-bf16"
    assert kind_name(Hardware(cpu_bf16=False), amx) == "avx2"  # bf16 not native (or simulated off): the AVX2 stack


@pytest.mark.slow  # a real floor process: about 8 s on 2 cores
def test_python_m_bench_floor_prints_the_floor_and_writes_floor_json(tiny_model_dir, tmp_path, capsys):
    assert floor_module.main(["--model", str(tiny_model_dir), "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "## The floor" in printed and "| fp32 |" in printed and "CPU kind: " in printed
    written = json.loads((tmp_path / "floor.json").read_text())
    assert written["floor"]["precisions"]["int8"]["floor_s"] > 0 and written["machine"]["cpu_model"]
    assert not (tmp_path / "results.json").exists()
