"""The peers' per-window times (issue 60): one 4,096-token window of a Longformer QA model with random weights of
the real shapes through this project's `cpu` profile and through the ways others run the same model on a CPU
(transformers eager, torch.compile, OpenVINO, ONNX Runtime), side by side:

    python -m bench peers [--model arch:base] [--rounds 5] [--systems project,eager-fp32,...] [--out docs/results/peers]

Each system runs in its own persistent process (`python -m bench.peers --worker SYSTEM`), so no system's threads,
allocator or compiled code touch another's: each prepares and warms up alone, then the rounds call one forward per
system in turn, with a pause between, and each process times its own forward. Every system's logits are checked
against eager fp32's. Writes peers-<kind>-<model>.json and .md. Measures; `bench.peers_report` divides and formats.
OpenVINO and ONNX Runtime are optional (requirements-peers.txt): a missing one is reported, the rest still measured.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import psutil
import torch

from bench.floor import kind_name, native_precisions
from bench.levers import window_batch
from bench.measured import write_measurement
from bench.peers_report import markdown
from longqa.bench.runner import PROJECT_ROOT, cpu_flags, cpu_model, worker_env
from longqa.loader import load_model
from longqa_core.batching import ModelRunner
from longqa_core.errors import InputError
from longqa_core.telemetry import current_rss_bytes
from strategies.hardware import Hardware, detect_hardware
from strategies.profiles import get_profile, select_strategies

TOKENS = 4096  # one full window of the real checkpoints
WARMUP = 1  # untimed forwards after the first call (which compiles, for the systems that compile)
PAUSE_S = 1.0  # between two systems' forwards: the last one's threads have gone to sleep before the next starts
PEERS_REQUIREMENTS = "requirements-peers.txt"
OUTPUT_NAMES = ["start_logits", "end_logits"]
# A system's process is stopped when the machine's free memory falls under this: the kernel's OOM killer would
# otherwise pick a process, perhaps a neighbour's (the legacy ONNX export of arch:base peaks at 16.7 GB resident).
MIN_AVAILABLE_BYTES = 2 * 1024**3
MEMORY_POLL_S = 0.2
PEER_PACKAGES = ("openvino", "onnxruntime", "onnx", "onnxscript")  # their versions go in the record


@dataclass(frozen=True)
class System:
    """One way to run the window: `packages` are the optional ones it imports (import name, pip name)."""

    name: str
    description: str
    packages: tuple[tuple[str, str], ...] = ()
    needs_native_bf16: bool = False
    strip_asserts: bool = False  # run under `python -O` (torch.compile: see `prepare_compile`)
    prepares_first: bool = False  # preparing it needs far more memory than running it: started before the others


SYSTEMS = (
    System("project", "this project's `cpu` profile, loaded as the product loads it"),  # the row the ratios divide by
    System("eager-fp32", "transformers' LongformerForQuestionAnswering as it is, fp32"),  # the agreement reference
    System("eager-bf16", "the same in bf16", needs_native_bf16=True),  # emulated (~100x slower) without AVX512-BF16
    System("compile-fp32", "torch.compile of the eager fp32 model (inductor, default mode)", strip_asserts=True),
    System("openvino-fp32", "OpenVINO: openvino.convert_model of the eager model, CPU, inference precision f32",
           packages=(("openvino", "openvino"),), prepares_first=True),
    System("openvino-default", "the same with OpenVINO's default inference precision for this CPU",
           packages=(("openvino", "openvino"),)),  # run only where that default is not f32
    System("onnxruntime-fp32", "ONNX Runtime (CPU provider) on torch.onnx.export of the eager model, fp32",
           packages=(("onnxruntime", "onnxruntime"), ("onnx", "onnx")), prepares_first=True),
)
BY_NAME = {system.name: system for system in SYSTEMS}
REFERENCE = "eager-fp32"
OPENVINO_DEFAULT = "openvino-default"


# ------------------------------------------------------------------------------------------------ what runs here
def missing_packages(system: System, find_spec: Callable = importlib.util.find_spec) -> str | None:
    """Why `system` cannot run for want of a package, with the install command; None when all are there."""
    absent = [pip_name for module, pip_name in system.packages if find_spec(module) is None]
    if not absent:
        return None
    return (f"{', '.join(absent)} {'is' if len(absent) == 1 else 'are'} not installed: "
            f"pip install -r {PEERS_REQUIREMENTS} (or pip install {' '.join(absent)})")


def plan_systems(names: list[str], hardware: Hardware,
                 find_spec: Callable = importlib.util.find_spec) -> tuple[list[System], list[dict]]:
    """The systems to start, and a row for each asked-for one that will not run here: "missing" (a package, with
    how to install it) or "skipped" (not meaningful on this CPU). Asked for with `openvino-fp32`, `openvino-default`
    starts later, and only where OpenVINO's default precision here is not f32."""
    unknown = [name for name in names if name not in BY_NAME]
    if unknown:
        raise InputError(f"Unknown system {', '.join(unknown)}; choose from {', '.join(BY_NAME)}.")
    to_run, not_run = [], []
    for system in (BY_NAME[name] for name in names):
        why_missing = missing_packages(system, find_spec)
        if system.needs_native_bf16 and not hardware.cpu_bf16:
            _, skipped = native_precisions(hardware)
            not_run.append(not_run_row(system, "skipped", f"{skipped['bf16']}: bf16 is emulated there, about 100x "
                                                          "slower than fp32, not worth timing"))
        elif why_missing:
            not_run.append(not_run_row(system, "missing", why_missing))
        elif system.name != OPENVINO_DEFAULT or "openvino-fp32" not in names:
            to_run.append(system)
    return to_run, not_run


