"""Measure one request: latency per stage, device and host memory.

A context manager that yields a `Measurement` whose fields carry their units (`latency_s`, `*_bytes`).
It only measures; formatting for people happens in the UI. Missing CUDA or NVML gives `None`, never an error.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import psutil
import torch

try:  # nvidia-ml-py provides `pynvml`; without an NVIDIA driver nvmlInit() raises and NVML is simply absent
    import pynvml
except ImportError:  # pragma: no cover - the package is in requirements, but the UI must still start without it
    pynvml = None

STAGES = ("extract", "tokenize", "forward", "decode")


def cuda_device_indices(devices) -> list[int]:
    """The CUDA device indices among `devices` (torch.device objects or strings), without duplicates."""
    indices: list[int] = []
    for device in devices:
        device = torch.device(device)
        if device.type == "cuda":
            index = device.index if device.index is not None else torch.cuda.current_device()
            if index not in indices:
                indices.append(index)
    return indices


_nvml_ready: bool | None = None


def _nvml_handle(index: int):
    global _nvml_ready
    if pynvml is None:
        return None
    if _nvml_ready is None:
        try:
            pynvml.nvmlInit()
            _nvml_ready = True
        except Exception:
            _nvml_ready = False
    if not _nvml_ready:
        return None
    try:
        return pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:
        return None


def nvml_memory(index: int) -> tuple[int | None, int | None]:
    """(used, total) bytes of GPU `index` from NVML, or (None, None) where NVML is absent."""
    handle = _nvml_handle(index)
    if handle is None:
        return None, None
    try:
        info = pynvml.nvmlDeviceGetMemoryInfo(handle)
        return int(info.used), int(info.total)
    except Exception:
        return None, None


def gpu_snapshot() -> list[dict]:
    """NVML used/total for every visible GPU (for the live gauge); empty without NVML."""
    out = []
    index = 0
    while True:
        handle = _nvml_handle(index)
        if handle is None:
            return out
        used, total = nvml_memory(index)
        try:
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else name
        except Exception:
            name = f"GPU {index}"
        out.append({"index": index, "name": name, "nvml_used_bytes": used, "nvml_total_bytes": total})
        index += 1


class _RssSampler:
    """Samples this process's resident memory in a thread: per-request host peak, not the lifetime peak."""

    def __init__(self, interval_s: float = 0.01):
        self.interval_s = interval_s
        self.process = psutil.Process()
        self.peak = self.process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak = max(self.peak, self.process.memory_info().rss)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss)


@dataclass
class Measurement:
    """Latency per stage (seconds) and memory (bytes) of one request; filled in when the block exits."""

    latency_s: dict[str, float] = field(default_factory=lambda: {stage: 0.0 for stage in ("total", *STAGES)})
    memory: dict = field(default_factory=dict)

    @contextmanager
    def stage(self, name: str):
        began = time.perf_counter()
        try:
            yield
        finally:
            self.latency_s[name] = self.latency_s.get(name, 0.0) + time.perf_counter() - began


def _device_memory(indices: list[int]) -> list[dict]:
    rows = []
    for index in indices:
        used, total = nvml_memory(index)
        rows.append({
            "index": index,
            "name": torch.cuda.get_device_name(index),
            "peak_allocated_bytes": int(torch.cuda.max_memory_allocated(index)),
            "reserved_bytes": int(torch.cuda.memory_reserved(index)),
            "nvml_used_bytes": used,
            "nvml_total_bytes": total,
        })
    return rows


def _sum_or_none(rows: list[dict], key: str) -> int | None:
    values = [row[key] for row in rows if row[key] is not None]
    return sum(values) if values else None


@contextmanager
def measure(devices=()):
    """Measure a request running on `devices`; CUDA peaks are reset on entry so they belong to this request."""
    indices = cuda_device_indices(devices) if torch.cuda.is_available() else []
    for index in indices:
        torch.cuda.reset_peak_memory_stats(index)
    measurement = Measurement()
    began = time.perf_counter()
    with _RssSampler() as sampler:
        try:
            yield measurement
        finally:
            for index in indices:
                torch.cuda.synchronize(index)
            measurement.latency_s["total"] = time.perf_counter() - began
    rows = _device_memory(indices)
    measurement.memory = {
        "peak_allocated_bytes": _sum_or_none(rows, "peak_allocated_bytes"),
        "reserved_bytes": _sum_or_none(rows, "reserved_bytes"),
        "nvml_used_bytes": _sum_or_none(rows, "nvml_used_bytes"),
        "nvml_total_bytes": _sum_or_none(rows, "nvml_total_bytes"),
        "host_rss_bytes": int(sampler.process.memory_info().rss),
        "host_peak_rss_bytes": int(sampler.peak),
        "devices": rows,
    }
