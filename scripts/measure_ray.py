"""Throughput and latency of the page on Ray Serve: 1 against 2 replicas, with and without batching across visitors,
beside the embedded engine, measured side by side in one run with the load test (N concurrent /ask calls from
gradio_client, each checked against the same request alone).

Usage: python scripts/measure_ray.py [--calls 20] [--out docs/ray-serving.json]
Each configuration is a fresh `python app.py --model demo --profile cpu ...` on a free loopback port.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from longqa.serving.load_check import run_load, start_server, stop_server, summarize  # noqa: E402

CONFIGURATIONS = [  # (name, app.py arguments beyond the model and profile)
    ("embedded", []),
    ("ray, 1 replica, no batching", ["--engine", "ray", "--replicas", "1", "--ray-batch", "1"]),
    ("ray, 1 replica, batching 4", ["--engine", "ray", "--replicas", "1", "--ray-batch", "4"]),
    ("ray, 2 replicas, no batching", ["--engine", "ray", "--replicas", "2", "--ray-batch", "1"]),
    ("ray, 2 replicas, batching 4", ["--engine", "ray", "--replicas", "2", "--ray-batch", "4"]),
]


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "ray-serving.json")
    args = parser.parse_args()
    flags = Path("/proc/cpuinfo").read_text()
    rows = []
    for name, extra in CONFIGURATIONS:
        began = time.perf_counter()
        process, url = start_server(["--model", "demo", "--profile", "cpu", *extra])
        start_s = time.perf_counter() - began
        try:
            summary = summarize(run_load(url, args.calls))
        finally:
            stop_server(process)
        rows.append({"configuration": name, "app_args": extra, "start_s": start_s, **summary})
        print(f"{name:<32} {summary['completed']}/{summary['calls']} done, {summary['correct']} right, "
              f"{summary['same_as_alone']} equal alone, {summary['throughput_per_s']:.2f} req/s, "
              f"p50 {summary['p50_s']:.2f} s, p95 {summary['p95_s']:.2f} s, "
              f"replicas answering {summary['replicas_answering']}", flush=True)
    machine = {"cpu": cpu_name(), "cores": psutil.cpu_count(), "memory_bytes": psutil.virtual_memory().total,
               "cpu_kind": "avx512-bf16" if "avx512_bf16" in flags else "avx2"}
    args.out.write_text(json.dumps({"machine": machine, "calls": args.calls, "model": "demo", "profile": "cpu",
                                    "rows": rows}, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