def not_run_row(system: System, status: str, reason: str) -> dict:
    return {"name": system.name, "description": system.description, "status": status, "error": reason}


# ------------------------------------------------------------------------------------------------ the systems
@dataclass
class Prepared:
    """A system ready to run the window: `run()` does one forward and returns its (start, end) logits, (1, L) each."""

    run: Callable[[], tuple[np.ndarray, np.ndarray]]
    tokens: int
    notes: list[str]
    default_precision: str | None = None  # OpenVINO's own inference precision on this CPU


def numpy_logits(start: torch.Tensor, end: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    return start.float().numpy(), end.float().numpy()  # (1, L) each


def loaded_with_window(model_ref: str, profile: str, hardware: Hardware):
    """The loader's model under `profile` and the window every system runs: the first agreement input's question
    and document, one window of TOKENS tokens (the tokenizer is the model's, the same for every profile)."""
    loaded = load_model(model_ref, profile, hardware=hardware)
    batch = window_batch(loaded.tokenizer, TOKENS)  # (1, L) each: input_ids, attention_mask, global_attention_mask
    return loaded, batch


def prepare_project(model_ref: str, hardware: Hardware) -> Prepared:
    loaded, batch = loaded_with_window(model_ref, "cpu", hardware)
    stack = ", ".join(select_strategies(get_profile("cpu"), hardware))
    return Prepared(lambda: numpy_logits(*loaded.runner(batch)), batch["input_ids"].shape[1],
                    [f"strategies: {stack}"])


def prepare_eager(model_ref: str, hardware: Hardware, dtype: torch.dtype = torch.float32) -> Prepared:
    """transformers' model with nothing applied: the loader's `baseline-fp32` profile (the weights `cpu` loads)."""
    loaded, batch = loaded_with_window(model_ref, "baseline-fp32", hardware)
    runner = ModelRunner(loaded.model.to(dtype))
    return Prepared(lambda: numpy_logits(*runner(batch)), batch["input_ids"].shape[1],
                    [f"weights and activations in {str(dtype).removeprefix('torch.')}"])


def prepare_compile(model_ref: str, hardware: Hardware) -> Prepared:
    """torch.compile of the eager model. transformers' Longformer asserts on shapes with a tensor inside a list
    (`list(size) == [..., max_num_global_attn_indices, ...]`), which dynamo cannot turn into a bool, so compiling
    it fails with global attention; under `python -O` Python drops asserts and dynamo compiles around its graph
    breaks (`.item()`, data-dependent sizes)."""
    loaded, batch = loaded_with_window(model_ref, "baseline-fp32", hardware)
    runner = ModelRunner(torch.compile(loaded.model))
    asserts = "under python -O (no asserts)" if sys.flags.optimize else "with transformers' shape asserts (no -O)"
    notes = [f"torch.compile(model), default mode, {asserts}; graph breaks where the global attention's sizes "
             "depend on the data"]
    return Prepared(lambda: numpy_logits(*runner(batch)), batch["input_ids"].shape[1], notes)


def prepare_openvino(model_ref: str, hardware: Hardware, threads: int, precision: str | None) -> Prepared:
    import openvino as ov  # deferred: optional and heavy, only this system's process loads it

    loaded, batch = loaded_with_window(model_ref, "baseline-fp32", hardware)
    with warnings.catch_warnings():  # the tracer warns about every shape it freezes: one window shape is all we run
        warnings.simplefilter("ignore")
        converted = ov.convert_model(loaded.model, example_input=batch)
    loaded.unload()
    core = ov.Core()
    default_precision = openvino_type_name(str(core.get_property("CPU", "INFERENCE_PRECISION_HINT")))
    config = {"INFERENCE_NUM_THREADS": threads, **({"INFERENCE_PRECISION_HINT": precision} if precision else {})}
    compiled = core.compile_model(converted, "CPU", config)
    feeds = {port.get_any_name(): batch[port.get_any_name()].numpy() for port in compiled.inputs}
    start_port, end_port = compiled.outputs[:2]  # the model's outputs in order: start_logits, end_logits
    request = compiled.create_infer_request()

    def run():
        result = request.infer(feeds)
        return np.asarray(result[start_port]), np.asarray(result[end_port])

    notes = [f"INFERENCE_PRECISION_HINT {openvino_type_name(str(compiled.get_property('INFERENCE_PRECISION_HINT')))}",
             *(f"{name} {compiled.get_property(name)}" for name in ("PERFORMANCE_HINT", "INFERENCE_NUM_THREADS"))]
    return Prepared(run, batch["input_ids"].shape[1], notes, default_precision=default_precision)


def openvino_type_name(text: str) -> str:
    """OpenVINO's precision as its config spells it ("f32", "bf16"), from a Type's str ("<Type: 'float32'>")."""
    names = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}
    match = re.search(r"'(\w+)'", text)
    word = match.group(1) if match else text
    return names.get(word, word)


