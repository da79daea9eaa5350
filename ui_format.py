"""Formatting for the web page: readout dicts (bytes, seconds) into the rows, labels and frames the UI shows.

Pure functions of plain data. It knows nothing of gradio, models or sessions, and never renders document text
as HTML: text goes into cells and highlighted spans, which the page shows as text.
"""

from __future__ import annotations

import html
import re

import pandas as pd

MISSING = "—"
EVIDENCE_CONTEXT_CHARS = 300
_WORDS = re.compile(r"\s*\S+\s*|\s+")  # a word with the white space around it
STAGES = ("extract", "tokenize", "rank", "forward", "decode", "total")

DOCUMENT_HEADERS = ["document", "characters", "tokens", "windows"]
ANSWER_HEADERS = ["rank", "answer", "score", "document", "position (characters)"]
LATENCY_HEADERS = ["stage", "time"]
MEMORY_HEADERS = ["device", "peak (GPU allocated, host RSS)", "now (GPU reserved, host RSS)", "NVML used",
                  "NVML total"]
RUN_HEADERS = ["readout", "value"]
LOAD_HEADERS = ["model", "profile", "strategies", "weights dtype", "load time", "weights per device", "device map",
                "host RAM peak while loading", "fallback", "notes"]  # the keys of `load_rows`: the table is one row
HISTORY_HEADERS = ["run", "profile", "model", "reading", "tokens", "windows", "peak GPU memory", "host peak RSS",
                   "latency", "tokens/s"]
TRAINING_HEADERS = ["training step", "peak memory", "time"]
PLOT_MEMORY = "peak memory (MB)"
PLOT_LATENCY = "latency (s)"


def escape_markdown(text: str) -> str:
    """Text shown literally inside Markdown: HTML escaped, Markdown punctuation backslash-escaped."""
    return re.sub(r"([\\`*_{}\[\]()#+\-.!|~>])", r"\\\1", html.escape(str(text), quote=False))


def format_bytes(n_bytes: int | float | None) -> str:
    """Decimal units, as GPU boxes and `Hardware.describe` use them: 15.6 GB, 812.3 MB, 4.1 kB, 12 B."""
    if n_bytes is None:
        return MISSING
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n_bytes) >= size:
            return f"{n_bytes / size:.1f} {unit}"
    return f"{int(n_bytes)} B"


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return MISSING
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.2f} s"


def format_rate(tokens_per_s: float | None) -> str:
    return MISSING if tokens_per_s is None else f"{tokens_per_s:,.0f} tokens/s"


def document_rows(documents: list[dict], estimated: bool = False) -> list[list]:
    """One row per document; `estimated` counts (a guided read tokenizes only what it reads) say "about"."""
    if estimated:
        return [[d["name"], d["chars"], f"about {d['tokens']:,}", f"about {d['windows']:,}"] for d in documents]
    return [[d["name"], d["chars"], d["tokens"], d["windows"]] for d in documents]


def answer_rows(answers: list[dict]) -> list[list]:
    rows = []
    for rank, answer in enumerate(answers, 1):
        if answer["document"] is None:
            where, document = MISSING, "(no answer)"
        else:
            where, document = f"{answer['start_char']:,}–{answer['end_char']:,}", answer["document"]
        rows.append([rank, answer["text"], f"{answer['score']:.4g}", document, where])
    return rows


def best_answer(answers: list[dict]) -> str:
    if not answers or answers[0]["document"] is None:
        return "(no answer found in the documents)"
    return answers[0]["text"]


def evidence(text: str, start: int, end: int, context_chars: int = EVIDENCE_CONTEXT_CHARS) -> list[tuple]:
    """The passage around text[start:end] as highlighted spans: the answer labelled "answer", the rest one span per
    word (so the passage wraps like text around the highlight), cut at white space with an ellipsis where cut."""
    left = max(0, start - context_chars)
    if left > 0:
        space = text.find(" ", left, start)
        left = space + 1 if space != -1 else left
    right = min(len(text), end + context_chars)
    if right < len(text):
        space = text.rfind(" ", end, right)
        right = space if space != -1 else right
    before = ("…" if left > 0 else "") + text[left:start]
    after = text[end:right] + ("…" if right < len(text) else "")
    return [*((word, None) for word in _WORDS.findall(before)), (text[start:end], "answer"),
            *((word, None) for word in _WORDS.findall(after))]


