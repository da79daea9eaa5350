"""The bench's report: from measured rows to ratios against the baseline, the memory planner's predictions beside
them, and results.json, results.md and results.png. It measures nothing and starts no process
(`longqa.bench.runner` does).
"""

from __future__ import annotations

import json
from pathlib import Path

from longqa.bench.worker import BASELINE, FLAG_CHANGED_FRACTION, MAX_WINDOW_TOKENS, parse_profile
from longqa.models import model_config
from longqa_core.errors import InputError
from strategies import memory_planner as planner
from strategies.hardware import Gpu, Hardware

GB = 10**9


# ------------------------------------------------------------------------------------------------ ratios, predictions
def recorded_hardware(machine: dict) -> Hardware:
    """The hardware a results.json describes (its `machine`), not the host reading it: predictions and fits of
    an earlier run must not change with the machine that rescores them."""
    if not machine or "cpu_bf16" not in machine:
        raise InputError("This results.json does not record the machine it was measured on (no 'machine.cpu_bf16').")
    gpus = tuple(Gpu(index, gpu["name"], int(gpu["total_bytes"]), tuple(gpu["compute_capability"])
                     if gpu.get("compute_capability") else None)
                 for index, gpu in enumerate(machine.get("gpus") or []))
    return Hardware(gpus=gpus, cuda_available=bool(gpus), cpu_bf16=bool(machine["cpu_bf16"]))


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


def window_s(row: dict) -> float | None:
    """Seconds per window of a request: its fastest timed latency (tokenizing and decoding included) over its
    windows; the fastest, as a busy machine inflates it least."""
    latency, windows = row.get("latency_s_min"), row.get("windows")
    return latency / windows if latency is not None and windows else None


def predicted_peak(row: dict, hardware) -> int | None:
    """What the memory planner predicts for a row, from its model, profile, length and batch alone (and, on CPU,
    the worker's memory before it loaded the model): the prediction the planner would have made beforehand."""
    if row.get("kind") == "training":
        shape = planner.ModelShape.from_config(model_config(row["model"]))
        step = planner.training_step_bytes(shape, tokens=row["window_tokens"], batch=row["batch"],
                                           checkpointing=bool(row.get("checkpointing")))
        return row["weight_bytes"] + step if row.get("weight_bytes") is not None else None
    return inference_plan(row, hardware).peak_bytes


def inference_plan(row: dict, hardware) -> planner.MemoryPlan:
    """The memory planner's plan for an inference row (its window length, batch and, on CPU, the worker's memory
    before loading)."""
    return planner.plan_profile(model_config(row["model"]), parse_profile(row["profile"]), hardware,
                                tokens=min(row["tokens"], MAX_WINDOW_TOKENS), batch=row["batch"],
                                runtime_bytes=row.get("runtime_rss_bytes"))


def predicted_gpu_need(row: dict, hardware) -> int | None:
    """What the planner says a GPU row needs on its first GPU: the peak plus the allocator's slack and the CUDA
    context (what `python -m longqa plan` reports per device), to set beside NVML's used bytes; None off the GPU."""
    if row.get("kind") == "training":
        return None
    plan = inference_plan(row, hardware)
    return plan.device_need_bytes.get(plan.device) if plan.device.startswith("cuda") else None


def add_predictions(rows: list[dict], hardware) -> None:
    """`predicted_peak_bytes` and the signed `prediction_error_pct` against the measured peak, per row; on a GPU
    also `predicted_need_bytes` and `need_error_pct` against NVML's used bytes, which check the planner's
    constants for the CUDA context and the allocator's slack."""
    for row in rows:
        if row.get("error"):
            continue
        row["predicted_peak_bytes"] = predicted_peak(row, hardware)
        row["prediction_error_pct"] = planner.error_pct(row["predicted_peak_bytes"], row.get("peak_bytes"))
        row["predicted_need_bytes"] = predicted_gpu_need(row, hardware)
        row["need_error_pct"] = planner.error_pct(row["predicted_need_bytes"], row.get("nvml_used_bytes"))


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
    ("best s per window", lambda r: f"{window_s(r):.2f}" if window_s(r) is not None else "–"),
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
    "measured peak. Best s per window: the fastest timed request over its windows.")

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


def cpu_kind(machine: dict) -> str:
    """The CPU named by what decides its speed: model, whether bf16 is native, the matrix features it has."""
    native = "native bf16" if machine.get("cpu_bf16") else "no native bf16 (bf16 emulated)"
    flags = machine.get("cpu_flags")
    return f"{machine.get('cpu_model', 'unknown CPU')}, {native}" + (f" ({', '.join(flags)})" if flags else "")


def summary_lines(results: dict) -> list[str]:
    """One line per inference row for the terminal: its best time per window."""
    return [f"{row['profile']} {row['tokens']:,} tokens, batch {row['batch']}: {window_s(row):.2f} s a window"
            for row in results["rows"]
            if row.get("kind") == "inference" and not row.get("error") and window_s(row) is not None]


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
    import matplotlib  # deferred: heavy, and only the chart needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # deferred with matplotlib, after choosing the backend

    rows = [r for r in results["rows"] if not r.get("error")]
    inference = [r for r in rows if r["kind"] == "inference"]
    training = [r for r in rows if r["kind"] == "training"]
    panels = 2 + bool(training)
    figure, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4.5), squeeze=False)
    axes = list(axes[0])
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
    for axis, title in [(axes[0], "inference peak memory (GB)"), (axes[1], "inference latency, median (s)")]:
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
    figure.suptitle(f"{results['model']} on {cpu_kind(results['machine'])}"
                    + (f" + {results['machine']['gpus'][0]['name']}" if results["machine"]["gpus"] else ""))
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


# ------------------------------------------------------------------------------------------------ the report
def write_report(out_dir: Path, results: dict, hardware) -> None:
    """Ratios and the planner's predictions over the measured rows, then results.json, .md and .png."""
    add_baseline_ratios(results["rows"])
    add_predictions(results["rows"], hardware)
    write_results(out_dir, results)
    (out_dir / "results.md").write_text(format_markdown(results))
    plot_results(results, out_dir / "results.png")