def export_onnx(model: torch.nn.Module, batch: dict, folder: Path) -> tuple[Path, list[str]]:
    """The model as ONNX: the dynamo exporter first, then the legacy (TorchScript) one; the path and, per exporter
    that failed, why. RuntimeError naming both when neither exports."""
    failures = []
    for label, dynamo in (("dynamo", True), ("legacy TorchScript", False)):
        if dynamo and importlib.util.find_spec("onnxscript") is None:
            failures.append(f"{label} exporter: onnxscript is not installed (pip install -r {PEERS_REQUIREMENTS})")
            continue
        path = folder / f"model-{'dynamo' if dynamo else 'legacy'}.onnx"
        try:
            with warnings.catch_warnings():  # tracer warnings, one per frozen shape
                warnings.simplefilter("ignore")
                torch.onnx.export(model, (), str(path), kwargs=batch, input_names=list(batch),
                                  output_names=OUTPUT_NAMES, dynamo=dynamo)
            return path, failures + [f"exported with the {label} exporter"]
        except Exception as exc:  # noqa: BLE001 - each exporter's own failure is the finding
            failures.append(f"{label} exporter failed: {error_line(exc)}")
    raise RuntimeError("; ".join(failures))


# The export bakes the traced window's masks in as constants (about 100 MB each, several a layer); ORT's constant
# folding then materializes what is computed from them: creating the session on arch:base passed 21 GB resident and
# was killed for want of memory (23 GB machine), against a 6.8 GB peak without it.
ORT_DISABLED_OPTIMIZERS = ["ConstantFolding"]


