"""One `cpu` window against its two floors in CPU seconds of one thread, for a machine other work is loading: wall
time there measures the neighbours as much as the code, while one thread's CPU seconds are its own work (cache and
memory bandwidth still shared). In one process, interleaved over rounds, best of each:

- the floor's shapes (arch:base at 4,096 tokens): each Linear layer's (prepacked oneDNN bf16, as `cpu` runs them),
  the band's bare batched products of SDPA-shaped blocks (the project's floor), and from them both floors: the band
  at its bare products' rate, and the band's needed products at the Linear layers' rate;
- the `cpu` forward of one window, with each bf16 band kernel variant that runs here (AMX, AVX-512 BF16), and the
  CPU seconds its Linear layers took inside it (per shape, against the same shapes alone).

    python -m bench cpu-seconds [--out docs/results/cpu-floor] [--rounds 4] [--also REV]

`--also REV` adds the window with the AMX band kernel as it was at git revision REV, for a before-and-after in one
process. Writes cpu-seconds-<kind>.json and .md.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import defaultdict

import torch

from bench.floor import Shapes, band_products, linear_shapes, window_flops
from bench.kernel_revisions import computing_with, kernel_at
from bench.measured import measured_here, write_measurement
from longqa.loader import load_model
from longqa.models import model_config
from strategies import band_kernel
from strategies.hardware import detect_hardware
from strategies.prepacked_linear import PackedLinear

MODEL = "arch:base"
TOKENS = 4096
QUESTION_TOKENS = 24


def cpu_seconds(call) -> float:
    began = time.thread_time()
    call()
    return time.thread_time() - began


def shape_calls(shapes: Shapes) -> dict:
    """name -> (call, FLOPs, times per window) for the Linear shapes and the band's bare products (one layer)."""
    calls = {}
    for name, in_features, out_features, count in linear_shapes(shapes):
        x = torch.randn(1, TOKENS, in_features).to(torch.bfloat16)  # (1, L, in), as the model calls them
        weight = (torch.randn(out_features, in_features) / in_features ** 0.5).to(torch.bfloat16)
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, None)
        bias = torch.zeros(out_features, dtype=torch.bfloat16)
        calls[name] = (lambda x=x, packed=packed, bias=bias:
                       torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], ""),
                       2.0 * TOKENS * in_features * out_features, count)
    (batch, w, keys, head_dim), flops = band_products(shapes, TOKENS)
    q, k, v = (torch.randn(batch, rows, head_dim).to(torch.bfloat16) for rows in (w, keys, keys))
    p = torch.softmax(torch.randn(batch, w, keys), -1).to(torch.bfloat16)
    calls["band's bare products (one layer)"] = (lambda: (torch.bmm(q, k.transpose(1, 2)), torch.bmm(p, v)),
                                                 flops, shapes.layers)
    return calls


def window_inputs() -> dict:
    ids = torch.randint(5, 1000, (1, TOKENS), generator=torch.Generator().manual_seed(0))
    global_mask = torch.zeros_like(ids)
    global_mask[:, :QUESTION_TOKENS] = 1
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "global_attention_mask": global_mask}


def time_linears_inside(model) -> dict:
    """Wrap every PackedLinear's forward to add its CPU seconds and FLOPs per (rows, in, out) to the returned dict."""
    spent = defaultdict(lambda: [0.0, 0.0])

    def timed(call, module):
        def run(x, *residual):
            began = time.thread_time()
            y = call(x, *residual)
            rows = x.numel() // module.in_features
            entry = spent[f"{rows}x{module.in_features}->{module.out_features}"]
            entry[0] += time.thread_time() - began
            entry[1] += 2.0 * rows * module.in_features * module.out_features
            return y

        return run

    for module in model.modules():
        if isinstance(module, PackedLinear):
            module.forward = timed(module.forward, module)
            module.add_to = timed(module.add_to, module)  # the fused residual adds call it instead of forward
    return spent


def band_variant(key: str | None):
    """Context for one forward with LONGQA_BAND_KERNEL=key (None: as configured)."""
    class Variant:
        def __enter__(self):
            self.saved = os.environ.get(band_kernel.DISABLE_VARIABLE)
            if key is not None:
                os.environ[band_kernel.DISABLE_VARIABLE] = key
            band_kernel.load.cache_clear()

        def __exit__(self, *error):
            os.environ.pop(band_kernel.DISABLE_VARIABLE, None)
            if self.saved is not None:
                os.environ[band_kernel.DISABLE_VARIABLE] = self.saved
            band_kernel.load.cache_clear()

    return Variant()


