"""What keeping a CPU forward's large buffers in the heap saves (`python -m bench heap`, issue 60 item 3): one
4,096-token window answered on the `cpu` profile in processes of two kinds, alternating (so a changing load falls on
both): the loader's allocator setting (`telemetry.keep_large_buffers`: no block mapped on its own, freed buffers
reused) and glibc's defaults (each tensor past 32 MiB mapped afresh, its pages zeroed at first touch; the worker is
started with a malloc tunable at glibc's default, which leaves the setting off). Both in the main thread, as the CLI
answers; a thread with an arena of its own (the page's, with 2 arenas) keeps mapping afresh. Each process loads the
model, warms up, then times `--answers` answers: wall seconds, the forward's, user and system CPU seconds, minor page
faults, and the answer's host-memory peak over the process's memory before it (the readout's `host_request_peak_bytes`).

    python -m bench heap [--model arch:large] [--rounds 3] [--answers 2] [--out docs/results/cpu-floor]

Writes heap-<kind>-<model>.json and .md. docs/cpu-without-bf16.md keeps the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from bench.floor import kind_name
from bench.measured import measured_here, write_measurement
from bench.peers import git_commit
from longqa.bench.worker import agreement_inputs
from longqa.loader import load_model
from longqa_core.answering import answer
from strategies.hardware import detect_hardware

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = {
    "kept": {},  # the loader's own setting
    # a malloc tunable at glibc's own default leaves the setting off and glibc as it is (a MALLOC_MMAP_MAX_ would
    # fix its mmap threshold at 128 KiB: not glibc's defaults)
    "glibc defaults": {"GLIBC_TUNABLES": "glibc.malloc.check=0"},
}


def worker(model: str, answers: int, threads: int) -> list[dict]:
    """In this process: load `model` on `cpu`, answer one window once to warm up, then `answers` times, timed."""
    torch.set_num_threads(threads)
    loaded = load_model(model, "cpu")
    tokenizer = loaded.tokenizer
    check = agreement_inputs(tokenizer, 4096, 1)[0]
    settings = loaded.settings.resolved(tokenizer)

    def ask():
        return answer(loaded.runner, tokenizer, [check.document], check.question, settings)

    ask()
    rows = []
    for _ in range(answers):
        before, began = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        result = ask()
        wall, after = time.perf_counter() - began, resource.getrusage(resource.RUSAGE_SELF)
        rows.append({"wall_s": wall, "forward_s": result.latency_s["forward"],
                     "request_peak_bytes": result.memory.host_request_peak_bytes,
                     "user_s": after.ru_utime - before.ru_utime,
                     "system_s": after.ru_stime - before.ru_stime,
                     "minor_faults": after.ru_minflt - before.ru_minflt})
    return rows


def run_worker(setting: str, model: str, answers: int, threads: int) -> list[dict]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}, **SETTINGS[setting]}
    done = subprocess.run([sys.executable, "-m", "bench", "heap", "--worker", "--model", model, "--answers",
                           str(answers), "--threads", str(threads)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"the {setting} worker failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(model: str, rounds: int, answers: int, threads: int) -> dict:
    rows = []
    for round_index in range(rounds):
        order = list(SETTINGS) if round_index % 2 == 0 else list(SETTINGS)[::-1]
        for setting in order:
            rows += [{"round": round_index, "setting": setting, **row}
                     for row in run_worker(setting, model, answers, threads)]
    return {"model": model, "rounds": rounds, "answers": answers, "threads": threads,
            "kind": kind_name(detect_hardware()), "rows": rows}


def medians(result: dict) -> dict[str, dict[str, float]]:
    keys = ("wall_s", "forward_s", "user_s", "system_s", "minor_faults", "request_peak_bytes")
    return {setting: {key: statistics.median(row[key] for row in result["rows"] if row["setting"] == setting)
                      for key in keys} for setting in SETTINGS}


def markdown(result: dict) -> str:
    machine, by_setting = result["machine"], medians(result)
    kept, plain = by_setting["kept"], by_setting["glibc defaults"]
    lines = [f"# A CPU forward's large buffers kept in the heap: {result['model']} on `cpu`, one 4,096-token window",
             "",
             f"`{result['command']}` on {machine['cpu_model']} (kind {result['kind']}, {result['threads']} threads; "
             f"{result['rounds']} rounds of a process a setting, alternating, {result['answers']} timed answers "
             f"each; load average {machine['load_average_before'][0]:.1f} before, "
             f"{machine['load_average_after'][0]:.1f} after).",
             "",
             "| setting | answer (wall) | forward | user CPU | system CPU | minor page faults "
             "| the answer's host peak |",
             "|---|---|---|---|---|---|---|"]
    for setting, row in by_setting.items():
        lines.append(f"| {setting} | {row['wall_s']:.2f} s | {row['forward_s']:.2f} s | {row['user_s']:.2f} s | "
                     f"{row['system_s']:.2f} s | {row['minor_faults']:,.0f} | "
                     f"{row['request_peak_bytes'] / 2**20:,.0f} MiB |")
    lines += ["", f"Medians. Kept against glibc's defaults: the forward {plain['forward_s'] / kept['forward_s']:.2f}x "
              f"as fast; CPU seconds (user and system) {kept['user_s'] + kept['system_s']:.2f} against "
              f"{plain['user_s'] + plain['system_s']:.2f}; the answer's host peak "
              f"{(kept['request_peak_bytes'] - plain['request_peak_bytes']) / 2**20:+,.0f} MiB.", "",
              "| round | setting | wall | forward | user | system | faults |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {row['round'] + 1} | {row['setting']} | {row['wall_s']:.2f} | {row['forward_s']:.2f} | "
              f"{row['user_s']:.2f} | {row['system_s']:.2f} | {row['minor_faults']:,} |" for row in result["rows"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench heap", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="arch:large")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--answers", type=int, default=2, help="timed answers a process, after one warm-up")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="docs/results/cpu-floor")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.model, args.answers, args.threads)))
        return 0
    result = measured_here(lambda: measure(args.model, args.rounds, args.answers, args.threads))
    result["command"] = "python -m bench heap " + " ".join(argv)
    result["commit"] = git_commit()
    write_measurement(args.out, f"heap-{result['kind']}-{args.model.replace(':', '-')}", result, markdown(result))
    return 0