def prepare_onnxruntime(model_ref: str, hardware: Hardware, threads: int, folder: Path) -> Prepared:
    import onnxruntime as ort  # deferred: optional and heavy, only this system's process loads it

    loaded, batch = loaded_with_window(model_ref, "baseline-fp32", hardware)
    path, notes = export_onnx(loaded.model, batch, folder)
    loaded.unload()
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"],
                                   disabled_optimizers=ORT_DISABLED_OPTIMIZERS)
    feeds = {given.name: batch[given.name].numpy() for given in session.get_inputs()}

    def run():
        start, end = session.run(OUTPUT_NAMES, feeds)
        return np.asarray(start), np.asarray(end)

    notes.append(f"graph optimization {options.graph_optimization_level.name} without "
                 f"{', '.join(ORT_DISABLED_OPTIMIZERS)}")
    return Prepared(run, batch["input_ids"].shape[1], notes)


def prepare(system: str, model_ref: str, threads: int, folder: Path) -> Prepared:
    hardware = detect_hardware()
    if system == "project":
        return prepare_project(model_ref, hardware)
    if system == "eager-fp32":
        return prepare_eager(model_ref, hardware)
    if system == "eager-bf16":
        return prepare_eager(model_ref, hardware, torch.bfloat16)
    if system == "compile-fp32":
        return prepare_compile(model_ref, hardware)
    if system in ("openvino-fp32", OPENVINO_DEFAULT):
        return prepare_openvino(model_ref, hardware, threads, "f32" if system == "openvino-fp32" else None)
    if system == "onnxruntime-fp32":
        return prepare_onnxruntime(model_ref, hardware, threads, folder)
    raise InputError(f"Unknown system {system!r}")


ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def error_line(exc: BaseException) -> str:
    """The exception's first line, and its root cause's where the exception wraps one (torch.export's does)."""
    def first(error: BaseException) -> str:
        lines = ANSI_ESCAPE.sub("", str(error)).strip().splitlines()
        return f"{type(error).__name__}: {lines[0].strip() if lines else ''}"

    root = exc
    while root.__cause__ is not None and root.__cause__ is not root:
        root = root.__cause__
    return first(exc) if root is exc else f"{first(exc)} (caused by {first(root)})"


# ------------------------------------------------------------------------------------------------ one system's process
def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux counts it in KiB


def serve(system: str, model_ref: str, threads: int, warmup: int) -> int:
    """A system's process: prepare, call the window once (timed apart: it compiles where the system compiles) and
    `warmup` more times, say "ready" with the first call's logits, then answer each "run" line on stdin with one
    timed forward. One JSON object a line on the original stdout; everything the libraries print goes to stderr."""
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)

    def send(message: dict) -> None:
        protocol.write(json.dumps(message) + "\n")

    torch.set_num_threads(threads)
    try:
        with tempfile.TemporaryDirectory(prefix="longqa-peers-") as folder:
            began = time.perf_counter()
            prepared = prepare(system, model_ref, threads, Path(folder))
            prepare_s = time.perf_counter() - began
            began = time.perf_counter()
            start, end = prepared.run()
            first_call_s = time.perf_counter() - began
            for _ in range(warmup):
                prepared.run()
            send({"ready": True, "prepare_s": prepare_s, "first_call_s": first_call_s, "tokens": prepared.tokens,
                  "notes": prepared.notes, "default_precision": prepared.default_precision,
                  "rss_bytes": current_rss_bytes(), "peak_rss_bytes": peak_rss_bytes(),
                  "start_logits": start[0].tolist(), "end_logits": end[0].tolist()})
            for line in sys.stdin:
                if line.strip() != "run":
                    break
                began = time.perf_counter()
                prepared.run()
                send({"seconds": time.perf_counter() - began, "rss_bytes": current_rss_bytes()})
    except Exception as exc:  # noqa: BLE001 - the parent records why this system could not run
        send({"error": error_line(exc)})
        raise
    return 0


