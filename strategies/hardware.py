"""What this machine can run: GPUs (from NVML, else torch), whether torch has CUDA, whether the CPU has bf16.

Detection only, never raises and never loads a model; deciding what to do with the answer is `profiles`' job.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch

from longqa_core import gpu_devices


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    total_bytes: int
    compute_capability: tuple[int, int] | None = None

    @property
    def supports_bf16(self) -> bool:
        return self.compute_capability is not None and self.compute_capability >= (8, 0)  # Ampere and later


@dataclass(frozen=True)
class Hardware:
    gpus: tuple[Gpu, ...] = ()
    cuda_available: bool = False
    cpu_bf16: bool = False
    # The host's RAM where it is part of the description (a machine planned for, `strategies.gpu_catalog`): fits
    # are checked against it and offload budgets drawn from it. None for the machine at hand, whose free RAM is
    # read where it is needed.
    host_memory_bytes: int | None = None

    @property
    def usable_gpus(self) -> tuple[Gpu, ...]:
        """GPUs torch can actually run on (NVML may see cards a CPU-only torch build cannot use)."""
        return self.gpus if self.cuda_available else ()

    @property
    def gpu_count(self) -> int:
        return len(self.usable_gpus)

    def describe(self) -> str:
        if not self.usable_gpus:
            seen = f"; NVML sees {len(self.gpus)} GPU(s) but torch has no CUDA" if self.gpus else ""
            return f"CPU only (bf16: {'yes' if self.cpu_bf16 else 'no'}){seen}"
        return ", ".join(f"{gpu.name} ({gpu.total_bytes / 1e9:.0f} GB)" for gpu in self.usable_gpus)


CPU_ONLY = Hardware()


def gpus_from_nvml() -> tuple[Gpu, ...] | None:
    """The GPUs this process can see, as the NVIDIA driver reports them (CUDA_VISIBLE_DEVICES and MIG slices
    respected, by the core's one NVML wrapper); None when NVML is missing or no driver answers."""
    if gpu_devices.nvml() is None:
        return None
    return tuple(Gpu(index=row["index"], name=row["name"], total_bytes=row["nvml_total_bytes"],
                     compute_capability=row["compute_capability"])
                 for row in gpu_devices.gpu_snapshot() if row["nvml_total_bytes"] is not None)


def gpus_from_torch() -> tuple[Gpu, ...]:
    gpus = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        gpus.append(Gpu(index=index, name=props.name, total_bytes=int(props.total_memory),
                        compute_capability=(props.major, props.minor)))
    return tuple(gpus)


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The CPU's feature flags, from the first `flags` line of /proc/cpuinfo (empty where it cannot be read)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return frozenset()
    return frozenset(next((line.split(":", 1)[1].split() for line in text.splitlines()
                           if line.startswith("flags")), ()))


def is_cpu_bf16_native() -> bool:
    """Whether the CPU has bf16 instructions (AVX512-BF16 or AMX); bf16 elsewhere works but is emulated and slow."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except Exception:
        try:
            with open("/proc/cpuinfo") as cpuinfo:
                flags = cpuinfo.read()
            return "avx512_bf16" in flags or "amx_bf16" in flags
        except OSError:
            return False


def detect_hardware() -> Hardware:
    """The GPUs and CPU features of this machine. Never raises: anything unreadable counts as absent."""
    try:
        cuda_available = bool(torch.cuda.is_available())
    except Exception:
        cuda_available = False
    gpus = gpus_from_nvml()
    if not gpus and cuda_available:
        try:
            gpus = gpus_from_torch()
        except Exception:
            gpus = ()
    return Hardware(gpus=tuple(gpus or ()), cuda_available=cuda_available, cpu_bf16=is_cpu_bf16_native())


def hardware_for(kind: str) -> Hardware:
    """This machine as detected ("detected"), or with its CPU kind set ("avx2", "avx512-bf16"): the profiles then
    resolve as on that kind (the kernels that run are still this CPU's). For measurements filed by CPU kind."""
    detected = detect_hardware()
    return detected if kind == "detected" else replace(detected, cpu_bf16=kind == "avx512-bf16")
