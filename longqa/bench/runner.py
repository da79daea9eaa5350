"""`python -m longqa bench`: the strategy table, measured on this machine, one fresh process per row.

Reads the arguments, plans the rows (every available profile plus the fp32 reference, at each length, and the
training step with and without checkpointing), runs each in `longqa.bench.worker` and gathers what they measured;
`longqa.bench.report` turns the rows into ratios, predictions, results.md and results.png. It measures nothing
itself: the workers do, so no row's peak leaks into another's.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import accelerate
import psutil
import torch
import transformers
from tqdm import tqdm

from longqa.arguments import positive_int, positive_int_list
from longqa.bench.report import (add_baseline_ratios, recorded_hardware, summary_lines, write_report,
                                 write_results)
from longqa.bench.worker import BASELINE, MAX_WINDOW_TOKENS, WorkerSpec, parse_profile
from longqa.loader import download, materialize_architecture
from longqa.models import resolve_model
from longqa_core.errors import InputError
from strategies.hardware import cpu_flags as all_cpu_flags
from strategies.hardware import detect_hardware
from strategies.profiles import PROFILES, unavailable_reason

ALIASES = ("auto", "custom")  # not rows of their own in "all": auto is another profile, custom is empty
PROJECT_ROOT = Path(__file__).resolve().parents[2]
CPU_KIND_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_int8")


# ------------------------------------------------------------------------------------------------ arguments
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="arch:base",
                        help="checkpoint, local folder, 'demo', or 'arch:base'/'arch:large' (real architecture, "
                             "random weights, built offline); default arch:base")
    parser.add_argument("--profiles", default="all",
                        help="comma-separated profiles: names, 'all' (every available one), 'custom:a+b' for a stack "
                             "of strategies (e.g. all,custom:int8_dynamic), with options as "
                             f"'custom:half_precision(dtype=bf16)+fast_attention'; {BASELINE} is always the reference")
    parser.add_argument("--tokens", type=positive_int_list, default=[1024, 4096],
                        help="input lengths per document (question + document), comma-separated; more than one "
                             "window's worth means several windows (default 1024,4096)")
    parser.add_argument("--batch", type=positive_int_list, default=[1],
                        help="documents per request, run as one batch; comma-separated for several rows (default 1; "
                             "the training-step rows use the smallest)")
    parser.add_argument("--repeat", type=positive_int, default=3, help="timed runs per row after the warm-up")
    parser.add_argument("--checks", type=positive_int, default=10,
                        help="question/document pairs compared with the fp32 baseline per length (default 10)")
    parser.add_argument("--no-training", dest="training", action="store_false",
                        help="skip the training-step rows (forward+backward with and without checkpointing)")
    parser.add_argument("--out", default="bench-results", help="output folder (default bench-results/)")
    parser.add_argument("--rescore", action="store_true",
                        help="measure nothing: recompute ratios and memory predictions of --out's results.json")


# ------------------------------------------------------------------------------------------------ planning
@dataclass(frozen=True)
class Skipped:
    profile: str
    reason: str


def choose_profiles(requested: str, hardware) -> tuple[list[str], list[Skipped]]:
    """The profiles to measure, baseline first, and those left out with why; unknown names raise ProfileError."""
    names = [BASELINE]
    for name in (part.strip() for part in requested.split(",")):
        names += [n for n in PROFILES if n not in ALIASES] if name == "all" else [name] if name else []
    names = list(dict.fromkeys(names))
    chosen, skipped = [], []
    for name in names:
        reason = unavailable_reason(parse_profile(name), hardware)
        if reason is None:
            chosen.append(name)
        else:
            skipped.append(Skipped(name, reason))
    return chosen, skipped


def plan_specs(args, profiles: list[str], out_dir: Path) -> list[WorkerSpec]:
    """Inference rows length by length (the baseline first, so the others compare with its logits), then the
    training-step rows of the fp32 reference at each distinct window length."""
    specs = []
    common = dict(model=args.model, repeat=args.repeat, checks=args.checks, out_dir=str(out_dir))
    for tokens in args.tokens:
        for batch in args.batch:
            for profile in profiles:
                specs.append(WorkerSpec(mode="inference", profile=profile, tokens=tokens, batch=batch,
                                        baseline=profile == BASELINE, **common))
    if args.training:
        for tokens in dict.fromkeys(min(t, MAX_WINDOW_TOKENS) for t in args.tokens):
            specs.append(WorkerSpec(mode="training", profile=BASELINE, tokens=tokens, batch=min(args.batch),
                                    **common))
    return specs


def prepare_model(model_ref: str) -> None:
    """Materialize or download the weights once, so no row's load time includes building or fetching them."""
    source = resolve_model(model_ref)
    if source.kind == "architecture":
        materialize_architecture(source.ref)
    elif source.kind == "hub":
        download(source.location)


# ------------------------------------------------------------------------------------------------ running
def spec_label(spec: WorkerSpec) -> str:
    return f"{spec.mode} {spec.profile} {spec.tokens}t b{spec.batch}"


def worker_command(spec_path: Path, result_path: Path) -> list[str]:
    return [sys.executable, "-m", "longqa.bench.worker", str(spec_path), str(result_path)]


def worker_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    env.setdefault("TRANSFORMERS_VERBOSITY", "error")
    return env


def error_row(spec: WorkerSpec, message: str) -> dict:
    return {"kind": spec.mode, "model": spec.model, "profile": spec.profile, "tokens": spec.tokens,
            "batch": spec.batch, "checkpointing": None, "error": message}