# ------------------------------------------------------------------------------------------------ the parent
class SystemProcess:
    """One system's persistent process, seen from the parent: start it and wait until it is ready, ask it for
    timed forwards, close it. A process that dies or says "error" leaves `error` set, never an exception."""

    def __init__(self, system: System, model_ref: str, threads: int, warmup: int, log_path: Path):
        self.system, self.log_path = system, log_path
        flags = ["-O"] if system.strip_asserts else []
        command = [sys.executable, *flags, "-m", "bench.peers", "--worker", system.name, "--model", model_ref,
                   "--threads", str(threads), "--warmup", str(warmup)]
        self.log = open(log_path, "w")
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                        text=True, env=worker_env(), cwd=PROJECT_ROOT)
        self.ready: dict | None = None
        self.error: str | None = None
        self.times_s: list[float] = []
        self.rss_bytes: int | None = None
        self._preparing = threading.Event()
        self._preparing.set()
        threading.Thread(target=self._guard_memory, daemon=True).start()

    def _guard_memory(self) -> None:
        """While it prepares (an export or a conversion peaks far above a forward), kill this process when the
        machine runs short of memory, and say so (see MIN_AVAILABLE_BYTES)."""
        while self._preparing.is_set():
            time.sleep(MEMORY_POLL_S)
            available = psutil.virtual_memory().available
            if available >= MIN_AVAILABLE_BYTES or self.process.poll() is not None:
                continue
            try:
                resident = psutil.Process(self.process.pid).memory_info().rss
            except psutil.Error:
                resident = 0
            self.error = (f"stopped: the machine's free memory fell to {available / 1e9:.1f} GB with this "
                          f"process at {resident / 1e9:.1f} GB resident")
            self.process.kill()
            return

    def _receive(self) -> dict | None:
        line = self.process.stdout.readline()
        if not line:
            self.process.wait()
            code = self.process.returncode
            killed = " (SIGKILL: out of memory, most likely)" if code == -9 else ""
            self.error = self.error or f"its process ended (exit code {code}{killed}): {last_log_line(self.log_path)}"
            return None
        message = json.loads(line)
        if "error" in message:
            self.error = message["error"]
            return None
        return message

    def wait_ready(self) -> bool:
        self.ready = self._receive()
        self._preparing.clear()
        if self.ready:
            self.rss_bytes = self.ready["rss_bytes"]
        return self.ready is not None

    def forward(self) -> None:
        """One timed forward, added to `times_s`; on failure `error` is set and the process is closed."""
        try:
            self.process.stdin.write("run\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            pass
        message = self._receive()
        if message is None:
            self.close()
            return
        self.times_s.append(message["seconds"])
        self.rss_bytes = message["rss_bytes"]

    def close(self) -> None:
        self._preparing.clear()
        if self.process.poll() is None:
            try:
                self.process.stdin.close()
                self.process.wait(timeout=30)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        self.log.close()


def last_log_line(log_path: Path) -> str:
    """The last line of a system's log that is not a warning: where a crash says what it was."""
    lines = [line.strip() for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    meaningful = [line for line in lines if "Warning" not in line]
    return (meaningful or lines or ["no output"])[-1]


def agreement(reference: tuple, logits: tuple) -> dict:
    """How far a system's (start, end) logits are from the reference's: the largest absolute difference of each,
    and whether the best start and the best end token are the same ones."""
    ref_start, ref_end = (np.asarray(values, dtype=np.float64) for values in reference)
    start, end = (np.asarray(values, dtype=np.float64) for values in logits)
    return {"max_abs_start_diff": float(np.max(np.abs(start - ref_start))),
            "max_abs_end_diff": float(np.max(np.abs(end - ref_end))),
            "same_start_argmax": bool(np.argmax(start) == np.argmax(ref_start)),
            "same_end_argmax": bool(np.argmax(end) == np.argmax(ref_end))}


def system_row(worker: SystemProcess, reference: tuple | None) -> dict:
    """What one started system measured: its times (median and min of the rounds), or the error that stopped it."""
    system, ready = worker.system, worker.ready or {}
    row = {"name": system.name, "description": system.description,
           "status": "ok" if worker.times_s and not worker.error else "failed", "error": worker.error,
           "times_s": worker.times_s, "median_s": statistics.median(worker.times_s) if worker.times_s else None,
           "min_s": min(worker.times_s) if worker.times_s else None, "prepare_s": ready.get("prepare_s"),
           "first_call_s": ready.get("first_call_s"), "tokens": ready.get("tokens"), "notes": ready.get("notes", []),
           "rss_after_last_forward_bytes": worker.rss_bytes, "peak_rss_bytes": ready.get("peak_rss_bytes"),
           "agreement": None}
    if ready and reference is not None:
        row["agreement"] = agreement(reference, (ready["start_logits"], ready["end_logits"]))
    return row


def interleave(workers: list[SystemProcess], rounds: int, pause_s: float = PAUSE_S,
               on_round: Callable[[int], None] = lambda index: None) -> None:
    """`rounds` rounds of one forward per working system, in turn, with `pause_s` before each forward."""
    for index in range(rounds):
        for worker in workers:
            if worker.error is None:
                time.sleep(pause_s)
                worker.forward()
        on_round(index)


def measure_systems(systems: list[System], model_ref: str, *, threads: int, warmup: int, rounds: int,
                    log_dir: Path, with_openvino_default: bool = False) -> list[dict]:
    """Start each system's process in turn (each prepares and warms up alone; those whose preparing peaks highest
    first, while the machine's memory is free), with `with_openvino_default` add `openvino-default` where OpenVINO's
    default precision here is not f32, interleave the rounds, and return one row per system."""
    workers: list[SystemProcess] = []
    extra_rows: list[dict] = []

    def start(system: System) -> SystemProcess:
        print(f"preparing {system.name} ...", file=sys.stderr, flush=True)
        worker = SystemProcess(system, model_ref, threads, warmup, log_dir / f"{system.name}.log")
        workers.append(worker)
        if worker.wait_ready():
            print(f"  {system.name} ready: prepared in {worker.ready['prepare_s']:.1f} s, first call "
                  f"{worker.ready['first_call_s']:.1f} s", file=sys.stderr, flush=True)
        else:
            print(f"  {system.name} failed: {worker.error}", file=sys.stderr, flush=True)
            worker.close()
        return worker

    try:
        for system in sorted(systems, key=lambda system: not system.prepares_first):
            worker = start(system)
            if system.name == "openvino-fp32" and with_openvino_default:
                if worker.ready is None:
                    extra_rows.append(not_run_row(BY_NAME[OPENVINO_DEFAULT], "skipped", "openvino-fp32 failed"))
                elif worker.ready["default_precision"] == "f32":
                    extra_rows.append(not_run_row(BY_NAME[OPENVINO_DEFAULT], "skipped", "OpenVINO's default "
                                                  "inference precision on this CPU is f32: the same as openvino-fp32"))
                else:
                    start(BY_NAME[OPENVINO_DEFAULT])
        interleave(workers, rounds, on_round=lambda index: print(
            f"round {index + 1}: " + ", ".join(f"{w.system.name} {w.times_s[-1]:.2f} s" for w in workers
                                               if w.times_s and w.error is None), file=sys.stderr, flush=True))
    finally:
        for worker in workers:
            worker.close()
    by_name = {worker.system.name: worker for worker in workers}
    reference_worker = by_name.get(REFERENCE)
    reference = None
    if reference_worker is not None and reference_worker.ready:
        reference = (reference_worker.ready["start_logits"], reference_worker.ready["end_logits"])
    return [system_row(worker, reference) for worker in workers] + extra_rows


# ------------------------------------------------------------------------------------------------ the record
def package_versions(names=PEER_PACKAGES) -> dict[str, str | None]:
    """Installed versions, without importing them; None for one that is not installed."""
    versions = {}
    for name in ("torch", "transformers", *names):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=PROJECT_ROOT).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def model_slug(model_ref: str) -> str:
    """"arch:base" -> "base"; any other reference with its non-name characters as dashes."""
    return re.sub(r"[^A-Za-z0-9_.]+", "-", model_ref.removeprefix("arch:")).strip("-")


def ordered(rows: list[dict]) -> list[dict]:
    """Rows in SYSTEMS' order (the project first)."""
    order = [system.name for system in SYSTEMS]
    return sorted(rows, key=lambda row: order.index(row["name"]) if row["name"] in order else len(order))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench peers", description="one window of --model through the "
                                     "cpu profile and its peers (eager, torch.compile, OpenVINO, ONNX Runtime), each "
                                     "in its own process, interleaved over rounds; writes peers-<kind>-<model>.json "
                                     f"and .md. OpenVINO and ONNX Runtime: pip install -r {PEERS_REQUIREMENTS}")
    parser.add_argument("--model", default="arch:base", help="arch:base (default), arch:large, or any checkpoint")
    parser.add_argument("--rounds", type=int, default=5, help="timed forwards per system, one per round (default 5)")
    parser.add_argument("--warmup", type=int, default=WARMUP, help="untimed forwards after the first call")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="threads of torch, OpenVINO and ONNX Runtime (default: the CPUs, here "
                             f"{os.cpu_count()})")
    parser.add_argument("--systems", default=",".join(system.name for system in SYSTEMS),
                        help="comma-separated, from " + ", ".join(BY_NAME))
    parser.add_argument("--out", default="docs/results/peers")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        raise InputError("--rounds must be at least 1.")
    hardware = detect_hardware()
    names = [name.strip() for name in args.systems.split(",") if name.strip()]
    to_run, not_run = plan_systems(names, hardware)
    for row in not_run:
        print(f"{row['name']}: {row['status']}: {row['error']}", file=sys.stderr)
    log_dir = Path(tempfile.mkdtemp(prefix="longqa-peers-logs-"))
    print(f"each system's log: {log_dir}", file=sys.stderr)
    load_before = list(os.getloadavg())
    rows = measure_systems(to_run, args.model, threads=args.threads, warmup=args.warmup, rounds=args.rounds,
                           log_dir=log_dir, with_openvino_default=OPENVINO_DEFAULT in names
                           and not any(row["name"] == OPENVINO_DEFAULT for row in not_run))
    kind = kind_name(hardware)
    result = {"command": " ".join(["python -m bench peers", *argv]).strip(), "model": args.model,
              "tokens": TOKENS, "rounds": args.rounds, "warmup": args.warmup, "threads": args.threads,
              "pause_between_forwards_s": PAUSE_S, "reference": REFERENCE, "commit": git_commit(),
              "machine": {"cpu_model": cpu_model(), "kind": kind, "cpu_flags": cpu_flags(),
                          "cpu_bf16": hardware.cpu_bf16, "cpus": os.cpu_count(), "python": platform.python_version(),
                          "versions": package_versions(), "load_average_before": load_before,
                          "load_average_after": list(os.getloadavg()),
                          "gomp_spincount": os.environ.get("GOMP_SPINCOUNT")},
              "systems": ordered(rows + not_run)}
    write_measurement(args.out, f"peers-{kind}-{model_slug(args.model)}", result, markdown(result))
    return 0


def worker_main(argv: list[str]) -> int:
    """`python -m bench.peers --worker SYSTEM --model M --threads N --warmup W`: one system's process (`serve`)."""
    parser = argparse.ArgumentParser(prog="python -m bench.peers")
    parser.add_argument("--worker", required=True, choices=list(BY_NAME))
    parser.add_argument("--model", default="arch:base")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--warmup", type=int, default=WARMUP)
    args = parser.parse_args(argv)
    return serve(args.worker, args.model, args.threads, args.warmup)


if __name__ == "__main__":
    raise SystemExit(worker_main(sys.argv[1:]))
