"""The bf16 band kernels side by side in one process (AMX and AVX-512 BF16, those that run here): one layer's band of
a base-model window (4,096 tokens, 12 heads of 64, w = 256, a question of 24 global tokens), interleaved over rounds,
the best time of each, its GFLOP/s of needed work (2w+1 keys per query) and the ratio:

    python -m bench kernels [--out docs/results/cpu-floor] [--rounds 8] [--threads N] [--also REV]

`--also REV` times the AMX kernel as it was at git revision REV beside them (built from that revision's source and
header), for a before-and-after in one process. Writes band-kernels-<kind>.json and .md. Process CPU time is recorded beside wall time: on a loaded machine it is the
steadier of the two (a single thread's CPU seconds are its own work).
"""

from __future__ import annotations

import argparse
import time

import torch

from bench.kernel_revisions import kernel_at
from bench.measured import measured_here, write_measurement
from strategies import band_kernel

SHAPE = {"batch": 1, "length": 4096, "heads": 12, "head_dim": 64, "window": 256, "n_global": 24}


def band_case(batch, length, heads, head_dim, window, n_global, seed=0):
    """q, k, v as the fused projection hands them (views of one (B, L, 5D) tensor), global keys and values, masks."""
    generator = torch.Generator().manual_seed(seed)
    fused = torch.randn(batch, length, 5 * heads * head_dim, generator=generator).to(torch.bfloat16)
    q, k, v, _, _ = (x.view(batch, length, heads, head_dim) for x in fused.split(heads * head_dim, -1))
    k_global, v_global = (torch.randn(batch, heads, n_global, head_dim, generator=generator).to(torch.bfloat16)
                          for _ in range(2))
    key_ok = torch.ones(batch, length, dtype=torch.bool)
    key_ok[:, :n_global] = False  # the question's tokens are the global ones
    slot_used = torch.ones(batch, n_global, dtype=torch.bool)
    return q, k, v, k_global, v_global, key_ok, slot_used, window


def needed_flops(batch, length, heads, head_dim, window, n_global) -> float:
    """Both products over each query's 2w+1 band keys (the floor's count; global keys left out as there)."""
    return 2.0 * 2 * batch * length * heads * head_dim * (2 * window + 1)


def measure(rounds: int, also: str | None = None) -> dict:
    kernels, skipped = {}, {}
    for spec in band_kernel.variants(torch.bfloat16):
        loaded = band_kernel.skip_reason(spec) or band_kernel.open_variant(spec)
        if isinstance(loaded, band_kernel.BandKernel):
            kernels[spec.name] = loaded
        else:
            skipped[spec.name] = str(loaded)
    if also:  # where the AMX kernel runs
        why_not = band_kernel.skip_reason(band_kernel.AMX_BUILD)
        if why_not is None:
            kernels[f"AMX at {also}"] = kernel_at(also)
        else:
            skipped[f"AMX at {also}"] = str(why_not)
    case = band_case(**SHAPE)
    wall = {name: float("inf") for name in kernels}
    cpu = dict(wall)
    outputs = {name: kernel(*case) for name, kernel in kernels.items()}  # warm-up, and the outputs compared
    for _ in range(rounds):
        for name, kernel in kernels.items():
            began_wall, began_cpu = time.perf_counter(), time.process_time()
            kernel(*case)
            wall[name] = min(wall[name], time.perf_counter() - began_wall)
            cpu[name] = min(cpu[name], time.process_time() - began_cpu)
    flops = needed_flops(**SHAPE)
    names = list(kernels)
    first = outputs[names[0]].float()
    return {"shape": SHAPE, "needed_flops": flops, "rounds": rounds, "threads": torch.get_num_threads(),
            "kernels": {name: {"best_wall_s": wall[name], "best_cpu_s": cpu[name],
                               "gflops_per_s": flops / wall[name] / 1e9, "file": kernels[name].path.name,
                               "max_abs_difference_from_first": (outputs[name].float() - first).abs().max().item()}
                        for name in names},
            "skipped": skipped}


def format_markdown(result: dict) -> str:
    machine = result["machine"]
    lines = [f"# The bf16 band kernels side by side ({machine['kind']})", "", f"`{result['command']}`", "",
             f"CPU: {machine['cpu_model']} ({machine['kind']}); {result['threads']} threads; load average "
             f"{machine['load_average_before'][0]:.1f} before, {machine['load_average_after'][0]:.1f} after"
             f"{' (loaded machine: ratios hold better than absolute times)' if machine['loaded'] else ''}; "
             f"torch {machine['torch']}.", "",
             f"One layer's band of a base-model window: {result['shape']}; "
             f"{result['needed_flops'] / 1e9:.1f} GFLOP of needed work (2w+1 keys per query, both products). "
             f"Best of {result['rounds']} interleaved rounds.", "",
             f"| kernel | best wall s | GFLOP/s of needed work | best CPU s (all threads) | × the slowest | "
             f"largest difference from {next(iter(result['kernels']))} |",
             "|---|---|---|---|---|---|"]
    slowest = max(k["best_wall_s"] for k in result["kernels"].values())
    for name, k in result["kernels"].items():
        lines.append(f"| {name} (`{k['file']}`) | {k['best_wall_s']:.4f} | {k['gflops_per_s']:.0f} | "
                     f"{k['best_cpu_s']:.4f} | {slowest / k['best_wall_s']:.2f} | "
                     f"{k['max_abs_difference_from_first']:.4f} |")
    lines += [f"| {name} | not run: {why} | | | | |" for name, why in result["skipped"].items()]
    lines += ["", "Outputs are of unit scale: differences are bf16 rounding (the AMX kernel rounds the softmax's "
              "numerators, the AVX-512 kernel the probabilities)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench kernels", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="docs/results/cpu-floor")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--threads", type=int, default=None, help="default: torch's")
    parser.add_argument("--also", metavar="REV", help="also time the AMX kernel as it was at this git revision")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    result = measured_here(lambda: measure(args.rounds, args.also))
    result["command"] = "python -m bench kernels" + (
        f" --threads {args.threads}" if args.threads else "") + (
        f" --rounds {args.rounds}" if args.rounds != 8 else "") + (f" --also {args.also}" if args.also else "")
    stem = f"band-kernels-{result['machine']['kind']}" + (f"-{args.threads}-thread" if args.threads else "")
    write_measurement(args.out, stem, result, format_markdown(result))
    return 0