def latency_rows(latency_s: dict, tokens_per_s: float | None) -> list[list]:
    rows = [[stage, format_seconds(latency_s.get(stage))] for stage in STAGES]
    rows.append(["throughput", format_rate(tokens_per_s)])
    return rows


def memory_rows(memory: dict) -> list[list]:
    """One row per GPU (peak allocated, reserved, NVML used/total), then the host (peak RSS, RSS now)."""
    rows = [[f"cuda:{d['index']} {d['name']}", format_bytes(d["peak_allocated_bytes"]),
             format_bytes(d["reserved_bytes"]), format_bytes(d["nvml_used_bytes"]), format_bytes(d["nvml_total_bytes"])]
            for d in memory.get("devices", [])]
    if not rows:
        rows.append(["GPU", "no GPU used", MISSING, MISSING, MISSING])
    rows.append(["host", format_bytes(memory.get("host_peak_rss_bytes")), format_bytes(memory.get("host_rss_bytes")),
                 MISSING, MISSING])
    return rows


def run_rows(readout: dict) -> list[list]:
    return [
        ["model", readout.get("model") or MISSING],
        ["profile", readout.get("profile") or MISSING],
        ["tokens", f"{readout['tokens']:,}"],
        ["windows", readout["windows"]],
        ["reading", reading_summary(readout)],
        ["why", (readout.get("reading") or {}).get("reason") or MISSING],
        ["batch size used", readout["batch_size"]],
        ["out-of-memory back-offs", readout["backoffs"]],
        ["memory: predicted vs measured", prediction_text(readout.get("memory_prediction"))],
        ["notices", " ".join(readout.get("notices") or []) or "none"],
        *([["queue", queue_text(readout["queue"])]] if readout.get("queue") else []),  # a shared deployment
        *([["replica", readout["replica"]]] if readout.get("replica") else []),  # served by Ray Serve replicas
    ]


def queue_text(queue: dict) -> str:
    """How long a request waited for the model, and behind how many: "waited 1.2 s, 3 ahead when it arrived"."""
    ahead = queue.get("ahead_at_start") or 0
    return (f"waited {format_seconds(queue.get('waited_s'))}, {ahead} request{'s' if ahead != 1 else ''} ahead "
            "when it arrived")


def full_read_s(readout: dict) -> float | None:
    """A guided read's prediction of the full read's time: reading the files once, and its own seconds per window
    read (tokenizing, forward, decoding) times every window (None when nothing was skipped or nothing was timed)."""
    reading = readout.get("reading") or {}
    read, total = reading.get("windows_read") or 0, reading.get("windows_total") or 0
    latency = readout.get("latency_s") or {}
    if read <= 0 or total <= read or not latency.get("forward"):
        return None
    # Reading the files is paid once whatever is read; tokenizing, the forward passes and decoding grow with the
    # windows.
    per_window = sum(latency.get(stage) or 0.0 for stage in ("tokenize", "forward", "decode")) / read
    return (latency.get("extract") or 0.0) + per_window * total


def reading_summary(readout: dict) -> str:
    """E.g. "read 6 of 51 windows (guided) in 21 s; a full read would take about 3 min"."""
    reading = readout.get("reading") or {}
    if not reading:
        return MISSING
    about = "about " if reading.get("windows_total_estimated") else ""
    text = (f"read {reading['windows_read']:,} of {about}{reading['windows_total']:,} windows ({reading['mode']}) "
            f"in {format_seconds(readout['latency_s'].get('total'))}")
    predicted = full_read_s(readout)
    if predicted is not None:
        text += f"; a full read would take about {format_seconds(predicted)}"
    return text


