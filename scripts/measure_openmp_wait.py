"""The OpenMP wait settings side by side on one `cpu` window of arch:base (4,096 tokens, random weights): each setting
in fresh processes (libgomp reads it once, at load), the settings alternated over rounds, and in each process:

- the forward's wall time and CPU seconds (all threads; a spinning thread's spins count);
- the Linear layers inside the forward (wall time of each call, timed around the call, no profiler) against the
  same layers called alone on the very inputs they had (median of 5 calls each) and against the floor's way of
  timing their shapes (`longqa.bench.floor.time_linear`: fresh random inputs, the best of 5 calls).

    python scripts/measure_openmp_wait.py [--out docs/cpu-floor] [--rounds 3] [--forwards 3]

Writes openmp-wait-<kind>.json and .md. It sets the variables only in the processes it starts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from longqa_core.openmp_wait import OPERATOR_VARIABLES, SERVER_SPIN_COUNT  # noqa: E402

MODEL = "arch:base"
TOKENS = 4096
SETTINGS = {  # name -> the environment a process starts with (besides neither of OPERATOR_VARIABLES)
    "libgomp default (300,000 spins)": {},
    f"GOMP_SPINCOUNT={SERVER_SPIN_COUNT} (the entry points' setting)": {"GOMP_SPINCOUNT": str(SERVER_SPIN_COUNT)},
    "OMP_WAIT_POLICY=PASSIVE (no spinning)": {"OMP_WAIT_POLICY": "PASSIVE"},
}


def measure_process(forwards: int) -> dict:
    """The measurements of one process (this one, started with its setting)."""
    import torch

    from longqa.bench.floor import time_linear
    from longqa.bench.worker import window_batch
    from longqa.loader import load_model
    from strategies.prepacked_linear import PackedLinear

    loaded = load_model(MODEL, "cpu")
    inputs = window_batch(loaded.tokenizer, TOKENS, 1)
    recording, calls, captured = [False], defaultdict(list), {}

    def timed(key, call, *args):
        captured.setdefault(key, (call, tuple(x.clone() for x in args)))
        began = time.perf_counter()
        out = call(*args)
        calls[key].append(time.perf_counter() - began)
        return out

    for module in loaded.model.modules():
        if isinstance(module, PackedLinear):
            forward, add_to = module.forward, module.add_to
            shape = (module.in_features, module.out_features)
            module.forward = (lambda x, _f=forward, _s=shape:
                              timed((x.shape[-2], *_s, "plain"), _f, x) if recording[0] else _f(x))
            module.add_to = (lambda x, r, _f=add_to, _s=shape:
                             timed((x.shape[-2], *_s, "add"), _f, x, r) if recording[0] else _f(x, r))

    def is_counted(key) -> bool:  # the floor's shapes: every token's rows (not the global queries, not qa_outputs)
        return key[0] == TOKENS and key[2] > 2

    rows = []
    with torch.inference_mode():
        loaded.model(**inputs)  # warm-up
        for _ in range(forwards):
            calls.clear()
            recording[0] = True
            cpu, wall = time.process_time(), time.perf_counter()
            loaded.model(**inputs)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            recording[0] = False
            alone = floor = 0.0
            for key, (call, args) in captured.items():
                if not is_counted(key):
                    continue
                times = []
                for _ in range(5):
                    began = time.perf_counter()
                    call(*args)
                    times.append(time.perf_counter() - began)
                alone += statistics.median(times) * len(calls[key])
                floor += time_linear("bf16", key[0], key[1], key[2], 5) * len(calls[key])
            rows.append({"forward_s": wall, "forward_cpu_s": cpu,
                         "linear_in_forward_s": sum(sum(v) for k, v in calls.items() if is_counted(k)),
                         "linear_alone_median_s": alone, "linear_floor_best_s": floor})
    return {"forwards": rows, "load_average": os.getloadavg()[0], "threads": torch.get_num_threads()}


def run_setting(environment: dict, forwards: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in OPERATOR_VARIABLES} | environment
    result = subprocess.run([sys.executable, __file__, "--child", "--forwards", str(forwards)], env=env,
                            capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-2000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


def summarize(runs: list[dict]) -> dict:
    rows = [row for run in runs for row in run["forwards"]]

    def median(key):
        return statistics.median(row[key] for row in rows)

    summary = {key: median(key) for key in rows[0]}
    summary["share_of_alone"] = median("linear_alone_median_s") / median("linear_in_forward_s")
    summary["share_of_floor_best"] = median("linear_floor_best_s") / median("linear_in_forward_s")
    summary["forwards"] = len(rows)
    return summary


def format_markdown(result: dict) -> str:
    machine = result["machine"]
    base = result["summary"][next(iter(SETTINGS))]
    lines = [f"# OpenMP's idle threads and one `cpu` window ({machine['kind']})", "",
             f"`{result['command']}`", "",
             f"CPU: {machine['cpu_model']} ({machine['kind']}); torch {machine['torch']}, {result['threads']} threads; "
             f"load average {machine['load_average_before'][0]:.1f} before, {machine['load_average_after'][0]:.1f} "
             f"after ({'**loaded machine**: other sessions shared the cores' if machine['loaded'] else 'quiet'}). "
             f"{MODEL} (random weights), one window of {TOKENS:,} tokens; each setting in {result['rounds']} fresh "
             f"processes, alternated, {result['forwards_per_process']} timed forwards each after a warm-up; medians "
             "over all of a setting's forwards.", "",
             "| setting | forward s | × default | CPU s (all threads) | Linear layers in the forward s | the same "
             "calls alone (median) s | share | the floor's timing (best of 5) s | share |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, s in result["summary"].items():
        lines.append(f"| {name} | {s['forward_s']:.2f} | {s['forward_s'] / base['forward_s']:.2f} | "
                     f"{s['forward_cpu_s']:.2f} | {s['linear_in_forward_s']:.3f} | {s['linear_alone_median_s']:.3f} | "
                     f"{s['share_of_alone']:.0%} | {s['linear_floor_best_s']:.3f} | {s['share_of_floor_best']:.0%} |")
    lines += ["", "Share: the Linear layers' rate inside the forward as a share of their rate alone (alone s / in "
              "the forward s). Per process and forward: the JSON file."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="docs/cpu-floor")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--forwards", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure_process(args.forwards)))
        return 0
    from longqa.bench.runner import measured_here, write_measurement

    def measure() -> dict:
        runs = defaultdict(list)
        for round_index in range(args.rounds):
            order = list(SETTINGS.items())
            for name, environment in (order if round_index % 2 == 0 else order[::-1]):
                runs[name].append(run_setting(environment, args.forwards))
                print(round_index, name, runs[name][-1]["load_average"],
                      [round(row["forward_s"], 2) for row in runs[name][-1]["forwards"]], flush=True)
        return {"runs": dict(runs), "summary": {name: summarize(runs[name]) for name in SETTINGS},
                "threads": runs[next(iter(SETTINGS))][0]["threads"]}

    result = measured_here(measure)
    result.update(command=f"python scripts/measure_openmp_wait.py --rounds {args.rounds} --forwards {args.forwards}",
                  rounds=args.rounds, forwards_per_process=args.forwards, model=MODEL, tokens=TOKENS)
    from longqa.bench.floor import kind_name
    from strategies.hardware import detect_hardware
    write_measurement(args.out, f"openmp-wait-{kind_name(detect_hardware())}", result, format_markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
