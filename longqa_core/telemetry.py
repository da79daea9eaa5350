"""Measure one request: latency per stage, device and host memory (`measure`, `Measurement`, `MemoryReadout`), and
the project's one host-memory peak (`HostPeak`, also what loading and the bench measure with); and hand freed host
memory back to the system (glibc's heap trim, which a measurement's baseline starts from, the allocator settings
a long-running server starts with, start-up's objects left out of its later garbage collections: docs/crowd-lane.md
measures what they change; and those that keep a CPU forward's large buffers for the next: docs/cpu-without-bf16.md).

A context manager yields a `Measurement` whose fields carry their units (`latency_s`, `*_bytes`). Which physical GPU
or MIG slice a CUDA device is, and NVML itself, are `gpu_devices`' job. It only measures; formatting for people
happens in the UI. Missing CUDA or NVML gives `None`, never an error; where glibc is absent (macOS, musl, Windows)
the trim and the allocator settings do nothing.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import os
import re
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import torch

from longqa_core.gpu_devices import cuda_device_indices, device_memory

STAGES = ("extract", "tokenize", "forward", "decode")

# ------------------------------------------------------------------------------------------------ host memory
M_ARENA_MAX, M_MMAP_MAX, M_TRIM_THRESHOLD = -8, -4, -1  # mallopt's parameters (glibc's malloc.h)
# Allocator settings for a server: few arenas, so that memory freed by one request thread is reused by the next
# instead of sitting in a thread's own arena. A fixed mmap threshold (buffers from 4 MB up mapped on their own, freed
# at once) was measured too and is not set: every large tensor of a forward pass then faults in fresh pages, and a
# window of the base architecture took 1.40x as long (docs/crowd-lane.md). The operator's settings win
# (`operator_set_malloc`).
SERVER_ARENA_MAX = 2
KEPT_HEAP_BYTES = 1 << 31  # free heap past which glibc would trim at a free (`keep_large_buffers`): never, in practice


@functools.cache
def _libc():
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim, libc.mallopt  # noqa: B018 - both must exist (glibc)
        return libc
    except (OSError, AttributeError):
        return None


def trim_heap() -> bool:
    """Ask glibc to return the free pages of every arena to the system (`malloc_trim(0)`); whether it could."""
    libc = _libc()
    return libc is not None and bool(libc.malloc_trim(0))


def tune_allocator() -> dict[str, int]:
    """Set glibc's arena count for this process (SERVER_ARENA_MAX); nothing where the operator set glibc's malloc
    (`operator_set_malloc`). Returns what was set, by glibc's variable name."""
    libc = _libc()
    if libc is None or operator_set_malloc():
        return {}
    return {"MALLOC_ARENA_MAX": SERVER_ARENA_MAX} if libc.mallopt(M_ARENA_MAX, SERVER_ARENA_MAX) == 1 else {}


def keep_large_buffers() -> dict[str, int]:
    """Let glibc keep a CPU forward's large buffers (16-64 MiB tensors) for the next one: no block mapped on its own
    (`M_MMAP_MAX` 0) and no trim of the heap's top at each free (`M_TRIM_THRESHOLD` KEPT_HEAP_BYTES); the explicit
    trims (`trim_heap`, after each request) hand the pages back. It works in the main arena: a thread with an arena
    of its own still maps such tensors afresh. Nothing where the operator set glibc's malloc (`operator_set_malloc`)
    or glibc is absent. Returns what was set, by glibc's variable name. docs/cpu-without-bf16.md measures it."""
    libc = _libc()
    if libc is None or operator_set_malloc():
        return {}
    settings = {"MALLOC_MMAP_MAX_": (M_MMAP_MAX, 0), "MALLOC_TRIM_THRESHOLD_": (M_TRIM_THRESHOLD, KEPT_HEAP_BYTES)}
    return {name: value for name, (parameter, value) in settings.items() if libc.mallopt(parameter, value) == 1}


