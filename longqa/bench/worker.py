"""One benchmark row, measured in a fresh process: `python -m longqa.bench.worker SPEC.json RESULT.json`.

The worker loads one (model, profile), runs the agreement checks (which double as the warm-up), then the timed
requests, and writes its row(s) as JSON. It never formats numbers and never runs a second row: peaks would leak.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from longqa.bench.documents import Prose, make_document
from longqa.loader import load_model
from longqa_core import telemetry
from longqa_core.answering import answer
from longqa_core.batching import BatchState, collate, run_windows
from longqa_core.limits import EngineSettings
from longqa_core.spans import decode_answers
from longqa_core.windows import make_windows
from longqa_core.documents import Document, clean_text
from longqa_core.errors import InputError, ProfileError
from strategies.gradient_checkpointing import training_step_readout
from strategies.profiles import Profile, custom_profile, get_profile

SPECIAL_TOKENS_PER_WINDOW = 4  # <s> question </s></s> document </s>
MIN_DOCUMENT_TOKENS = 16
FILLER_SEED_OFFSET = 1_000_003  # the filler after a document's facts comes from another stream
FLAG_CHANGED_FRACTION = 0.05  # a profile that changes the top answer in more checks than this is flagged
BASELINE = "baseline-fp32"  # the reference row: its logits are saved, every other row is compared with them
MAX_WINDOW_TOKENS = 4096  # a training step runs on one window: lengths above this are measured at this length
CUSTOM_PREFIX = "custom:"


@dataclass(frozen=True)
class WorkerSpec:
    """What one worker measures. `tokens`: the input length of one request window (question + document)."""

    mode: str  # "inference" | "training"
    model: str
    profile: str  # a profile name, or "custom:a+b" for a custom stack of strategies
    tokens: int
    batch: int
    repeat: int
    checks: int
    out_dir: str
    baseline: bool = False  # this row is the fp32 reference: save its logits instead of comparing with them

    @property
    def logits_path(self) -> Path:
        return Path(self.out_dir) / f"baseline-logits-{self.tokens}t-b{self.batch}.npz"


@dataclass
class CheckInput:
    """One agreement check: a question and a document sized so that the pair fits the requested input length."""

    question: str
    document: Document


def parse_profile(spec: str) -> Profile:
    """A registry profile by name, or `custom:a+b` for the custom profile with strategies a and b; a strategy may
    carry string options, `custom:half_precision(dtype=bf16)+fast_attention` (several joined by `;`)."""
    if not spec.startswith(CUSTOM_PREFIX):
        return get_profile(spec)
    names, options = [], {}
    for entry in filter(None, spec[len(CUSTOM_PREFIX):].split("+")):
        name, _, arguments = entry.partition("(")
        names.append(name)
        if arguments:
            pairs = arguments[:-1].split(";")
            if not arguments.endswith(")") or not all("=" in pair for pair in pairs):
                raise ProfileError(f"Expected {name}(key=value;...) in {spec!r}, got {entry!r}.")
            options[name] = dict(pair.split("=", 1) for pair in pairs)
    return custom_profile(names, options=options)


# ------------------------------------------------------------------------------------------------ inputs
def count_tokens(tokenizer, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def _cut_to_tokens(tokenizer, text: str, n_tokens: int) -> str | None:
    """The prefix of `text` holding about `n_tokens` tokens, or None when `text` is shorter than that."""
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    if len(offsets) < n_tokens:
        return None
    cut = offsets[n_tokens][0] if len(offsets) > n_tokens else len(text)
    return text[:cut].rstrip()


def _document_text(tokenizer, seed: int, n_tokens: int, chars_per_token: float) -> str:
    """A bench document (its facts in the first ~80 %) padded with more prose and cut to `n_tokens` tokens."""
    text = clean_text(make_document(seed, int(0.8 * n_tokens * chars_per_token))[0])
    writer = Prose(seed + FILLER_SEED_OFFSET)
    while (cut := _cut_to_tokens(tokenizer, text, n_tokens)) is None:
        extra = []
        while sum(len(s) + 1 for s in extra) < 0.3 * n_tokens * chars_per_token + 200:
            extra.append(writer.sentence())
        text = clean_text(" ".join([text, *extra]))
    return cut


def agreement_inputs(tokenizer, tokens: int, count: int, seed: int = 0) -> list[CheckInput]:
    """`count` question/document pairs (`longqa.bench.documents`), each at most `tokens` input tokens long; the first
    has the longest question and fills exactly `tokens` (the timed request asks its question)."""
    seeds = [seed + index for index in range(count)]
    questions = {s: make_document(s, 0)[1] for s in seeds}
    question_tokens = {s: count_tokens(tokenizer, q) for s, q in questions.items()}
    seeds.sort(key=lambda s: -question_tokens[s])
    document_tokens = tokens - question_tokens[seeds[0]] - SPECIAL_TOKENS_PER_WINDOW
    if document_tokens < MIN_DOCUMENT_TOKENS:
        raise InputError(f"{tokens} tokens leave no room for a document after the question; use at least "
                         f"{tokens - document_tokens + MIN_DOCUMENT_TOKENS}.")
    sample = " ".join(Prose(seed).sentence() for _ in range(50))
    chars_per_token = len(sample) / max(count_tokens(tokenizer, sample), 1)
    return [CheckInput(questions[s], Document(f"check-{s}", _document_text(tokenizer, s, document_tokens,
                                                                           chars_per_token)))
            for s in seeds]


# ------------------------------------------------------------------------------------------------ agreement
def check_outputs(runner, tokenizer, inputs: list[CheckInput], settings: EngineSettings,
                  batch_state: BatchState) -> list[dict]:
    """Per check: its input ids, start/end logits over all its windows, and the top answer's character span."""
    all_windows, owners = [], []
    for index, check in enumerate(inputs):
        windows, _ = make_windows(tokenizer, check.question, [check.document], settings)
        all_windows += windows
        owners += [index] * len(windows)
    logits, _, _ = run_windows(runner, all_windows, tokenizer.pad_token_id, settings, batch_state)
    outputs = []
    for index, check in enumerate(inputs):
        mine = [i for i, owner in enumerate(owners) if owner == index]
        windows = [all_windows[i] for i in mine]
        answers = decode_answers(windows, [logits[i] for i in mine], [check.document], settings)
        top = answers[0] if answers else None
        outputs.append({
            "ids": np.concatenate([np.asarray(w.input_ids, dtype=np.int64) for w in windows]),
            "start": np.concatenate([logits[i][0] for i in mine]).astype(np.float32),
            "end": np.concatenate([logits[i][1] for i in mine]).astype(np.float32),
            "span": np.asarray([top.start_char, top.end_char] if top else [-1, -1], dtype=np.int64),
        })
    return outputs


