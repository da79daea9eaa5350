"""Where one window's time goes: one 4,096-token window of arch:base (random weights) in the `cpu` profile under
torch.profiler, operators' self CPU time grouped by kind, tokenizing and decoding timed around it, beside this
CPU's measured floor:

    python -m bench window [--out docs/results/cpu-floor] [--cpu-kind detected|avx2|avx512-bf16] [--threads N]

Writes window-breakdown-<kind>.json and .md. An operator counts to the group of the nearest of itself and the
operators that called it that names a group (a `copy_` inside `addmm` is the Linear layer's bias, inside `_to_copy`
a dtype cast); what runs inside the fast attention's forward and names no group is the band's bookkeeping. It does
not change the model; `--cpu-kind avx2` profiles the stack a CPU without native bf16 gets (int8 + fast attention).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from bench.floor import Shapes, kind_name, linear_shapes, measure_floor, window_flops
from bench.floor_report import row_precision
from bench.measured import write_measurement
from longqa.bench.runner import cpu_flags, cpu_model
from longqa.bench.worker import agreement_inputs
from longqa.loader import load_model
from longqa.models import model_config
from longqa_core.answering import answer
from longqa_core.windows import make_windows
from strategies.fast_attention import SlidingWindowSelfAttention
from strategies.hardware import Hardware, detect_hardware, hardware_for

MODEL = "arch:base"
ATTENTION_SCOPE = "longqa::fast_attention"
PROJECTION_SCOPE = "longqa::fast_attention_projections"
# (group, operators): checked in this order against an operator and then each of its callers, nearest first.
NAMED_GROUPS = [
    ("matmul (Linear layers with their bias; the GELU too where prepacked_linear fuses it)",
     {"aten::addmm", "aten::mm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
      "quantized::linear_dynamic", "quantized::linear_dynamic_fp16", "mkldnn::_linear_pointwise"}),
    ("band kernel (the band's products, mask and softmax in one call: strategies/band_kernel.py)",
     {"longqa::band_kernel", "longqa::band_attention"}),  # the C call, and the operator's checks and copies
    ("attention (fused SDPA kernel: band and global products, softmax)",
     {"aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_attention_math",
      "aten::scaled_dot_product_attention"}),
    ("LayerNorm", {"aten::native_layer_norm", "aten::layer_norm"}),
    ("GELU", {"aten::gelu"}),
    ("softmax", {"aten::softmax", "aten::_softmax"}),
    ("padding", {"aten::constant_pad_nd", "aten::pad"}),
    ("dtype casts", {"aten::_to_copy"}),
    ("quantizing activations (int8)", {"aten::quantize_per_tensor_dynamic", "aten::_choose_qparams_per_tensor",
                                       "aten::quantize_per_tensor"}),
    ("masks", {"aten::masked_fill", "aten::masked_fill_", "aten::where", "aten::bitwise_and", "aten::bitwise_or",
               "aten::bitwise_not", "aten::__and__", "aten::__or__", "aten::__invert__", "aten::eq", "aten::ne",
               "aten::lt", "aten::le", "aten::gt", "aten::ge", "aten::logical_and", "aten::logical_or",
               "aten::logical_not", "aten::abs"}),
    ("residual adds", {"aten::add", "aten::add_"}),
    ("embeddings", {"aten::embedding"}),
]
COPIES = {"aten::copy_", "aten::clone", "aten::contiguous", "aten::cat", "aten::stack", "aten::scatter",
          "aten::gather", "aten::index_select", "aten::reshape", "aten::_unsafe_view", "aten::fill_", "aten::zero_",
          "aten::zeros", "aten::empty", "aten::empty_strided"}
BOOKKEEPING = "attention band bookkeeping (gather, scatter, band cat, argsort, index building)"
WEIGHT_CAT = "projection weights concatenated per call"


def callers(event) -> list[str]:
    names, parent = [], event.cpu_parent
    while parent is not None:
        names.append(parent.name)
        parent = parent.cpu_parent
    return names


def group_of(event) -> str:
    chain = callers(event)
    for name in [event.name, *chain]:
        for group, operators in NAMED_GROUPS:
            if name in operators:
                return group
    if PROJECTION_SCOPE in chain:
        return WEIGHT_CAT
    if ATTENTION_SCOPE in chain:
        return BOOKKEEPING
    if event.name in COPIES:
        return "copies (outside the attention)"
    return "other"


def grouped_self_time_s(events) -> dict[str, dict]:
    """Self CPU seconds per group, and per group its heaviest operators."""
    groups: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for event in events:
        if event.name in (ATTENTION_SCOPE, PROJECTION_SCOPE) or event.self_cpu_time_total <= 0:
            continue
        groups[group_of(event)][event.name] += event.self_cpu_time_total / 1e6
    return {group: {"self_s": sum(ops.values()),
                    "operators_s": {name: seconds for name, seconds in sorted(ops.items(), key=lambda item: -item[1])
                                    if seconds >= 0.0005}}
            for group, ops in sorted(groups.items(), key=lambda item: -sum(item[1].values()))}


def annotate_attention(model: torch.nn.Module) -> None:
    """Each fast-attention forward, and its fused projections, inside profiler ranges, so their ops can be told
    apart from the rest (the concatenation of the projection weights from the band's own `cat`)."""
    for module in model.modules():
        if isinstance(module, SlidingWindowSelfAttention):
            def project(hidden_states, _project=module._project):
                with record_function(PROJECTION_SCOPE):
                    return _project(hidden_states)

            module._project = project

            def enter(mod, args, kwargs):
                mod._profile_range = record_function(ATTENTION_SCOPE)
                mod._profile_range.__enter__()

            def leave(mod, args, kwargs, output):
                mod._profile_range.__exit__(None, None, None)

            module.register_forward_pre_hook(enter, with_kwargs=True)
            module.register_forward_hook(leave, with_kwargs=True)


LINEAR_OPERATORS = ("mkldnn::_linear_pointwise", "aten::addmm", "aten::linear", "quantized::linear_dynamic")


def linear_by_shape(events) -> dict[str, dict]:
    """Self CPU seconds, calls and FLOPs of the Linear layers' operators per rows x (in, out) features ("4096x768->
    3840"), from the profiler's recorded input shapes: (rows, in) or (B, rows, in) inputs, (out, in) weights."""
    shapes: dict[str, dict] = {}
    for event in events:
        if event.name not in LINEAR_OPERATORS or len(event.input_shapes) < 2 or event.self_cpu_time_total <= 0:
            continue
        x, weight = event.input_shapes[0], event.input_shapes[1]
        if event.name == "aten::addmm":  # (bias, x, weight transposed)
            x, weight = event.input_shapes[1], event.input_shapes[2][::-1]
        elif len(weight) != 2 and len(event.input_shapes) > 2:  # the fused residual add: (x, residual, weight, ...)
            weight = event.input_shapes[2]
        if len(x) < 2 or len(weight) != 2:
            continue
        rows, in_features, out_features = 1, x[-1], weight[0]
        for size in x[:-1]:
            rows *= size
        entry = shapes.setdefault(f"{rows}x{in_features}->{out_features}",
                                  {"self_s": 0.0, "calls": 0, "flops": 0.0})
        entry["self_s"] += event.self_cpu_time_total / 1e6
        entry["calls"] += 1
        entry["flops"] += 2.0 * rows * in_features * out_features
    return shapes


def profile_window(model_ref: str, hardware: Hardware, tokens: int, repeat: int) -> dict:
    loaded = load_model(model_ref, "cpu", hardware=hardware)
    tokenizer = loaded.tokenizer
    annotate_attention(loaded.model)
    check = agreement_inputs(tokenizer, tokens, 1)[0]
    settings = loaded.settings.resolved(tokenizer)

    def ask():
        return answer(loaded.runner, tokenizer, [check.document], check.question, settings)

    ask()  # warm-up
    runs = [ask().latency_s for _ in range(repeat)]
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as profiler:
        profiled = ask().latency_s
    groups = grouped_self_time_s(profiler.events())
    operators_s = sum(group["self_s"] for group in groups.values())
    return {
        "strategies": list(loaded.readout.strategies), "dtype": loaded.readout.dtype,
        "precision": row_precision(loaded.readout.strategies, loaded.readout.dtype),
        "window_tokens": len(make_windows(tokenizer, check.question, [check.document], settings)[0][0]
                             .input_ids),
        "runs": repeat,
        "tokenize_s": statistics.median(r["tokenize"] for r in runs),
        "forward_s": statistics.median(r["forward"] for r in runs),
        "decode_s": statistics.median(r["decode"] for r in runs),
        "total_s": statistics.median(r["total"] for r in runs),
        "profiled_forward_s": profiled["forward"],
        "operators_self_s": operators_s,
        "outside_operators_s": max(profiled["forward"] - operators_s, 0.0),
        "groups": groups,
        "linear_by_shape": linear_by_shape(profiler.events()),
    }


def format_markdown(result: dict) -> str:
    breakdown, floor, machine = result["breakdown"], result["floor"], result["machine"]
    precision = breakdown["precision"]
    floor_s = floor["precisions"][precision]["floor_s"]
    profiled = breakdown["profiled_forward_s"]
    flops = result["window_flops"]
    second_s = flops["total"] / floor["precisions"][precision]["linear_flops_per_s"]
    lines = [f"# One `cpu` window, where the time goes ({machine['kind']})", "",
             f"`{result['command']}`", "",
             f"CPU: {machine['cpu_model']}, {machine['bf16_flags']} CPUs with avx512_bf16 "
             f"(`grep -c avx512_bf16 /proc/cpuinfo`), features: {', '.join(machine['cpu_flags']) or '–'}; "
             f"{machine['threads']} threads; load average {machine['load_average'][0]:.1f} when it began; "
             f"torch {machine['torch']}.", "",
             f"{result['model']}, one window of {breakdown['window_tokens']:,} tokens, `cpu` profile as it resolves for this "
             f"kind: {', '.join(breakdown['strategies'])} ({breakdown['dtype']}), so its floor is the {precision} "
             f"floor.", "",
             "| | seconds | × floor | × floor, band at the Linear rate |", "|---|---|---|---|",
             f"| floor ({precision}, measured: {flops['total'] / 1e12:.3f} TFLOP at "
             f"{floor['precisions'][precision]['linear_flops_per_s'] / 1e9:.0f} GFLOP/s linear, "
             f"{floor['precisions'][precision]['band_flops_per_s'] / 1e9:.0f} band) | {floor_s:.2f} | 1.00 | "
             f"{floor_s / second_s:.2f} |",
             f"| floor with the band's needed products at the Linear layers' rate | {second_s:.2f} | "
             f"{second_s / floor_s:.2f} | 1.00 |"]
    for label, key in (("tokenizing", "tokenize_s"), ("forward", "forward_s"), ("decoding", "decode_s"),
                       ("whole request", "total_s")):
        lines.append(f"| {label} (median of {breakdown['runs']}) | {breakdown[key]:.3f} | "
                     f"{breakdown[key] / floor_s:.2f} | {breakdown[key] / second_s:.2f} |")
    lines += ["", f"The forward under the profiler took {profiled:.2f} s (the profiler's own cost included). "
              "Self CPU time of its operators, grouped:", "",
              "| group | s | share of the profiled forward | heaviest operators (s) |", "|---|---|---|---|"]
    for group, values in breakdown["groups"].items():
        operators = ", ".join(f"`{name}` {seconds:.3f}" for name, seconds in list(values["operators_s"].items())[:5])
        lines.append(f"| {group} | {values['self_s']:.3f} | {values['self_s'] / profiled:.0%} | {operators} |")
    lines.append(f"| outside any operator (Python, dispatch) | {breakdown['outside_operators_s']:.3f} | "
                 f"{breakdown['outside_operators_s'] / profiled:.0%} | |")
    matmul = next((v["self_s"] for g, v in breakdown["groups"].items() if g.startswith("matmul")), None)
    sdpa = next((v["self_s"] for g, v in breakdown["groups"].items() if g.startswith("attention (fused")), None)
    kernel = next((v["self_s"] for g, v in breakdown["groups"].items() if g.startswith("band kernel")), None)
    lines.append("")
    if matmul:
        lines.append(f"The Linear layers ran at {flops['linear'] / matmul / 1e9:.0f} GFLOP/s "
                     f"({flops['linear'] / 1e12:.3f} TFLOP in {matmul:.2f} s) against "
                     f"{floor['precisions'][precision]['linear_flops_per_s'] / 1e9:.0f} measured on their shapes.")
    by_shape = breakdown.get("linear_by_shape") or {}
    shape_times = floor["shape_times_s"].get(precision, {})
    if by_shape:
        lines += ["", "The Linear layers by shape, in the window (self CPU time under the profiler) against the same "
                  "shapes timed alone for the floor:", "",
                  "| layer (rows × in → out) | calls | s in the window | GFLOP/s in the window | GFLOP/s alone | "
                  "share |",
                  "|---|---|---|---|---|---|"]
        alone = {f"{result['tokens']}x{in_features}->{out_features}": (name, 2.0 * result["tokens"] * in_features * out_features
                                                    / shape_times[name])
                 for name, in_features, out_features, _ in linear_shapes(Shapes.from_config(model_config(
                     result["model"]))) if name in shape_times}
        for key, entry in sorted(by_shape.items(), key=lambda item: -item[1]["self_s"]):
            name, rate = alone.get(key, (key, None))
            in_window = entry["flops"] / entry["self_s"]
            lines.append(f"| {name} ({key.replace('x', ' × ', 1).replace('->', ' → ')}) | {entry['calls']} | "
                         f"{entry['self_s']:.3f} | "
                         f"{in_window / 1e9:,.0f} | {f'{rate / 1e9:,.0f}' if rate else '–'} | "
                         f"{f'{in_window / rate:.0%}' if rate else '–'} |")
        lines.append("")
    if kernel:
        lines.append(f"The band kernel did the band's {flops['band'] / 1e12:.3f} TFLOP (2w+1 keys per query) in "
                     f"{kernel:.2f} s: {flops['band'] / kernel / 1e9:.0f} GFLOP/s of needed work, against "
                     f"{floor['precisions'][precision]['band_flops_per_s'] / 1e9:.0f} on the band's bare products "
                     f"(the fused SDPA kernel's {sdpa or 0:.2f} s are the global rows only).")
    elif sdpa:
        lines.append(f"The fused attention kernel did the band's {flops['band'] / 1e12:.3f} TFLOP (2w+1 keys per "
                     f"query) in {sdpa:.2f} s: {flops['band'] / sdpa / 1e9:.0f} GFLOP/s of needed work, against "
                     f"{floor['precisions'][precision]['band_flops_per_s'] / 1e9:.0f} on the band's bare products.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench window", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="docs/results/cpu-floor")
    parser.add_argument("--cpu-kind", choices=("detected", "avx2", "avx512-bf16"), default="detected",
                        help="resolve the cpu profile as this kind of CPU would (default: as detected)")
    parser.add_argument("--model", default=MODEL, help="default arch:base (random weights)")
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=2, help="unprofiled runs after the warm-up (median)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch's threads for the floor and the window (default: torch's own); with it, the "
                             "files are named ...-N-thread")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    hardware = hardware_for(args.cpu_kind)
    floor = measure_floor(args.model, tokens=args.tokens, hardware=detect_hardware())
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    machine = {"cpu_model": cpu_model(), "cpu_flags": cpu_flags(), "bf16_flags": cpuinfo.count("avx512_bf16"),
               "kind": f"{'native bf16' if detect_hardware().cpu_bf16 else 'no native bf16'} CPU"
                       + ("" if args.cpu_kind == "detected" else f", profile resolved as {args.cpu_kind}"),
               "threads": torch.get_num_threads(), "torch": torch.__version__, "python": platform.python_version(),
               "load_average": list(os.getloadavg())}
    breakdown = profile_window(args.model, hardware, args.tokens, args.repeat)
    flops = window_flops(Shapes.from_config(model_config(args.model)), breakdown["window_tokens"])
    command = "python -m bench window" + "".join(
        f" {flag} {value}" for flag, value in (("--model", args.model), ("--out", args.out),
                                               ("--cpu-kind", args.cpu_kind), ("--threads", args.threads))
        if value != parser.get_default(flag.lstrip("-").replace("-", "_")))
    result = {"command": command, "model": args.model, "tokens": args.tokens, "machine": machine,
              "floor": floor.to_dict(),
              "window_flops": {"linear": flops.linear, "band": flops.band, "total": flops.total},
              "breakdown": breakdown}
    stem = f"window-breakdown-{kind_name(hardware)}" + (f"-{args.threads}-thread" if args.threads else "")
    write_measurement(args.out, stem, result, format_markdown(result))
    return 0