def run_worker(spec: WorkerSpec, work_dir: Path, log_path: Path) -> list[dict]:
    """The rows one fresh worker process measured, or one error row saying why it failed."""
    stem = spec_label(spec).replace(" ", "_").replace(":", "-").replace("+", "-")
    spec_path, result_path = work_dir / f"{stem}.spec.json", work_dir / f"{stem}.rows.json"
    spec_path.write_text(json.dumps(asdict(spec)))
    result_path.unlink(missing_ok=True)
    with open(log_path, "a") as log:
        log.write(f"\n===== {spec_label(spec)}\n")
        log.flush()
        completed = subprocess.run(worker_command(spec_path, result_path), stdout=log, stderr=subprocess.STDOUT,
                                   env=worker_env(), cwd=PROJECT_ROOT)
    if completed.returncode != 0 or not result_path.exists():
        return [error_row(spec, f"worker exited with code {completed.returncode}: {last_error_line(log_path)}")]
    return json.loads(result_path.read_text())


def last_error_line(log_path: Path) -> str:
    lines = [line.strip() for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


# ------------------------------------------------------------------------------------------------ gathering
def machine_info(hardware) -> dict:
    """What the rows were measured on: CPU, memory, GPUs, library versions and the load when the run began."""
    return {
        "cpu_model": cpu_model(), "cpu_flags": cpu_flags(), "cpu_cores_logical": os.cpu_count(),
        "cpu_cores_physical": psutil.cpu_count(logical=False), "cpu_bf16": hardware.cpu_bf16,
        "ram_bytes": psutil.virtual_memory().total,
        "gpus": [{"name": gpu.name, "total_bytes": gpu.total_bytes, "compute_capability": gpu.compute_capability}
                 for gpu in hardware.usable_gpus],
        "cuda": torch.version.cuda if hardware.usable_gpus else None,
        "torch": torch.__version__, "transformers": transformers.__version__,
        "accelerate": accelerate.__version__, "python": platform.python_version(), "platform": platform.platform(),
        "load_average_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> list[str]:
    """The CPU's vector and matrix features, which name its kind (from /proc/cpuinfo; empty where unreadable)."""
    return sorted(all_cpu_flags() & set(CPU_KIND_FLAGS))


def command_line(args) -> str:
    parts = ["python", "-m", "longqa", "bench", "--model", args.model, "--profiles", args.profiles,
             "--tokens", ",".join(map(str, args.tokens)), "--batch", ",".join(map(str, args.batch)),
             "--repeat", str(args.repeat), "--checks", str(args.checks), "--out", str(args.out)]
    if not args.training:
        parts.append("--no-training")
    return shlex.join(parts)


# ------------------------------------------------------------------------------------------------ command
def rescore(out_dir: Path) -> int:
    """Recompute the ratios and predictions of an earlier run's results.json (e.g. after the planner changed), for
    the machine that run recorded."""
    path = out_dir / "results.json"
    if not path.exists():
        raise InputError(f"No results.json in {out_dir} to rescore.")
    results = json.loads(path.read_text())
    write_report(out_dir, results, recorded_hardware(results.get("machine")))
    print(f"rescored {path}, results.md and results.png", file=sys.stderr)
    return 0


def run(args) -> int:
    """Measure every planned row in its own process and write the three outputs; 1 when any row failed."""
    out_dir = Path(args.out)
    if args.rescore:
        return rescore(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    hardware = detect_hardware()
    profiles, skipped = choose_profiles(args.profiles, hardware)
    if BASELINE not in profiles:
        raise InputError(f"The reference profile {BASELINE} cannot run here: "
                         f"{next(s.reason for s in skipped if s.profile == BASELINE)}.")
    prepare_model(args.model)
    specs = plan_specs(args, profiles, out_dir)
    results = {
        "model": args.model, "command": command_line(args),
        "started": datetime.datetime.now().isoformat(timespec="seconds"), "machine": machine_info(hardware),
        "settings": {"tokens": args.tokens, "batch": args.batch, "repeat": args.repeat, "checks": args.checks,
                     "profiles": profiles},
        "skipped": [asdict(s) for s in skipped], "rows": [],
    }
    log_path = out_dir / "workers.log"
    log_path.write_text("")
    for stale in out_dir.glob("baseline-logits-*.npz"):  # a failed baseline must not leave old logits behind
        stale.unlink()
    with tempfile.TemporaryDirectory(prefix="longqa-bench-") as work_dir:
        progress = tqdm(specs, desc="bench", unit="row", file=sys.stderr)
        for spec in progress:
            progress.set_postfix_str(spec_label(spec))
            results["rows"] += run_worker(spec, Path(work_dir), log_path)
            add_baseline_ratios(results["rows"])
            write_results(out_dir, results)  # after every row, so an interrupted run keeps what it measured
    results["machine"]["load_average_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    write_report(out_dir, results, hardware)
    failed = [row for row in results["rows"] if row.get("error")]
    for line in summary_lines(results):
        print(line, file=sys.stderr)
    for row in failed:
        print(f"error: {row['kind']} {row['profile']} {row['tokens']}t: {row['error']}", file=sys.stderr)
    print(f"wrote {out_dir / 'results.json'}, results.md and results.png ({len(results['rows'])} rows, "
          f"{len(failed)} failed; worker logs in {log_path})", file=sys.stderr)
    return 1 if failed else 0