def save_logits(path: Path, outputs: list[dict]) -> None:
    arrays = {f"c{index}_{key}": value for index, output in enumerate(outputs) for key, value in output.items()}
    np.savez_compressed(path, **arrays)


def load_logits(path: Path) -> list[dict]:
    with np.load(path) as data:
        count = len({key.split("_")[0] for key in data.files})
        return [{key: data[f"c{index}_{key}"] for key in ("ids", "start", "end", "span")} for index in range(count)]


def compare_outputs(outputs: list[dict], reference: list[dict]) -> dict:
    """Same top answer span (%) and max |Δ| of start/end logits against the reference, over shared checks."""
    checks = min(len(outputs), len(reference))
    same, delta_start, delta_end, changed = 0, 0.0, 0.0, []
    for index in range(checks):
        ours, theirs = outputs[index], reference[index]
        if not np.array_equal(ours["ids"], theirs["ids"]):
            raise InputError(f"Agreement check {index} has other input ids than the baseline's; the baseline "
                             "logits belong to another model or tokenizer: run the baseline again.")
        if np.array_equal(ours["span"], theirs["span"]):
            same += 1
        else:
            changed.append(index)
        delta_start = max(delta_start, float(np.max(np.abs(ours["start"] - theirs["start"]))))
        delta_end = max(delta_end, float(np.max(np.abs(ours["end"] - theirs["end"]))))
    pct = 100.0 * same / checks if checks else None
    return {
        "agreement_checks": checks,
        "same_top_answer_pct": pct,
        "changed_checks": changed,
        "max_abs_delta_start_logit": delta_start if checks else None,
        "max_abs_delta_end_logit": delta_end if checks else None,
        "flagged": bool(checks) and len(changed) / checks > FLAG_CHANGED_FRACTION,
    }


