"""`python -m longqa bench`: the strategy table, measured on this machine, one fresh process per row.

Plans the rows (every available profile plus the fp32 reference, at each length, and the training step with and
without checkpointing), runs each in `longqa.bench_worker`, and writes results.json, results.md and results.png.
It measures nothing itself: the workers do, so no row's peak leaks into another's.
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

from longqa.arguments import positive_int, positive_int_list
from longqa.bench_worker import FLAG_CHANGED_FRACTION, WorkerSpec, parse_profile
from longqa.errors import InputError

BASELINE = "baseline-fp32"
ALIASES = ("auto", "custom")  # not rows of their own in "all": auto is another profile, custom is empty
MAX_WINDOW_TOKENS = 4096  # a training step runs on one window: lengths above this are measured at this length
PROJECT_ROOT = Path(__file__).resolve().parent.parent
GB = 10**9


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
    from strategies.profiles import PROFILES, unavailable_reason

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
    from strategies.loader import download, materialize_architecture
    from longqa.models import resolve_model

    source = resolve_model(model_ref)
    if source.kind == "architecture":
        materialize_architecture(source.ref)
    elif source.kind == "hub":
        download(source.location)


# ------------------------------------------------------------------------------------------------ running
def spec_label(spec: WorkerSpec) -> str:
    return f"{spec.mode} {spec.profile} {spec.tokens}t b{spec.batch}"


def worker_command(spec_path: Path, result_path: Path) -> list[str]:
    return [sys.executable, "-m", "longqa.bench_worker", str(spec_path), str(result_path)]


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


# ------------------------------------------------------------------------------------------------ results
def machine_info(hardware) -> dict:
    import accelerate
    import psutil
    import torch
    import transformers

    return {
        "cpu_model": cpu_model(), "cpu_cores_logical": os.cpu_count(),
        "cpu_cores_physical": psutil.cpu_count(logical=False), "cpu_bf16": hardware.cpu_bf16,
        "ram_bytes": psutil.virtual_memory().total,
        "gpus": [{"name": gpu.name, "total_bytes": gpu.total_bytes, "compute_capability": gpu.compute_capability}
                 for gpu in hardware.usable_gpus],
        "cuda": torch.version.cuda if hardware.usable_gpus else None,
        "torch": torch.__version__, "transformers": transformers.__version__,
        "accelerate": accelerate.__version__, "python": platform.python_version(), "platform": platform.platform(),
        "load_average_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def recorded_hardware(machine: dict):
    """The hardware a results.json describes (its `machine`), not the host reading it: predictions and fits of
    an earlier run must not change with the machine that rescores them."""
    from strategies.hardware import Gpu, Hardware

    if not machine or "cpu_bf16" not in machine:
        raise InputError("This results.json does not record the machine it was measured on (no 'machine.cpu_bf16').")
    gpus = tuple(Gpu(index, gpu["name"], int(gpu["total_bytes"]), tuple(gpu["compute_capability"])
                     if gpu.get("compute_capability") else None)
                 for index, gpu in enumerate(machine.get("gpus") or []))
    return Hardware(gpus=gpus, cuda_available=bool(gpus), cpu_bf16=bool(machine["cpu_bf16"]))


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def row_key(row: dict) -> tuple:
    return row.get("kind"), row.get("tokens"), row.get("batch")


def reference_row(row: dict, rows: list[dict]) -> dict | None:
    """What a row's "× baseline" compares with: the fp32 baseline at the same length and batch for inference,
    the same training step without checkpointing for training."""
    for other in rows:
        if other.get("error") or row_key(other) != row_key(row):
            continue
        if row.get("kind") == "training" and other.get("checkpointing") is False:
            return other
        if row.get("kind") == "inference" and other.get("profile") == BASELINE:
            return other
    return None


def ratio(value, reference) -> float | None:
    return value / reference if value is not None and reference else None


def add_baseline_ratios(rows: list[dict]) -> None:
    for row in rows:
        reference = None if row.get("error") else reference_row(row, rows)
        row["memory_x_baseline"] = ratio(row.get("peak_bytes"), reference and reference.get("peak_bytes"))
        row["latency_x_baseline"] = ratio(row.get("latency_s_median"),
                                          reference and reference.get("latency_s_median"))


def predicted_peak(row: dict, hardware) -> int | None:
    """What the memory planner predicts for a row, from its model, profile, length and batch alone (and, on CPU,
    the worker's memory before it loaded the model): the prediction the planner would have made beforehand."""
    from longqa.models import model_config
    from strategies import memory_planner as planner

    if row.get("kind") == "training":
        shape = planner.ModelShape.from_config(model_config(row["model"]))
        step = planner.training_step_bytes(shape, tokens=row["window_tokens"], batch=row["batch"],
                                           checkpointing=bool(row.get("checkpointing")))
        return row["weight_bytes"] + step if row.get("weight_bytes") is not None else None
    return inference_plan(row, hardware).peak_bytes


def inference_plan(row: dict, hardware):
    """The memory planner's plan for an inference row (its window length, batch and, on CPU, the worker's memory
    before loading)."""
    from longqa.models import model_config
    from strategies import memory_planner as planner

    return planner.plan_profile(model_config(row["model"]), parse_profile(row["profile"]), hardware,
                                tokens=min(row["tokens"], MAX_WINDOW_TOKENS), batch=row["batch"],
                                runtime_bytes=row.get("runtime_rss_bytes"))


def add_predictions(rows: list[dict], hardware) -> None:
    """`predicted_peak_bytes` and the signed `prediction_error_pct` against the measured peak, per row."""
    from strategies.memory_planner import error_pct

    for row in rows:
        if row.get("error"):
            continue
        row["predicted_peak_bytes"] = predicted_peak(row, hardware)
        row["prediction_error_pct"] = error_pct(row["predicted_peak_bytes"], row.get("peak_bytes"))


def command_line(args) -> str:
    parts = ["python", "-m", "longqa", "bench", "--model", args.model, "--profiles", args.profiles,
             "--tokens", ",".join(map(str, args.tokens)), "--batch", ",".join(map(str, args.batch)), "--repeat", str(args.repeat),
             "--checks", str(args.checks), "--out", str(args.out)]
    if not args.training:
        parts.append("--no-training")
    return shlex.join(parts)


def write_results(out_dir: Path, results: dict) -> None:
    (out_dir / "results.json").write_text(json.dumps(results, indent=2))


# ------------------------------------------------------------------------------------------------ markdown
def gb(value) -> str:
    return f"{value / GB:.2f}" if value is not None else "–"


def ms(value) -> str:
    return f"{value * 1000:,.0f}" if value is not None else "–"


def times(value) -> str:
    return f"{value:.2f}×" if value is not None else "–"


def pct(value) -> str:
    return f"{value:.0f} %" if value is not None else "–"


def agreement_cell(row: dict) -> str:
    if row.get("profile") == BASELINE:
        return "reference"
    text = f"{pct(row.get('same_top_answer_pct'))} of {row.get('agreement_checks', 0)}"
    return f"**{text} ⚠ changes the top answer**" if row.get("flagged") else text


def delta_cell(row: dict) -> str:
    deltas = [row.get("max_abs_delta_start_logit"), row.get("max_abs_delta_end_logit")]
    deltas = [d for d in deltas if d is not None]
    return f"{max(deltas):.3g}" if deltas else "–"


def prediction_cell(row: dict) -> str:
    error = row.get("prediction_error_pct")
    return f"{gb(row.get('predicted_peak_bytes'))} ({error:+.0f} %)" if error is not None else "–"


def latency_cell(row: dict) -> str:
    return f"{ms(row.get('latency_s_median'))} ({ms(row.get('latency_s_min'))}–{ms(row.get('latency_s_max'))})"


# One entry per column: (header, cell of a row). Add a column by adding a line.
INFERENCE_COLUMNS = [
    ("profile", lambda r: r["profile"]),
    ("strategies", lambda r: ", ".join(r.get("strategies") or []) or "–"),
    ("device", lambda r: ", ".join(r.get("devices") or [])),
    ("dtype", lambda r: r.get("dtype", "–")),
    ("tokens", lambda r: f"{r['tokens']:,}"),
    ("batch", lambda r: str(r["batch"])),
    ("windows", lambda r: str(r.get("windows", "–"))),
    ("weights GB", lambda r: gb(r.get("weight_bytes"))),
    ("peak GB", lambda r: gb(r.get("peak_bytes"))),
    ("predicted GB (error)", lambda r: prediction_cell(r)),
    ("memory × baseline", lambda r: times(r.get("memory_x_baseline"))),
    ("load peak RSS GB", lambda r: gb(r.get("load_peak_rss_bytes"))),
    ("latency ms median (min–max)", latency_cell),
    ("time × baseline", lambda r: times(r.get("latency_x_baseline"))),
    ("tokens/s", lambda r: f"{r['tokens_per_s']:,.0f}" if r.get("tokens_per_s") else "–"),
    ("same top answer", agreement_cell),
    (r"max \|Δ logit\|", delta_cell),  # pipes escaped: a bare | splits the cell
    ("load s", lambda r: f"{r['load_time_s']:.1f}" if r.get("load_time_s") is not None else "–"),
]

TRAINING_COLUMNS = [
    ("profile", lambda r: r["profile"]),
    ("gradient checkpointing", lambda r: "yes" if r.get("checkpointing") else "no"),
    ("device", lambda r: ", ".join(r.get("devices") or [])),
    ("dtype", lambda r: r.get("dtype", "–")),
    ("tokens", lambda r: f"{r['tokens']:,}"),
    ("batch", lambda r: str(r["batch"])),
    ("weights GB", lambda r: gb(r.get("weight_bytes"))),
    ("step GB", lambda r: gb(r.get("step_peak_bytes"))),
    ("peak GB", lambda r: gb(r.get("peak_bytes"))),
    ("predicted GB (error)", lambda r: prediction_cell(r)),
    ("memory × without", lambda r: times(r.get("memory_x_baseline"))),
    ("step ms median (min–max)", latency_cell),
    ("time × without", lambda r: times(r.get("latency_x_baseline"))),
]


INFERENCE_LEGEND = (
    "Peak: while answering (warm-up and timed requests, weights resident): the worker process's peak RSS on CPU, "
    "torch's peak allocated bytes on GPU. Load peak RSS: host memory while loading (converting an fp32 checkpoint "
    "to bf16 or int8 holds both copies for a moment). Latency: one request of `batch` documents, tokenization and "
    "span decoding included, after a warm-up; tokens/s counts document tokens. Same top answer: share of the "
    "agreement checks whose best span equals the fp32 baseline's; max |Δ logit|: largest difference of start/end "
    f"logits from it. ⚠ marks a profile that changes the top answer in more than {FLAG_CHANGED_FRACTION:.0%} of the "
    "checks. Predicted: the memory planner's peak for the row's model, profile, length and batch, made without "
    "loading anything (on CPU from the worker's memory before it loaded the model), and its error against the "
    "measured peak.")

TRAINING_LEGEND = (
    "Peak: the weights plus the bytes the step itself allocates (gradients and the activations kept for backward), "
    "as `strategies.gradient_checkpointing.training_step_readout` measures them. Checkpointing saves memory only "
    "here: at inference no activations are kept for a backward pass, so it saves nothing there.")


def markdown_table(rows: list[dict], columns) -> str:
    lines = ["| " + " | ".join(header for header, _ in columns) + " |",
             "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(cell(row) for _, cell in columns) + " |" for row in rows]
    return "\n".join(lines)


def describe_machine(machine: dict) -> str:
    gpus = ", ".join(f"{g['name']} ({g['total_bytes'] / GB:.0f} GB)" for g in machine.get("gpus") or []) or "none"
    load = machine.get("load_average_start")
    busy = ""
    if load and machine.get("cpu_cores_logical") and load[0] > 0.5 * machine["cpu_cores_logical"]:
        busy = f" **The machine was busy when the run began (load average {load[0]:.1f}): timings are inflated.**"
    return (f"Machine: {machine['cpu_model']}, {machine['cpu_cores_logical']} logical cores, "
            f"{machine['ram_bytes'] / GB:.0f} GB RAM; GPUs: {gpus}. torch {machine['torch']}, transformers "
            f"{machine['transformers']}, accelerate {machine['accelerate']}, Python {machine['python']}.{busy}")


def format_markdown(results: dict) -> str:
    rows = results["rows"]
    inference = [r for r in rows if r.get("kind") == "inference" and not r.get("error")]
    training = [r for r in rows if r.get("kind") == "training" and not r.get("error")]
    parts = [f"# Benchmark: {results['model']}", "",
             f"`{results['command']}` — {results['started']}", "", describe_machine(results["machine"]), ""]
    if inference:
        parts += ["## Inference", "", markdown_table(inference, INFERENCE_COLUMNS), "", INFERENCE_LEGEND, ""]
    if training:
        parts += ["## Training step (forward + backward)", "", markdown_table(training, TRAINING_COLUMNS), "",
                  TRAINING_LEGEND, ""]
    failed = [r for r in rows if r.get("error")]
    if failed or results.get("skipped"):
        parts += ["## Not measured", ""]
        parts += [f"- {r['kind']} {r['profile']} at {r['tokens']:,} tokens: {r['error']}" for r in failed]
        parts += [f"- {s['profile']}: {s['reason']}" for s in results.get("skipped", [])]
        parts.append("")
    return "\n".join(parts) + "\n"


# ------------------------------------------------------------------------------------------------ chart
def plot_results(results: dict, path: Path) -> None:
    """Peak memory and median latency bars per profile, one group per length; training rows in a third panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in results["rows"] if not r.get("error")]
    inference = [r for r in rows if r["kind"] == "inference"]
    training = [r for r in rows if r["kind"] == "training"]
    panels = 3 if training else 2
    figure, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4.5), squeeze=False)
    axes = axes[0]
    profiles = list(dict.fromkeys(r["profile"] for r in inference))
    lengths = list(dict.fromkeys((r["tokens"], r["batch"]) for r in inference))
    width = 0.8 / max(len(profiles), 1)
    for index, profile in enumerate(profiles):
        mine = {(r["tokens"], r["batch"]): r for r in inference if r["profile"] == profile}
        positions = [i + index * width for i in range(len(lengths))]
        axes[0].bar(positions, [mine[t]["peak_bytes"] / GB if t in mine else 0 for t in lengths], width,
                    label=profile)
        axes[1].bar(positions, [mine[t]["latency_s_median"] if t in mine else 0 for t in lengths], width,
                    label=profile)
    for axis, title in zip(axes[:2], ("inference peak memory (GB)", "inference latency, median (s)")):
        axis.set_xticks([i + width * (len(profiles) - 1) / 2 for i in range(len(lengths))],
                        [f"{t:,} tokens × {b}" for t, b in lengths])
        axis.set_title(title)
        axis.legend(fontsize="small")
    if training:
        labels = [f"{r['tokens']:,}t {'ckpt' if r['checkpointing'] else 'no ckpt'}" for r in training]
        axes[2].bar(labels, [r["peak_bytes"] / GB for r in training],
                    color=["tab:orange" if r["checkpointing"] else "tab:blue" for r in training])
        axes[2].set_title("training step peak memory (GB)")
        axes[2].tick_params(axis="x", labelrotation=30)
    figure.suptitle(f"{results['model']} on {results['machine']['cpu_model']}"
                    + (f" + {results['machine']['gpus'][0]['name']}" if results["machine"]["gpus"] else ""))
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


# ------------------------------------------------------------------------------------------------ command
def finish(out_dir: Path, results: dict, hardware) -> None:
    """Ratios and the planner's predictions over the measured rows, then results.json, .md and .png."""
    add_baseline_ratios(results["rows"])
    add_predictions(results["rows"], hardware)
    write_results(out_dir, results)
    (out_dir / "results.md").write_text(format_markdown(results))
    plot_results(results, out_dir / "results.png")


def rescore(out_dir: Path) -> int:
    """Recompute the ratios and predictions of an earlier run's results.json (e.g. after the planner changed), for
    the machine that run recorded."""
    path = out_dir / "results.json"
    if not path.exists():
        raise InputError(f"No results.json in {out_dir} to rescore.")
    results = json.loads(path.read_text())
    finish(out_dir, results, recorded_hardware(results.get("machine")))
    print(f"rescored {path}, results.md and results.png", file=sys.stderr)
    return 0


def run(args) -> int:
    """Measure every planned row in its own process and write the three outputs; 1 when any row failed."""
    from tqdm import tqdm

    from strategies.hardware import detect_hardware

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
    finish(out_dir, results, hardware)
    failed = [row for row in results["rows"] if row.get("error")]
    for row in failed:
        print(f"error: {row['kind']} {row['profile']} {row['tokens']}t: {row['error']}", file=sys.stderr)
    print(f"wrote {out_dir / 'results.json'}, results.md and results.png ({len(results['rows'])} rows, "
          f"{len(failed)} failed; worker logs in {log_path})", file=sys.stderr)
    return 1 if failed else 0