def operator_set_malloc() -> bool:
    """Whether the environment sets glibc's malloc: any MALLOC_* variable, or a `glibc.malloc` tunable in
    GLIBC_TUNABLES. The operator's settings win over the project's."""
    return (any(name.startswith("MALLOC_") for name in os.environ)
            or "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""))


def freeze_start_up() -> int:
    """Leave what start-up made (the modules imported: torch, transformers and gradio make about 630,000 objects)
    out of every later garbage collection (`gc.freeze`), so that a full collection, which holds the interpreter lock
    (after a load, after a refused or stopped request), walks only what the process made since. Returns how many
    objects are frozen. Call it before the first model loads: a model frozen with them would outlive its unloading.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")
_open_peaks: list["HostPeak"] = []  # blocks measuring with the high-water mark now, all threads together
_peaks_lock = threading.Lock()


def current_rss_bytes() -> int:
    return int(psutil.Process().memory_info().rss)


def _high_water_mark_bytes() -> int | None:
    try:
        match = re.search(r"VmHWM:\s+(\d+) kB", STATUS.read_text())
    except OSError:
        return None
    return int(match.group(1)) * 1024 if match else None


def _reset_high_water_mark() -> bool:
    """Reset the process's peak RSS to its current RSS; False where Linux does not let this process."""
    try:
        CLEAR_REFS.write_text("5")  # "5": reset the peak RSS counter (Linux 4.0+)
    except OSError:
        return False
    return _high_water_mark_bytes() is not None


class HostPeak:
    """`with HostPeak() as host: ...`, then `host.peak_rss_bytes`: this process's peak resident memory inside
    the block, and `host.baseline_rss_bytes` at its start (bytes).

    Linux's high-water mark (VmHWM), reset on entry, catches every spike; where it cannot be reset, RSS is
    sampled in a thread every `interval_s`. Blocks may nest and overlap (a request inside a benchmark row,
    requests in threads): before any block resets the mark, every open block takes in the peak so far.
    """

    def __init__(self, interval_s: float = 0.005):
        self.interval_s = interval_s
        self.baseline_rss_bytes = 0
        self.peak_rss_bytes: int | None = None
        self.method = ""  # "VmHWM" | "sampled RSS"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak_rss_bytes = max(self.peak_rss_bytes or 0, current_rss_bytes())

    def __enter__(self) -> "HostPeak":
        self.baseline_rss_bytes = self.peak_rss_bytes = current_rss_bytes()
        with _peaks_lock:
            mark = _high_water_mark_bytes()
            for block in _open_peaks:  # the mark so far belongs to every open block: take it before it is reset
                block.peak_rss_bytes = max(block.peak_rss_bytes or 0, mark or 0)
            if _reset_high_water_mark():
                self.method = "VmHWM"
                _open_peaks.append(self)
                return self
        self.method = "sampled RSS"
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self.peak_rss_bytes = max(self.peak_rss_bytes or 0, current_rss_bytes())
            return
        with _peaks_lock:
            self.peak_rss_bytes = max(self.peak_rss_bytes or 0, _high_water_mark_bytes() or 0, current_rss_bytes())
            _open_peaks.remove(self)


@dataclass
class DeviceMemory:
    """One GPU's memory during a request: torch's peak allocated and reserved bytes, NVML's used and total, and
    what torch had allocated right before the request (the loaded model's resident baseline)."""

    index: int
    name: str
    peak_allocated_bytes: int
    reserved_bytes: int
    nvml_used_bytes: int | None
    nvml_total_bytes: int | None
    baseline_allocated_bytes: int | None = None

    @property
    def request_peak_bytes(self) -> int | None:
        """The request's own peak: allocated bytes above what was allocated before it."""
        return above(self.peak_allocated_bytes, self.baseline_allocated_bytes)


@dataclass
class MemoryReadout:
    """A request's memory: the GPUs' figures summed (None without a GPU), the host's RSS now, at its peak and right
    before the request (the loaded model's resident baseline), and each GPU's own row.

    The process's peak includes whatever the process held before the request (the model, and heap that earlier
    requests or models left behind); the request's own peak (`request_peak_on`) is the peak above the baseline.
    """

    peak_allocated_bytes: int | None = None
    reserved_bytes: int | None = None
    nvml_used_bytes: int | None = None
    nvml_total_bytes: int | None = None
    host_rss_bytes: int | None = None
    host_peak_rss_bytes: int | None = None
    devices: list[DeviceMemory] = field(default_factory=list)
    host_baseline_rss_bytes: int | None = None

    @property
    def host_request_peak_bytes(self) -> int | None:
        """The request's own peak on the host: peak RSS above the RSS right before it."""
        return above(self.host_peak_rss_bytes, self.host_baseline_rss_bytes)

    def to_json(self) -> dict:
        return {**{name: getattr(self, name) for name in _SUMMED}, "host_rss_bytes": self.host_rss_bytes,
                "host_peak_rss_bytes": self.host_peak_rss_bytes,
                "devices": [{**vars(d), "request_peak_bytes": d.request_peak_bytes} for d in self.devices],
                "host_baseline_rss_bytes": self.host_baseline_rss_bytes,
                "host_request_peak_bytes": self.host_request_peak_bytes}

    def peak_on(self, device: str) -> int | None:
        """The peak on `device` ("cpu": the host's peak RSS; "cuda:N": that GPU's peak allocated bytes)."""
        if device == "cpu":
            return self.host_peak_rss_bytes
        index = int(device.split(":")[1])
        return next((d.peak_allocated_bytes for d in self.devices if d.index == index), None)

    def request_peak_on(self, device: str) -> int | None:
        """The request's own peak on `device`, above the baseline right before it ("cpu": peak RSS above RSS;
        "cuda:N": peak allocated above allocated)."""
        if device == "cpu":
            return self.host_request_peak_bytes
        index = int(device.split(":")[1])
        return next((d.request_peak_bytes for d in self.devices if d.index == index), None)

    def baseline_on(self, device: str) -> int | None:
        """What `device` held right before the request (host RSS, or torch's allocated bytes on a GPU)."""
        if device == "cpu":
            return self.host_baseline_rss_bytes
        index = int(device.split(":")[1])
        return next((d.baseline_allocated_bytes for d in self.devices if d.index == index), None)


def above(peak: int | None, baseline: int | None) -> int | None:
    """`peak` above `baseline` (never below zero), or None when either is unknown."""
    if peak is None or baseline is None:
        return None
    return max(0, peak - baseline)


_SUMMED = ("peak_allocated_bytes", "reserved_bytes", "nvml_used_bytes", "nvml_total_bytes")


@dataclass
class Measurement:
    """Latency per stage (seconds) and memory (bytes) of one request; filled in when the block exits."""

    latency_s: dict[str, float] = field(default_factory=lambda: {stage: 0.0 for stage in ("total", *STAGES)})
    memory: MemoryReadout = field(default_factory=MemoryReadout)

    def stage(self, name: str):
        return timed(self.latency_s, name)


@contextmanager
def timed(latency_s: dict[str, float], name: str):
    """Add the seconds the block takes to `latency_s[name]`."""
    began = time.perf_counter()
    try:
        yield
    finally:
        latency_s[name] = latency_s.get(name, 0.0) + time.perf_counter() - began


def _device_memory(indices: list[int], baselines: dict[int, int]) -> list[DeviceMemory]:
    rows = []
    for index in indices:
        used, total = device_memory(index)
        rows.append(DeviceMemory(index, torch.cuda.get_device_name(index), int(torch.cuda.max_memory_allocated(index)),
                                 int(torch.cuda.memory_reserved(index)), used, total, baselines.get(index)))
    return rows


def _sum_or_none(rows: list[DeviceMemory], key: str) -> int | None:
    values = [getattr(row, key) for row in rows if getattr(row, key) is not None]
    return sum(values) if values else None


@contextmanager
def measure(devices=()):
    """Measure a request running on `devices`; CUDA peaks are reset on entry so they belong to this request, and
    the baselines (host RSS, CUDA allocated bytes) are taken right before it, after the free heap is handed back."""
    indices = cuda_device_indices(devices) if torch.cuda.is_available() else []
    baselines = {}
    for index in indices:
        torch.cuda.reset_peak_memory_stats(index)
        baselines[index] = int(torch.cuda.memory_allocated(index))
    measurement = Measurement()
    trim_heap()  # the baseline then holds what is in use, not free heap an earlier request or model left behind
    began = time.perf_counter()
    with HostPeak() as host:
        try:
            yield measurement
        finally:
            for index in indices:
                torch.cuda.synchronize(index)
            measurement.latency_s["total"] = time.perf_counter() - began
    rows = _device_memory(indices, baselines)
    measurement.memory = MemoryReadout(**{name: _sum_or_none(rows, name) for name in _SUMMED},
                                       host_rss_bytes=current_rss_bytes(), host_peak_rss_bytes=host.peak_rss_bytes,
                                       devices=rows, host_baseline_rss_bytes=host.baseline_rss_bytes)