# ------------------------------------------------------------------------------------------------ memory
def is_cuda_row(devices) -> bool:
    return any(torch.device(device).type == "cuda" for device in devices)


def memory_fields(devices, measurements: list[telemetry.MemoryReadout], run_peak_rss: int | None,
                  process_peak_rss: int) -> dict:
    """Peak memory of a row while it answers (loading has its own readout): torch's peak allocated bytes on GPU,
    the process's peak RSS on CPU, both with the weights resident."""
    def largest(key):
        values = [getattr(m, key) for m in measurements if getattr(m, key) is not None]
        return max(values) if values else None

    peak_allocated = largest("peak_allocated_bytes")
    on_cuda = is_cuda_row(devices) and peak_allocated is not None
    return {
        "peak_bytes": peak_allocated if on_cuda else (run_peak_rss or process_peak_rss),
        "peak_source": "torch peak allocated" if on_cuda else "peak RSS while answering",
        "peak_allocated_bytes": peak_allocated,
        "nvml_used_bytes": largest("nvml_used_bytes"),
        "run_peak_rss_bytes": run_peak_rss,
        "process_peak_rss_bytes": process_peak_rss,
    }


def latency_fields(times_s: list[float], tokens_per_request: int) -> dict:
    median = statistics.median(times_s)
    return {
        "latency_s_median": median, "latency_s_min": min(times_s), "latency_s_max": max(times_s),
        "latency_s_runs": list(times_s),
        "tokens_per_s": tokens_per_request / median if median > 0 else None,
    }


def _base_row(spec: WorkerSpec, loaded, devices) -> dict:
    readout = loaded.readout
    return {
        "kind": spec.mode, "model": spec.model, "profile": spec.profile, "profile_resolved": readout.profile,
        "strategies": list(readout.strategies), "devices": [str(d) for d in devices], "dtype": readout.dtype,
        "tokens": spec.tokens, "batch": spec.batch, "repeat": spec.repeat,
        "load_time_s": readout.load_time_s, "weight_bytes": readout.weight_bytes,
        "weight_bytes_per_device": dict(readout.weight_bytes_per_device),
        "load_peak_rss_bytes": readout.host_peak_rss_bytes, "runtime_rss_bytes": readout.host_rss_before_bytes,
        "error": None,
    }


