"""The compute floor of one window on this machine: the window's FLOPs counted from the model's config, divided by
the throughput this CPU reaches on the model's own matrix shapes, per precision the profiles use.

Measures and counts; never formats (`bench.floor_report` does, and scales a recorded floor to a row's window) and
never loads a model (only its config). `python -m bench.floor OUT.json [--model M]` measures in a fresh process;
`python -m bench floor` runs that process, prints the floor and puts the rows of a `longqa bench` run beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from bench.floor_report import add_floor, floor_lines, format_floor
from longqa.bench.runner import PROJECT_ROOT, last_error_line, machine_info, worker_env
from longqa.models import model_config
from longqa_core.errors import InputError
from strategies.hardware import Hardware, cpu_flags, detect_hardware

PRECISIONS = ("fp32", "bf16", "int8")  # int8: torch.ao dynamic-quantized Linear layers, fp32 attention band
FLOOR_TOKENS = 4096  # the window the shapes are timed at: the model's full window
WARMUP = 1
REPEAT = 5  # best of this many timed calls per shape: the fastest is the least disturbed by other work


# ------------------------------------------------------------------------------------------------ counting
@dataclass(frozen=True)
class WindowFlops:
    """The arithmetic one window needs (multiply-add = 2 FLOPs), from the config alone.

    `linear`: per layer the query/key/value and global key/value projections over every token (the global ones run
    over every token: any token may be a global query's key), the attention output, and the feed-forward in and
    out; plus `qa_outputs`. `band`: each query against its 2w+1 neighbours, scores and weighted values. Left out
    (under 1 % at 4,096 tokens with a question of tens of tokens): the global queries' projection and attention,
    the softmax, LayerNorm and GELU.
    """

    linear: float
    band: float

    @property
    def total(self) -> float:
        return self.linear + self.band


@dataclass(frozen=True)
class Shapes:
    """The dimensions of the model that decide its arithmetic."""

    hidden: int
    ffn: int
    layers: int
    heads: int
    one_sided_window: int  # w: a query sees w keys on each side

    @classmethod
    def from_config(cls, config) -> "Shapes":
        window = config.attention_window
        window = window[0] if isinstance(window, (list, tuple)) else window
        return cls(config.hidden_size, config.intermediate_size, config.num_hidden_layers,
                   config.num_attention_heads, window // 2)


def window_flops(shapes: Shapes, tokens: int) -> WindowFlops:
    """FLOPs of one window of `tokens` tokens."""
    d, f, n = shapes.hidden, shapes.ffn, tokens
    per_layer_linear = 2 * n * d * (5 * d + d + 2 * f)  # q, k, v, k_global, v_global; output; ffn in + out
    per_layer_band = 2 * 2 * n * d * (2 * shapes.one_sided_window + 1)  # q·k and p·v over 2w+1 keys, all heads
    qa_outputs = 2 * n * d * 2
    return WindowFlops(linear=float(shapes.layers * per_layer_linear + qa_outputs),
                       band=float(shapes.layers * per_layer_band))


def linear_shapes(shapes: Shapes) -> list[tuple[str, int, int, int]]:
    """(name, in, out, times per window) of the Linear layers, projections fused as the fast attention runs them."""
    d, f = shapes.hidden, shapes.ffn
    return [("projections q,k,v,k_global,v_global", d, 5 * d, shapes.layers),
            ("attention output", d, d, shapes.layers),
            ("feed-forward in", d, f, shapes.layers),
            ("feed-forward out", f, d, shapes.layers)]


# ------------------------------------------------------------------------------------------------ the floor
@dataclass(frozen=True)
class PrecisionFloor:
    """One precision's measured throughputs (FLOP/s) and the floor of a window at `tokens`."""

    precision: str
    linear_flops_per_s: float
    band_flops_per_s: float
    floor_s: float
    floor_band_at_linear_rate_s: float | None = None  # the band's needed products at the Linear layers' rate


@dataclass(frozen=True)
class Floor:
    """The floor per precision for one model, with what it was measured on; precisions not native here are
    listed in `skipped` with why."""

    model: str
    tokens: int
    threads: int
    linear_flops: float
    band_flops: float
    precisions: dict[str, PrecisionFloor]
    skipped: dict[str, str]
    cpu_bf16: bool
    shape_times_s: dict[str, dict[str, float]]  # precision -> shape name -> best seconds of one call
    load_average: list[float] | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def floor_seconds(flops: WindowFlops, linear_flops_per_s: float, band_flops_per_s: float) -> float:
    """A window's floor: its linear FLOPs at the linear layers' throughput plus its band at the band's."""
    return flops.linear / linear_flops_per_s + flops.band / band_flops_per_s


def kind_name(hardware: Hardware, flags: frozenset[str] | None = None) -> str:
    """The CPU kind a floor and a breakdown are filed under: "amx-bf16" with native bf16 and AMX tiles (`flags`,
    default this CPU's), "avx512-bf16" with native bf16 only, else "avx2"."""
    if not hardware.cpu_bf16:
        return "avx2"
    return "amx-bf16" if "amx_bf16" in (cpu_flags() if flags is None else flags) else "avx512-bf16"


def native_precisions(hardware: Hardware) -> tuple[list[str], dict[str, str]]:
    """The precisions worth timing here, and those skipped with why (bf16 is emulated, ~100× slower, without
    AVX512-BF16/AMX: no profile runs it there, so its "floor" would mean nothing)."""
    if hardware.cpu_bf16:
        return list(PRECISIONS), {}
    return [p for p in PRECISIONS if p != "bf16"], {"bf16": "this CPU has no native bf16 (AVX512-BF16 or AMX)"}


def best_time_s(call, warmup: int = WARMUP, repeat: int = REPEAT) -> float:
    """Best wall time of `call()` over `repeat` runs after `warmup` untimed ones."""
    for _ in range(warmup):
        call()
    best = float("inf")
    for _ in range(repeat):
        began = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - began)
    return best


