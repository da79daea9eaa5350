"""The int8 stack against bf16 on this CPU, side by side in one process: the forward of one 4,096-token window of
arch:base (random weights) in the `cpu` profile as it resolves here (bf16 where native: half_precision,
fast_attention, prepacked_linear) and as it resolves on a CPU without native bf16 (int8_dynamic, fast_attention,
prepacked_linear), the int8 one quantized for each of torch's int8 engines (x86, which takes fbgemm for dynamic
Linear layers, and onednn, which takes AMX-INT8 where the CPU has it), interleaved over rounds:

    python scripts/measure_int8_vs_bf16.py [--out docs/cpu-floor] [--rounds 3] [--threads N]

Writes int8-vs-bf16-<kind>.json and .md: best wall and process CPU seconds per window of each.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from longqa.bench.floor import hardware_for  # noqa: E402
from longqa.bench.runner import measured_here, write_measurement  # noqa: E402
from longqa.loader import load_model  # noqa: E402

MODEL = "arch:base"
TOKENS = 4096
QUESTION_TOKENS = 24  # global tokens, as a question of that length makes them


def window_inputs(tokens: int) -> dict:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 1000, (1, tokens), generator=generator)  # (1, L)
    global_mask = torch.zeros_like(ids)
    global_mask[:, :QUESTION_TOKENS] = 1
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "global_attention_mask": global_mask}


def load_stacks() -> dict:
    """name -> (model, the int8 engine it was quantized for or None, its strategies, its dtype)."""
    stacks = {}
    for name, kind, engine in (("bf16 (cpu here)", "detected", None),
                               ("int8 dynamic, x86 engine (fbgemm)", "avx2", "x86"),
                               ("int8 dynamic, onednn engine", "avx2", "onednn")):
        if engine is not None and engine not in torch.backends.quantized.supported_engines:
            continue
        if engine is not None:
            torch.backends.quantized.engine = engine  # packed for this engine at quantization time
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loaded = load_model(MODEL, "cpu", hardware=hardware_for(kind))
        stacks[name] = (loaded.model, engine, list(loaded.readout.strategies), loaded.readout.dtype)
    return stacks


def measure(rounds: int) -> dict:
    stacks = load_stacks()
    inputs = window_inputs(TOKENS)
    wall = {name: float("inf") for name in stacks}
    cpu = dict(wall)
    logits = {}
    for round_ in range(rounds + 1):  # the first round warms up
        for name, (model, engine, _, _) in stacks.items():
            if engine is not None:
                torch.backends.quantized.engine = engine
            began_wall, began_cpu = time.perf_counter(), time.process_time()
            with torch.inference_mode():
                start = model(**inputs).start_logits
            if round_:
                wall[name] = min(wall[name], time.perf_counter() - began_wall)
                cpu[name] = min(cpu[name], time.process_time() - began_cpu)
            logits[name] = start[0].float()
    reference = next(iter(logits.values()))
    return {"model": MODEL, "tokens": TOKENS, "rounds": rounds, "threads": torch.get_num_threads(),
            "stacks": {name: {"strategies": stacks[name][2], "dtype": stacks[name][3], "engine": stacks[name][1],
                              "best_wall_s": wall[name], "best_cpu_s": cpu[name],
                              "same_top_start_as_bf16": int(logits[name].argmax()) == int(reference.argmax())}
                       for name in stacks}}


def format_markdown(result: dict) -> str:
    machine = result["machine"]
    bf16 = next(iter(result["stacks"].values()))
    lines = [f"# The int8 stack against bf16 ({machine['kind']})", "", f"`{result['command']}`", "",
             f"CPU: {machine['cpu_model']} ({machine['kind']}); {result['threads']} threads; load average "
             f"{machine['load_average_before'][0]:.1f} before, {machine['load_average_after'][0]:.1f} after"
             f"{' (loaded machine: compare the ratios)' if machine['loaded'] else ''}; torch {machine['torch']}.", "",
             f"{result['model']} (random weights), one window of {result['tokens']:,} tokens, forward only, best of "
             f"{result['rounds']} interleaved rounds after a warm-up.", "",
             "| stack | strategies | best wall s | × bf16 | best CPU s | × bf16 |", "|---|---|---|---|---|---|"]
    for name, stack in result["stacks"].items():
        lines.append(f"| {name} | {', '.join(stack['strategies'])} | {stack['best_wall_s']:.2f} | "
                     f"{stack['best_wall_s'] / bf16['best_wall_s']:.2f} | {stack['best_cpu_s']:.2f} | "
                     f"{stack['best_cpu_s'] / bf16['best_cpu_s']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="docs/cpu-floor")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="default: torch's")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    result = measured_here(lambda: measure(args.rounds))
    result["command"] = "python scripts/measure_int8_vs_bf16.py" + (
        f" --threads {args.threads}" if args.threads else "") + (f" --rounds {args.rounds}" if args.rounds != 3 else "")
    write_measurement(args.out, f"int8-vs-bf16-{result['machine']['kind']}", result, format_markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