# ------------------------------------------------------------------------------------------------ rows
def run_inference(spec: WorkerSpec) -> list[dict]:
    """Agreement checks (the warm-up), then `repeat` timed requests of `batch` documents; one row."""
    loaded = load_model(spec.model, parse_profile(spec.profile))
    runner, tokenizer = loaded.runner, loaded.tokenizer
    measurements, times_s, forward_s = [], [], []
    with telemetry.HostPeak() as run_peak:
        settings = dataclasses.replace(loaded.settings, batch_size=spec.batch).resolved(tokenizer)
        inputs = agreement_inputs(tokenizer, spec.tokens, max(spec.checks, spec.batch))
        with telemetry.measure(runner.devices) as warmup:
            outputs = check_outputs(runner, tokenizer, inputs[: spec.checks], settings, loaded.batch_state)
        measurements.append(warmup.memory)
        documents = [check.document for check in inputs[: spec.batch]]
        for _ in range(spec.repeat):
            result = answer(runner, tokenizer, documents, inputs[0].question, settings,
                                      batch_state=loaded.batch_state)
            measurements.append(result.memory)
            times_s.append(result.latency_s["total"])
            forward_s.append(result.latency_s["forward"])
    if spec.baseline:
        save_logits(spec.logits_path, outputs)
    reference = load_logits(spec.logits_path) if spec.logits_path.exists() else []
    first_windows, _ = make_windows(tokenizer, inputs[0].question, [inputs[0].document], settings)
    process_peak = max(loaded.readout.host_peak_rss_bytes or 0, run_peak.peak_rss_bytes or 0)
    row = _base_row(spec, loaded, runner.devices)
    row.update({
        "checkpointing": False, "documents": len(documents), "windows": result.windows,
        "window_tokens": len(first_windows[0].input_ids), "document_tokens": result.tokens,
        "batch_used": result.batch_size, "backoffs": loaded.batch_state.backoffs,
        "forward_s_median": statistics.median(forward_s), "step_peak_bytes": None,
    })
    row.update(latency_fields(times_s, result.tokens))
    row.update(memory_fields(runner.devices, measurements, run_peak.peak_rss_bytes, process_peak))
    row.update(compare_outputs(outputs, reference))
    return [row]


def run_training(spec: WorkerSpec) -> list[dict]:
    """Forward+backward of the QA loss on `batch` windows, without and with checkpointing: two rows."""
    profile = parse_profile(spec.profile)
    loaded = load_model(spec.model, profile)
    model, tokenizer = loaded.model, loaded.tokenizer
    settings = dataclasses.replace(loaded.settings, batch_size=spec.batch).resolved(tokenizer)
    tokens = min(spec.tokens, settings.max_seq_len)
    inputs = agreement_inputs(tokenizer, tokens, spec.batch)
    windows = [make_windows(tokenizer, c.question, [c.document], settings)[0][0] for c in inputs]
    batch = collate(windows, tokenizer.pad_token_id)  # (B, L) each
    with telemetry.HostPeak() as run_peak:
        readouts = [training_step_readout(model, batch, warmup=(index == 0)) for index in range(spec.repeat)]
    devices = loaded.runner.devices
    rows = []
    for checkpointing in (False, True):
        step_peak = max(r.peak_bytes_with if checkpointing else r.peak_bytes_without for r in readouts)
        times_s = [r.time_s_with if checkpointing else r.time_s_without for r in readouts]
        row = _base_row(dataclasses.replace(spec, tokens=tokens), loaded, devices)
        row["strategies"] = row["strategies"] + (["gradient_checkpointing"] if checkpointing else [])
        row.update({
            "checkpointing": checkpointing, "documents": spec.batch, "windows": spec.batch,
            "window_tokens": int(batch["input_ids"].shape[1]), "document_tokens": None, "batch_used": spec.batch,
            "backoffs": 0, "forward_s_median": None,
            "peak_bytes": loaded.readout.weight_bytes + step_peak,
            "peak_source": f"weights + training step ({readouts[0].measured_by})",
            "step_peak_bytes": step_peak,
            "peak_allocated_bytes": None, "nvml_used_bytes": None, "run_peak_rss_bytes": None,
            "process_peak_rss_bytes": run_peak.peak_rss_bytes,  # both steps ran in this process: shared
        })
        row.update(latency_fields(times_s, int(batch["attention_mask"].sum())))
        row.update(compare_outputs([], []))
        rows.append(row)
    return rows


def run_spec(spec: WorkerSpec) -> list[dict]:
    torch.manual_seed(0)
    return run_training(spec) if spec.mode == "training" else run_inference(spec)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m longqa.bench.worker SPEC.json RESULT.json", file=sys.stderr)
        return 2
    spec = WorkerSpec(**json.loads(Path(argv[0]).read_text()))
    began = time.perf_counter()
    rows = run_spec(spec)
    for row in rows:
        row["worker_wall_s"] = time.perf_counter() - began
    Path(argv[1]).write_text(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