def prediction_text(prediction: dict | None) -> str:
    """'predicted 1.2 GB, measured 1.3 GB (-8 %), peak RSS on cpu': the planner's forecast against the run."""
    if not prediction or prediction.get("predicted_peak_bytes") is None:
        return MISSING
    measured = prediction.get("measured_peak_bytes")
    error = prediction.get("error_pct")
    error_part = f" ({error:+.0f} %)" if error is not None else ""
    return (f"predicted {format_bytes(prediction['predicted_peak_bytes'])}, measured {format_bytes(measured)}"
            f"{error_part}, {prediction.get('measured_as', 'peak')} on {prediction.get('device', MISSING)}")


def load_rows(readout: dict) -> list[list]:
    per_device = readout.get("weight_bytes_per_device") or {}
    device_map = readout.get("device_map")
    if device_map:
        by_device: dict[str, int] = {}
        for device in device_map.values():
            by_device[device] = by_device.get(device, 0) + 1
        placement = ", ".join(f"{device}: {n} module(s)" for device, n in by_device.items())
    else:
        placement = "whole model on one device"
    return [
        ["model", readout.get("model_ref") or MISSING],
        ["profile", readout.get("profile") or MISSING],
        ["strategies", ", ".join(readout.get("strategies") or []) or "none"],
        ["weights dtype", readout.get("dtype") or MISSING],
        ["load time", format_seconds(readout.get("load_time_s"))],
        ["weights per device", ", ".join(f"{d}: {format_bytes(b)}" for d, b in per_device.items()) or MISSING],
        ["device map", placement],
        ["host RAM peak while loading", format_bytes(readout.get("host_peak_rss_bytes"))],
        ["fallback", readout.get("fallback_reason") or "none"],
        ["notes", "; ".join(readout.get("notes") or []) or "none"],
    ]


def history_entry(readout: dict, run: int) -> dict:
    """What the run history keeps of one /ask readout (bytes and seconds)."""
    memory = readout["memory"]
    return {"run": run, "profile": readout.get("profile"), "model": readout.get("model"),
            "reading": (readout.get("reading") or {}).get("mode"),
            "tokens": readout["tokens"], "windows": readout["windows"],
            "peak_allocated_bytes": memory.get("peak_allocated_bytes"),
            "host_peak_rss_bytes": memory.get("host_peak_rss_bytes"),
            "latency_s": readout["latency_s"]["total"], "tokens_per_s": readout.get("tokens_per_s")}


def history_rows(history: list[dict]) -> list[list]:
    return [[h["run"], h["profile"], h["model"], h.get("reading") or MISSING, h["tokens"], h["windows"],
             format_bytes(h["peak_allocated_bytes"]),
             format_bytes(h["host_peak_rss_bytes"]), format_seconds(h["latency_s"]), format_rate(h["tokens_per_s"])]
            for h in history]


def history_frame(history: list[dict]) -> pd.DataFrame:
    """Data for the bar plots: one row per run; peak memory is the GPU peak where a GPU ran, else host RSS."""
    rows = []
    for h in history:
        peak = h["peak_allocated_bytes"] if h["peak_allocated_bytes"] is not None else h["host_peak_rss_bytes"]
        mode = f" {h['reading']}" if h.get("reading") else ""
        rows.append({"run": f"{h['run']:02d} {h['profile']}{mode}", "profile": h["profile"],
                     PLOT_MEMORY: (peak or 0) / 1e6, PLOT_LATENCY: h["latency_s"]})
    return pd.DataFrame(rows, columns=["run", "profile", PLOT_MEMORY, PLOT_LATENCY])