def int8_linear(in_features: int, out_features: int) -> nn.Module:
    """A Linear as the int8_dynamic strategy leaves it: torch.ao's dynamic-quantized Linear, fp32 in and out."""
    linear = nn.Linear(in_features, out_features)
    with warnings.catch_warnings():  # torch.ao.quantization announces its removal (strategies/int8_dynamic.py)
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(nn.Sequential(linear), {nn.Linear}, dtype=torch.qint8)


def time_linear(precision: str, tokens: int, in_features: int, out_features: int, repeat: int) -> float:
    """Best seconds of one (tokens, in) → (tokens, out) Linear with bias in `precision`. For fp32 and bf16 the
    faster of eager `F.linear` and oneDNN's linear over a weight packed once (what `prepacked_linear` runs): the
    floor is the fastest way this CPU multiplies these shapes, so no profile can beat it by calling another."""
    x = torch.randn(tokens, in_features)  # (L, in)
    if precision == "int8":
        layer = int8_linear(in_features, out_features)
        return best_time_s(lambda: layer(x), repeat=repeat)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    weight = torch.randn(out_features, in_features, dtype=dtype) / in_features**0.5  # (out, in)
    bias, x = torch.zeros(out_features, dtype=dtype), x.to(dtype)
    eager = best_time_s(lambda: F.linear(x, weight, bias), repeat=repeat)
    if not torch.backends.mkldnn.is_available():
        return eager
    packed = torch.ops.mkldnn._reorder_linear_weight(weight, None)  # (out, in) in oneDNN's blocked layout
    return min(eager, best_time_s(lambda: torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], ""),
                                  repeat=repeat))


