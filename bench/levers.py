"""Issue 29's levers, one at a time, side by side in one process: the forward time of one 4,096-token window of
arch:base (random weights) for each variant of the `cpu` stack this CPU resolves to, interleaved over rounds (best of
the rounds per variant), beside this CPU's measured floor:

    python -m bench levers [--out docs/results/cpu-floor] [--rounds 6] [--compile] [--cpu-kind avx2]

Variants: the stack before this work (the attention's plan rebuilt in every layer, the band on SDPA), the plan
once per forward, prepacked oneDNN Linear layers, the band kernel (today's `cpu` where it runs: bf16 with AVX-512
BF16), query blocks of w/2 and w/4 (SDPA), batches of 2 and 4 windows, glibc's heap trimmed after every forward,
4× more threads than CPUs, and with --compile `torch.compile` (static shapes, freezing) of the encoder layers.
`--cpu-kind avx2` measures the stack `cpu` resolves to on a CPU without native bf16 (int8 Linear layers, the fp32
band) on this machine, against its int8 floor: written as levers-avx2-stack-on-<this kind>. Writes
levers-<kind>.json and .md. (Threads under a CPU quota, as on a Space: docs/cpu-floor.md.)
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import torch
import torch._dynamo.config as dynamo_config
import torch._inductor.config as inductor_config
from torch.nn import functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from transformers.masking_utils import create_bidirectional_mask

from bench.floor import best_time_s, kind_name, measure_floor
from bench.floor_report import row_precision
from bench.measured import write_measurement
from longqa.bench.runner import cpu_flags, cpu_model
from longqa.bench.worker import agreement_inputs
from longqa.loader import load_model
from longqa_core import batching, telemetry
from longqa_core.limits import EngineSettings
from longqa_core.windows import make_windows
from strategies import band_kernel, fast_attention
from strategies.fast_attention import BandPlanCache, SlidingWindowSelfAttention
from strategies.hardware import detect_hardware, hardware_for
from strategies.profiles import custom_profile, get_profile, select_strategies

MODEL = "arch:base"
TOKENS = 4096


def attentions(model):
    return [m for m in model.modules() if isinstance(m, SlidingWindowSelfAttention)]


class Variant:
    """A named way to run the forward: a model, the inputs, and what to set before and undo after."""

    def __init__(self, name, model, inputs, windows=1, settings=(), each=None):
        """`settings`: (set, reset) pairs, set before each run and reset after it."""
        self.name, self.model, self.inputs, self.windows = name, model, inputs, windows
        self.settings, self.each = tuple(settings), each
        self.best_s = float("inf")
        self.rss_after_bytes = None

    def run(self) -> torch.Tensor:
        for set_, _ in self.settings:
            set_()
        try:
            began = time.perf_counter()
            with torch.inference_mode():
                start = self.model(**self.inputs).start_logits
            if self.each:
                self.each()
            self.best_s = min(self.best_s, (time.perf_counter() - began) / self.windows)
            self.rss_after_bytes = telemetry.current_rss_bytes()
            return start[0].float()
        finally:
            for _, reset in reversed(self.settings):
                reset()


def per_layer_plans(model):
    """The attention before this work: each layer its own plan cache, so each builds the masks again."""
    shared = attentions(model)[0].plans

    def split():
        for attention in attentions(model):
            attention.plans = BandPlanCache()

    def join():
        for attention in attentions(model):
            attention.plans = shared

    return split, join


def attention_setting(name, value):
    """Set a class attribute of the fast attention (`query_block_divisor`, `use_band_kernel`) for one run."""
    default = getattr(SlidingWindowSelfAttention, name)
    return (lambda: setattr(SlidingWindowSelfAttention, name, value),
            lambda: setattr(SlidingWindowSelfAttention, name, default))


SDPA_BAND = attention_setting("use_band_kernel", False)


def band_kernel_variant(key: str):
    """Ask for one band kernel variant (LONGQA_BAND_KERNEL=amx, avx512, avx2) for one run; each is built and loaded
    once per process, so switching costs nothing after the first run."""
    saved = os.environ.get(band_kernel.DISABLE_VARIABLE)

    def set_():
        os.environ[band_kernel.DISABLE_VARIABLE] = key
        band_kernel.load.cache_clear()

    def reset():
        if saved is None:
            os.environ.pop(band_kernel.DISABLE_VARIABLE, None)
        else:
            os.environ[band_kernel.DISABLE_VARIABLE] = saved
        band_kernel.load.cache_clear()

    return set_, reset


def full_padding_mask():
    """transformers' own (B, 1, L, L) padding mask, of which Longformer keeps row 0, for one run (the fast attention
    has it build that row only: strategies/fast_attention.first_row_bidirectional_mask)."""
    first_row = fast_attention.first_row_bidirectional_mask
    return (lambda: setattr(fast_attention, "first_row_bidirectional_mask", create_bidirectional_mask),
            lambda: setattr(fast_attention, "first_row_bidirectional_mask", first_row))


def threads(count):
    saved = torch.get_num_threads()
    return lambda: torch.set_num_threads(count), lambda: torch.set_num_threads(saved)


def compiled_copy(stack, hardware):
    """The stack without prepacking, its encoder layers compiled with static shapes and freezing (inductor packs
    the weights itself); returns the model and the seconds of compiling (the first call)."""
    inductor_config.freezing = True
    dynamo_config.recompile_limit = dynamo_config.cache_size_limit = 64  # one graph per layer: each has its weights
    model = load_model(MODEL, custom_profile(stack, device="cpu"), hardware=hardware).model
    layers = model.longformer.encoder.layer
    for index, layer in enumerate(layers):
        layers[index] = torch.compile(layer, dynamic=False)
    return model


def attention_alone(dtype: torch.dtype, rounds: int) -> dict:
    """One layer's band, three ways, on arch:base's shapes (12 heads of 64, w = 256, 24 global tokens): SDPA over
    blocks of w queries and their 3w keys as the fast attention calls it, the same blocks' two bare products (no
    mask, no softmax), FlexAttention compiled with a block-sparse mask (blocks of 64 and of 128), and the band
    kernel where it runs (bf16 with AVX-512 BF16)."""
    heads, head_dim, w, n_global, length = 12, 64, 256, 24, TOKENS
    blocks = length // w
    q, k, v = (torch.randn(1, heads, length, head_dim, dtype=dtype) for _ in range(3))  # (B, H, L, d)
    q_blocks = torch.randn(blocks, heads, w, head_dim, dtype=dtype)  # (nb, H, w, d)
    keys = torch.randn(blocks, heads, n_global + 3 * w, head_dim, dtype=dtype)  # (nb, H, G+3w, d)
    bias = torch.zeros(blocks, 1, w, n_global + 3 * w, dtype=dtype)
    scores = torch.randn(blocks * heads, w, n_global + 3 * w, dtype=dtype)

    def best(call):  # one warm-up, then the best of `rounds`
        return best_time_s(call, repeat=rounds)

    flat_q, flat_k = q_blocks.reshape(blocks * heads, w, head_dim), keys.reshape(blocks * heads, -1, head_dim)
    result = {"sdpa_blocks_of_w_s": best(lambda: F.scaled_dot_product_attention(q_blocks, keys, keys,
                                                                                attn_mask=bias)),
              "bare_products_s": best(lambda: (torch.bmm(flat_q, flat_k.transpose(1, 2)), torch.bmm(scores, flat_k)))}

    def band(b, h, query, key):
        return ((query - key).abs() <= w) | (key < n_global)

    kernel = band_kernel.kernel(dtype)
    if kernel is not None:
        token_major = [x.transpose(1, 2) for x in (q, k, v)]  # (B, L, H, d) views, as the projection's split gives
        globals_ = k[:, :, :n_global].contiguous()
        key_ok = torch.ones(1, length, dtype=torch.bool)
        key_ok[:, :n_global] = False
        used = torch.ones(1, n_global, dtype=torch.bool)
        result["band_kernel_s"] = best(lambda: kernel(*token_major, globals_, globals_, key_ok, used, w))

    compiled = torch.compile(flex_attention, dynamic=False)
    for block in (64, 128):
        mask = create_block_mask(band, 1, None, length, length, device="cpu", BLOCK_SIZE=block)
        began = time.perf_counter()
        compiled(q, k, v, block_mask=mask)
        result[f"flex_block_{block}_compile_s"] = time.perf_counter() - began
        result[f"flex_block_{block}_s"] = best(lambda: compiled(q, k, v, block_mask=mask))
    return result


def window_batch(tokenizer, tokens: int, batch: int = 1) -> dict[str, torch.Tensor]:
    """Model inputs of `batch` copies of one window of at most `tokens` tokens: the first agreement input's question
    and document as the engine windows them, for timing bare forward passes."""
    check = agreement_inputs(tokenizer, tokens, 1)[0]
    settings = EngineSettings(max_seq_len=tokens).resolved(tokenizer)
    windows, _ = make_windows(tokenizer, check.question, [check.document], settings)
    return batching.collate([windows[0]] * batch, tokenizer.pad_token_id)  # (B, L) each


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench levers")
    parser.add_argument("--out", default="docs/results/cpu-floor")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--compile", action="store_true", help="also time torch.compile of the encoder layers, "
                        "and FlexAttention against the fused SDPA band on one layer")
    parser.add_argument("--cpu-kind", choices=("detected", "avx2", "avx512-bf16"), default="detected",
                        help="resolve `cpu` as on this CPU kind (default: as detected)")
    parser.add_argument("--quick", action="store_true", help="only the stacks before and now (and the band kernel "
                        "variants): no query blocks, batches, heap trimming or extra threads")
    args = parser.parse_args(argv)
    hardware = hardware_for(args.cpu_kind)
    detected_kind = kind_name(detect_hardware())
    kind = detected_kind if kind_name(hardware) == detected_kind else f"{kind_name(hardware)}-stack-on-{detected_kind}"
    load_average = os.getloadavg()
    resolved = list(select_strategies(get_profile("cpu"), hardware))
    before_stack = [name for name in resolved if name != "prepacked_linear"]

    unpacked = load_model(MODEL, custom_profile(before_stack, device="cpu"), hardware=hardware)
    packed = load_model(MODEL, custom_profile(resolved, device="cpu"), hardware=hardware)
    # arch:base's random weights are written once to the cache and read by every load: the same weights
    tokenizer = packed.tokenizer
    one, two, four = (window_batch(tokenizer, TOKENS, batch) for batch in (1, 2, 4))
    assert one["input_ids"].shape[1] == TOKENS, one["input_ids"].shape
    cores = torch.get_num_threads()
    plans = per_layer_plans(unpacked.model)
    attention_dtype = torch.bfloat16 if hardware.cpu_bf16 else torch.float32
    loaded_kernel = band_kernel.kernel(attention_dtype)
    now = "cpu" if loaded_kernel is not None else "cpu (the band kernel does not run here: SDPA)"
    variants = [
        Variant("before: the attention's masks built in every layer, band on SDPA", unpacked.model, one,
                settings=(plans, SDPA_BAND)),
        Variant("masks built once per forward", unpacked.model, one, settings=(SDPA_BAND,)),
        Variant("+ prepacked oneDNN Linear layers", packed.model, one, settings=(SDPA_BAND,)),
        Variant(f"+ the band kernel ({now} now)", packed.model, one),
        Variant("cpu with transformers' full L × L padding mask (row 0 kept)", packed.model, one,
                settings=(full_padding_mask(),)),
        *([Variant("cpu with the band kernel on AVX-512 BF16 instead of AMX", packed.model, one,
                   settings=(band_kernel_variant("avx512"),))]
          if loaded_kernel is not None and loaded_kernel.spec is band_kernel.AMX_BUILD else []),
        Variant("prepacked, SDPA band in query blocks of w/2", packed.model, one,
                settings=(SDPA_BAND, attention_setting("query_block_divisor", 2))),
        Variant("prepacked, SDPA band in query blocks of w/4", packed.model, one,
                settings=(SDPA_BAND, attention_setting("query_block_divisor", 4))),
        Variant(f"{now}, batch of 2 windows (per window)", packed.model, two, windows=2),
        Variant(f"{now}, batch of 4 windows (per window)", packed.model, four, windows=4),
        Variant(f"{now}, glibc heap trimmed after every forward", packed.model, one, each=batching.release_memory),
        Variant(f"{now}, {4 * cores} threads on {cores} CPUs", packed.model, one, settings=(threads(4 * cores),)),
    ]
    if args.quick:
        variants = [v for v in variants if not v.name.startswith(("prepacked, SDPA band in query blocks",
                                                                     f"{now}, "))]
    compile_s = None
    if args.compile:
        compiled = compiled_copy(before_stack, hardware)
        began = time.perf_counter()
        with torch.inference_mode():
            compiled(**one)
        compile_s = time.perf_counter() - began
        # SDPA band: the fast attention keeps the band kernel out of compiled graphs
        variants.append(Variant("torch.compile of the layers (static, freezing), no prepacking, SDPA band", compiled,
                                one))

    reference = None
    gaps = {}
    for round_index in range(args.rounds):
        for variant in variants:
            start = variant.run()
            if reference is None:
                reference = start
            gaps[variant.name] = max(gaps.get(variant.name, 0.0), (start - reference).abs().max().item())
        print(f"round {round_index + 1}: " + ", ".join(f"{v.best_s:.2f}" for v in variants), flush=True)

    alone = None
    if args.compile:
        with torch.inference_mode():
            alone = attention_alone(attention_dtype, args.rounds)
    floor = measure_floor(MODEL, hardware=detect_hardware())
    precision = row_precision(resolved, "bfloat16" if hardware.cpu_bf16 else "float32")
    floor_s = floor.precisions[precision].floor_s
    second_floor_s = floor.precisions[precision].floor_band_at_linear_rate_s
    rows = [{"variant": v.name, "best_s_per_window": v.best_s, "x_floor": v.best_s / floor_s,
             "x_floor_band_at_linear_rate": v.best_s / second_floor_s,
             "x_before": v.best_s / variants[0].best_s, "max_abs_logit_gap_vs_before": gaps[v.name],
             "rss_after_last_run_bytes": v.rss_after_bytes}
            for v in variants]
    result = {"command": "python -m bench levers " + " ".join(argv), "cpu": cpu_model(),
              "cpu_kind": kind, "cpu_flags": cpu_flags(), "threads": cores, "load_average_at_start": load_average,
              "torch": torch.__version__, "python": platform.python_version(), "model": MODEL, "tokens": TOKENS,
              "stack": resolved, "band_kernel": band_kernel.status(attention_dtype), "floor_precision": precision,
              "floor_s": floor_s, "floor_band_at_linear_rate_s": second_floor_s, "floor": floor.to_dict(),
              "compile_first_call_s": compile_s, "attention_one_layer_s": alone, "rows": rows}
    write_measurement(args.out, f"levers-{kind}", result, markdown(result))
    return 0


def markdown(result: dict) -> str:
    lines = [f"# The `cpu` window, lever by lever ({result['cpu_kind']})", "",
             f"`{result['command'].strip()}`", "",
             f"CPU: {result['cpu']}, {result['threads']} threads, flags {', '.join(result['cpu_flags'])}; load average "
             f"{result['load_average_at_start'][0]:.1f} at the start; torch {result['torch']}. {result['model']}, one "
             f"window of {result['tokens']:,} tokens, stack {', '.join(result['stack'])} ({result['band_kernel']}); "
             "each variant run once per "
             "round, rounds interleaved, best round kept.", "",
             f"Floor ({result['floor_precision']}, measured here in the same run): {result['floor_s']:.2f} s a window; "
             f"with the band's needed products at the Linear layers' rate: "
             f"{result['floor_band_at_linear_rate_s']:.2f} s.",
             "", "| variant | best s per window | × floor | × floor, band at the Linear rate | × before | "
             "max \\|Δ logit\\| vs before | RSS after its last run |",
             "|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        lines.append(f"| {row['variant']} | {row['best_s_per_window']:.2f} | {row['x_floor']:.2f}× | "
                     f"{row['x_floor_band_at_linear_rate']:.2f}× | "
                     f"{row['x_before']:.2f}× | {row['max_abs_logit_gap_vs_before']:.3g} | "
                     f"{row['rss_after_last_run_bytes'] / 1e9:.2f} GB |")
    if result["compile_first_call_s"] is not None:
        lines += ["", f"torch.compile's first call (tracing and compiling 12 layers) took "
                      f"{result['compile_first_call_s']:.0f} s, once per process and input shape."]
    alone = result.get("attention_one_layer_s")
    if alone:
        lines += ["", "One layer's attention band alone (arch:base's shapes, 24 global tokens), best of the rounds:", "",
                  "| way | s per layer |", "|---|---|",
                  f"| fused SDPA over blocks of w queries and 3w keys (the fast attention) | {alone['sdpa_blocks_of_w_s']:.4f} |",
                  f"| the same blocks' two bare products (no mask, no softmax) | {alone['bare_products_s']:.4f} |",
                  *([f"| the band kernel (2w+1 keys per query, mask and softmax included) | {alone['band_kernel_s']:.4f} |"]
                    if "band_kernel_s" in alone else []),
                  f"| FlexAttention, compiled, block-sparse mask, blocks of 64 (compiling {alone['flex_block_64_compile_s']:.0f} s) | {alone['flex_block_64_s']:.4f} |",
                  f"| FlexAttention, compiled, block-sparse mask, blocks of 128 (compiling {alone['flex_block_128_compile_s']:.0f} s) | {alone['flex_block_128_s']:.4f} |"]
    return "\n".join(lines) + "\n"