def gpu_gauge(snapshot: list[dict]) -> dict[str, float]:
    """{"GPU 0 name: used / total": fraction used} for a gauge of bars; GPUs NVML cannot measure are left out."""
    gauge = {}
    for gpu in snapshot:
        used, total = gpu.get("nvml_used_bytes"), gpu.get("nvml_total_bytes")
        if used is None or not total:
            continue
        gauge[f"GPU {gpu['index']} {gpu['name']}: {format_bytes(used)} / {format_bytes(total)}"] = used / total
    return gauge


def training_rows(readout) -> list[list]:
    return [["without checkpointing", format_bytes(readout.peak_bytes_without), format_seconds(readout.time_s_without)],
            ["with checkpointing", format_bytes(readout.peak_bytes_with), format_seconds(readout.time_s_with)]]


def training_summary(readout, window_tokens: int) -> str:
    saved = readout.saved_bytes
    verb = "saves" if saved > 0 else "changes"
    return (f"One forward+backward step on a {window_tokens:,}-token window (measured by {readout.measured_by}): "
            f"checkpointing {verb} {format_bytes(abs(saved))} ({readout.saved_fraction:.0%} of the step's peak) "
            f"and takes {readout.time_ratio:.2f}× the time. It saves nothing at inference: activations are only "
            "kept, and so only recomputed, when a backward pass follows.")


# ------------------------------------------------------------------------------------------------ plan for a machine
PLAN_HEADERS = ["profile", "fits (predicted)", "window × batch", "predicted peak", "per device (predicted)", "why"]
PLAN_PART_LABELS = {"weights": "weights", "activations": "activations", "offload_stream": "offloaded layer",
                    "allocator_slack": "allocator slack", "cuda_context": "CUDA context", "process": "process",
                    "overhead": "allocator/scratch"}


def plan_device_text(device) -> str:
    """"cuda:0 5.4 GB of 16 GB: weights 0.9 GB + activations 3.5 GB + ..." from a plan's device (fields read)."""
    total = f" of {format_bytes(device.total_bytes)}" if device.total_bytes else ""
    parts = " + ".join(f"{PLAN_PART_LABELS.get(name, name)} {format_bytes(value)}"
                       for name, value in device.parts_bytes.items() if value)
    return f"{device.device} {format_bytes(device.need_bytes)}{total}: {parts}"


def plan_rows(plan) -> list[list]:
    """One row per profile of a machine plan (`longqa.gpu_plan.MachinePlan`, fields read)."""
    rows = []
    for profile in plan.profiles:
        name = profile.name + (" (recommended)" if profile.name == plan.recommended else "")
        setting = f"{profile.tokens:,} × {profile.batch}" if profile.tokens else MISSING
        rows.append([name, "yes" if profile.fits else "no", setting, format_bytes(profile.peak_bytes),
                     "; ".join(plan_device_text(device) for device in profile.devices) or MISSING, profile.why])
    return rows


def plan_recommendation(plan) -> str:
    """Markdown: our recommendation for the planned machine, labelled predicted."""
    machine = escape_markdown(plan.machine.description)
    if plan.recommended is None:
        return f"### Ours: nothing fits (predicted)\n{escape_markdown(plan.recommendation_reason)}\n\n{machine}"
    chosen = plan.profile(plan.recommended)
    return (f"### Ours: `{chosen.name}` (predicted {format_bytes(chosen.peak_bytes)} at its largest device)\n"
            f"{escape_markdown(', '.join(chosen.strategies))}; {chosen.tokens:,} tokens × batch {chosen.batch}: "
            f"{escape_markdown(plan.recommendation_reason)}.\n\nMachine: {machine}")


def plan_article(plan) -> str:
    """Markdown: the article's advice for the planned GPU and where the planner's predictions disagree."""
    article = plan.article
    if article is None:
        return "### The article\nIt gives no advice for a machine without a GPU."
    corrections = "\n".join(f"- {escape_markdown(line)}" for line in article.corrections)
    return (f"### The article: {escape_markdown(article.advice)}\n"
            f"Its answer for {escape_markdown(article.cards)} (our profile `{article.profile}`). Where the "
            f"predictions say it is wrong or says too little:\n{corrections}")