def measure(rounds: int, also: str | None = None) -> dict:
    torch.set_num_threads(1)
    shapes = Shapes.from_config(model_config(MODEL))
    flops = window_flops(shapes, TOKENS)
    calls = shape_calls(shapes)
    loaded = load_model(MODEL, "cpu", hardware=detect_hardware())
    spent = time_linears_inside(loaded.model)
    inputs = window_inputs()
    variants = {spec.name: (lambda key=spec.key: band_variant(key)) for spec in band_kernel.variants(torch.bfloat16)
                if not isinstance(band_kernel.skip_reason(spec) or band_kernel.open_variant(spec),
                                  band_kernel.KernelUnavailable)}
    if also and band_kernel.skip_reason(band_kernel.AMX_BUILD) is None:  # the AMX kernel's past, where it runs
        old = kernel_at(also)
        variants[old.spec.name] = lambda: computing_with(old)
    best = defaultdict(lambda: float("inf"))
    linear_inside = {}
    with torch.inference_mode():
        for round_ in range(rounds + 1):  # the first round warms up
            for name, (call, _, _) in calls.items():
                seconds = cpu_seconds(call)
                if round_:
                    best[name] = min(best[name], seconds)
            for name, variant in variants.items():
                with variant():
                    spent.clear()
                    seconds = cpu_seconds(lambda: loaded.model(**inputs))
                if round_ and seconds < best[f"window, band kernel on {name}"]:
                    best[f"window, band kernel on {name}"] = seconds
                    if name == next(iter(variants)):
                        linear_inside = {shape: {"cpu_s": s, "flops": f} for shape, (s, f) in spent.items()}
    linear_s = sum(count * best[name] for name, (_, _, count) in calls.items() if not name.startswith("band"))
    linear_rate = flops.linear / linear_s  # the window's Linear FLOPs (qa_outputs included) at the shapes' rate
    band_name = "band's bare products (one layer)"
    band_rate = calls[band_name][1] / best[band_name]
    return {"model": MODEL, "tokens": TOKENS, "rounds": rounds, "threads": 1,
            "window_flops": {"linear": flops.linear, "band": flops.band},
            "best_cpu_s": dict(best),
            "linear_flops_per_s": linear_rate, "band_bare_products_flops_per_s": band_rate,
            "floor_cpu_s": flops.linear / linear_rate + flops.band / band_rate,
            "floor_band_at_linear_rate_cpu_s": (flops.linear + flops.band) / linear_rate,
            "shape_flops": {name: flops_ for name, (_, flops_, _) in calls.items()},
            "linear_inside_window": linear_inside}


def format_markdown(result: dict) -> str:
    machine, best = result["machine"], result["best_cpu_s"]
    first, second = result["floor_cpu_s"], result["floor_band_at_linear_rate_cpu_s"]
    lines = [f"# One `cpu` window against its floors, in CPU seconds of one thread ({machine['kind']})", "",
             f"`{result['command']}`", "",
             f"CPU: {machine['cpu_model']} ({machine['kind']}); 1 thread; load average "
             f"{machine['load_average_before'][0]:.1f} before, {machine['load_average_after'][0]:.1f} after"
             f"{' (loaded machine: CPU seconds of one thread, not wall time)' if machine['loaded'] else ''}; torch "
             f"{machine['torch']}. {result['model']} (random weights), one window of {result['tokens']:,} tokens, "
             f"{QUESTION_TOKENS} global tokens; best of {result['rounds']} interleaved rounds after a warm-up.", "",
             "| | CPU s | × floor | × floor, band at the Linear rate |", "|---|---|---|---|",
             f"| floor: Linear layers at {result['linear_flops_per_s'] / 1e9:,.0f} GFLOP/s, band at its bare "
             f"products' {result['band_bare_products_flops_per_s'] / 1e9:,.0f} | {first:.3f} | 1.00 | "
             f"{first / second:.2f} |",
             f"| floor, the band's needed products at the Linear layers' rate | {second:.3f} | {second / first:.2f} | "
             "1.00 |"]
    for name, seconds in best.items():
        if name.startswith("window"):
            lines.append(f"| {name} | {seconds:.3f} | {seconds / first:.2f} | {seconds / second:.2f} |")
    lines += ["", "The Linear layers inside the window (the AMX variant's best round, or the first variant's) against "
              "the same shapes alone:", "",
              "| rows × in → out | CPU s in the window | GFLOP/s in the window | GFLOP/s alone | share |",
              "|---|---|---|---|---|"]
    alone = {}
    for name, flops in result["shape_flops"].items():
        if not name.startswith("band"):
            alone[name] = flops / best[name]
    by_size = {f"{TOKENS}x{i}->{o}": name for name, i, o, _ in linear_shapes(Shapes.from_config(
        model_config(result["model"])))}
    total_s = total_flops = 0.0
    for shape, entry in sorted(result["linear_inside_window"].items(), key=lambda item: -item[1]["cpu_s"]):
        rate = entry["flops"] / entry["cpu_s"]
        total_s, total_flops = total_s + entry["cpu_s"], total_flops + entry["flops"]
        name = by_size.get(shape)
        reference = alone.get(name) if name else None
        lines.append(f"| {shape.replace('x', ' × ', 1).replace('->', ' → ')}{f' ({name})' if name else ''} | "
                     f"{entry['cpu_s']:.3f} | {rate / 1e9:,.0f} | {f'{reference / 1e9:,.0f}' if reference else '–'} | "
                     f"{f'{rate / reference:.0%}' if reference else '–'} |")
    if total_s:
        lines.append(f"| all | {total_s:.3f} | {total_flops / total_s / 1e9:,.0f} | "
                     f"{result['linear_flops_per_s'] / 1e9:,.0f} | "
                     f"{total_flops / total_s / result['linear_flops_per_s']:.0%} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench cpu-seconds", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="docs/results/cpu-floor")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--also", metavar="REV", help="also the window with the AMX kernel as it was at this revision")
    args = parser.parse_args(argv)
    result = measured_here(lambda: measure(args.rounds, args.also))
    result["command"] = "python -m bench cpu-seconds" + (
        f" --rounds {args.rounds}" if args.rounds != 4 else "") + (f" --also {args.also}" if args.also else "")
    write_measurement(args.out, f"cpu-seconds-{result['machine']['kind']}", result, format_markdown(result))
    return 0

