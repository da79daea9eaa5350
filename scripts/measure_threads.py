"""What torch's default thread count costs under a CPU quota, as on a Space: a cgroup with a quota of `--cpus` CPUs
(fewer than the cores the process sees), and in it, in turn, a `cpu`-profile process whose threads fit the quota
and one with torch's default (the cores it sees) or `--default-threads` (a host's cores, as a Space's torch sees):

    sudo python scripts/measure_threads.py [--cpus 1] [--pairs 2] [--default-threads N] [--out FILE.json]

Needs root and a writable cgroup (v2 `cpu.max` or v1's `cpu` controller); arch:base, one 4,096-token window, best of
3 after a warm-up per process. Not a test: it changes the machine's cgroups (and removes what it made).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def make_cgroup(cpus: float) -> tuple[Path, str]:
    """A fresh cgroup limited to `cpus` CPUs; returns its folder and the file a process joins it through."""
    name = f"longqa-threads-{os.getpid()}"
    v2 = Path("/sys/fs/cgroup")
    if (v2 / "cgroup.controllers").exists():
        folder = v2 / name
        folder.mkdir()
        (folder / "cpu.max").write_text(f"{int(cpus * 100000)} 100000")
        return folder, "cgroup.procs"
    folder = v2 / "cpu" / name
    folder.mkdir()
    (folder / "cpu.cfs_period_us").write_text("100000")
    (folder / "cpu.cfs_quota_us").write_text(str(int(cpus * 100000)))
    return folder, "tasks"


def run_child(folder: Path, join_file: str, threads: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", str(folder / join_file),
                          str(threads)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        Path(argv[1]).write_text(str(os.getpid()))  # join the cgroup before torch starts its threads
        return timed_window(int(argv[2]))
    parser = argparse.ArgumentParser(prog="python scripts/measure_threads.py")
    parser.add_argument("--cpus", type=float, default=1.0, help="the cgroup's quota in CPUs")
    parser.add_argument("--pairs", type=int, default=2, help="fitted/default process pairs, interleaved")
    parser.add_argument("--default-threads", type=int, default=None,
                        help="torch's default to compare with: the cores this process sees (default), or a host's "
                             "core count to stand for a Space whose torch sees the host")
    parser.add_argument("--out", default="docs/cpu-floor/threads.json")
    args = parser.parse_args(argv)
    cores = len(os.sched_getaffinity(0))
    default_threads = args.default_threads or cores
    folder, join_file = make_cgroup(args.cpus)
    runs = []
    try:
        for _ in range(args.pairs):
            runs.append({"threads": "fitted", **run_child(folder, join_file, max(math.ceil(args.cpus), 1))})
            runs.append({"threads": "torch default", **run_child(folder, join_file, default_threads)})
            print(runs[-2], runs[-1], flush=True)
    finally:
        folder.rmdir()
    best = {kind: min(r["best_s"] for r in runs if r["threads"] == kind) for kind in ("fitted", "torch default")}
    result = {"command": "python scripts/measure_threads.py " + " ".join(argv), "cores_seen": cores,
              "quota_cpus": args.cpus, "default_threads": default_threads, "runs": runs, "best_s": best,
              "default_over_fitted": best["torch default"] / best["fitted"],
              "date": time.strftime("%Y-%m-%d")}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


def timed_window(threads: int) -> int:
    import torch

    torch.set_num_threads(threads)
    from longqa.bench.worker import window_batch
    from longqa.loader import load_model

    loaded = load_model("arch:base", "cpu")
    inputs = window_batch(loaded.tokenizer, 4096)
    times = []
    with torch.inference_mode():
        for _ in range(4):
            began = time.perf_counter()
            loaded.model(**inputs)
            times.append(time.perf_counter() - began)
    print(json.dumps({"torch_threads": torch.get_num_threads(), "best_s": min(times[1:]), "times_s": times}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