def band_products(shapes: Shapes, tokens: int) -> tuple[tuple[int, int, int, int], float]:
    """The band as the fast attention on SDPA multiplies it: blocks of w queries against their 3w keys, per head.
    Returns (batch of blocks × heads, w, 3w, head dim) and the FLOPs of both products (scores, weighted values)."""
    w = shapes.one_sided_window
    blocks = max(tokens // w, 1)
    head_dim = shapes.hidden // shapes.heads
    batch = blocks * shapes.heads
    return (batch, w, 3 * w, head_dim), 2.0 * 2 * batch * w * 3 * w * head_dim


def time_band(precision: str, shapes: Shapes, tokens: int, repeat: int) -> tuple[float, float]:
    """Best seconds of one layer's band products and their FLOPs; the int8 profile keeps attention in fp32."""
    (batch, w, keys, head_dim), flops = band_products(shapes, tokens)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    q = torch.randn(batch, w, head_dim, dtype=dtype)  # (B*nb*H, w, d)
    k = torch.randn(batch, keys, head_dim, dtype=dtype)  # (B*nb*H, 3w, d)
    v = torch.randn(batch, keys, head_dim, dtype=dtype)
    p = torch.softmax(torch.randn(batch, w, keys), dim=-1).to(dtype)  # (B*nb*H, w, 3w)

    def products():
        torch.bmm(q, k.transpose(1, 2))  # (B*nb*H, w, 3w)
        torch.bmm(p, v)  # (B*nb*H, w, d)

    return best_time_s(products, repeat=repeat), flops


def measure_floor(model_ref: str = "arch:base", *, tokens: int = FLOOR_TOKENS, repeat: int = REPEAT,
                  hardware: Hardware | None = None, time_linear=time_linear, time_band=time_band) -> Floor:
    """Time the model's Linear shapes and band products in each precision native here, and the floor of one
    window of `tokens` tokens from them. `hardware` and the two timers can be injected (tests)."""
    hardware = hardware or detect_hardware()
    shapes = Shapes.from_config(model_config(model_ref))
    flops = window_flops(shapes, tokens)
    measured, skipped = native_precisions(hardware)
    precisions, shape_times = {}, {}
    with torch.inference_mode():
        for precision in measured:
            times, linear_s, timed_linear_flops = {}, 0.0, 0.0
            for name, in_features, out_features, count in linear_shapes(shapes):
                seconds = time_linear(precision, tokens, in_features, out_features, repeat)
                times[name] = seconds
                linear_s += count * seconds
                timed_linear_flops += count * 2.0 * tokens * in_features * out_features
            band_s, band_flops = time_band(precision, shapes, tokens, repeat)
            times["band products (one layer)"] = band_s
            linear_rate, band_rate = timed_linear_flops / linear_s, band_flops / band_s
            precisions[precision] = PrecisionFloor(precision, linear_rate, band_rate,
                                                   floor_seconds(flops, linear_rate, band_rate),
                                                   floor_seconds(flops, linear_rate, linear_rate))
            shape_times[precision] = times
    return Floor(model=model_ref, tokens=tokens, threads=torch.get_num_threads(), linear_flops=flops.linear,
                 band_flops=flops.band, precisions=precisions, skipped=skipped, cpu_bf16=hardware.cpu_bf16,
                 shape_times_s=shape_times,
                 load_average=list(os.getloadavg()) if hasattr(os, "getloadavg") else None)


def floor_command(model: str, out_path: Path) -> list[str]:
    return [sys.executable, "-m", "bench.floor", str(out_path), "--model", model]


def run_floor(model: str, work_dir: Path, log_path: Path) -> dict:
    """The floor as a fresh process measured it (`measure_to`), or {"error": why} when it failed."""
    out_path = work_dir / "floor.json"
    out_path.unlink(missing_ok=True)
    with open(log_path, "a") as log:
        log.write("\n===== floor\n")
        log.flush()
        completed = subprocess.run(floor_command(model, out_path), stdout=log, stderr=subprocess.STDOUT,
                                   env=worker_env(), cwd=PROJECT_ROOT)
    if completed.returncode != 0 or not out_path.exists():
        return {"error": f"floor exited with code {completed.returncode}: {last_error_line(log_path)}"}
    return json.loads(out_path.read_text())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench floor", description="this CPU's compute floor of one "
                                     "window of --model per precision, measured in a fresh process: printed, and "
                                     "written to --out/floor.json with the machine; where --out holds the results of "
                                     "`python -m longqa bench --out DIR`, each of its CPU rows gets \"× floor\" in "
                                     "results.json and the floor's section in results.md")
    parser.add_argument("--model", default="arch:base")
    parser.add_argument("--out", default="bench-results", help="output folder (default bench-results/, as the bench's)")
    args = parser.parse_args(argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    machine = machine_info(detect_hardware())
    with tempfile.TemporaryDirectory(prefix="longqa-floor-") as work_dir:
        floor = run_floor(args.model, Path(work_dir), out_dir / "floor.log")
    if floor.get("error"):
        raise InputError(f"Could not measure the floor: {floor['error']}")
    (out_dir / "floor.json").write_text(json.dumps({"machine": machine, "floor": floor}, indent=2))
    print(format_floor(floor, machine))
    results = add_floor(out_dir, floor)
    if results is not None:
        print("\n".join(floor_lines(results)))
        print(f"put the rows of {out_dir / 'results.json'} beside the floor (results.json, results.md)",
              file=sys.stderr)
    return 0


def measure_to(argv: list[str]) -> int:
    """The floor's own process: `python -m bench.floor OUT.json [--model M]` writes the floor as JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench.floor")
    parser.add_argument("out", help="where to write the floor as JSON")
    parser.add_argument("--model", default="arch:base")
    parser.add_argument("--tokens", type=int, default=FLOOR_TOKENS)
    parser.add_argument("--repeat", type=int, default=REPEAT)
    args = parser.parse_args(argv)
    floor = measure_floor(args.model, tokens=args.tokens, repeat=args.repeat)
    with open(args.out, "w") as out:
        json.dump(floor.to_dict(), out, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(measure_to(sys.argv[1:]))
