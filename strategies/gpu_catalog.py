"""Named GPUs to plan for: memory and compute capability of common cards, and the `Hardware` of a machine that
has them. Facts about hardware only; what would fit there is the planner's job, composing a plan `longqa.gpu_plan`'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from longqa_core.errors import InputError
from strategies.hardware import Gpu, Hardware

GB = 10**9
MAX_GPU_MEMORY_GB = 1024  # past the largest card sold; a bigger number is a typo (MB given as GB)
MAX_HOST_MEMORY_GB = 16 * 1024
MAX_GPUS = 64


@dataclass(frozen=True)
class GpuModel:
    """A GPU as sold: `memory_gb` is the box's decimal GB (the card reports a little more: a 24 GB card about
    25.4e9 bytes, an H200 150.7e9, so a plan errs on the small side); `compute_capability` is NVIDIA's."""

    name: str
    memory_gb: float
    compute_capability: tuple[int, int]

    @property
    def total_bytes(self) -> int:
        return int(self.memory_gb * GB)

    @property
    def supports_bf16(self) -> bool:
        return self.compute_capability >= (8, 0)  # Ampere and later, as `Gpu.supports_bf16`


GPU_MODELS: dict[str, GpuModel] = {gpu.name: gpu for gpu in (
    GpuModel("GTX 1650", 4, (7, 5)),  # a 4 GB card (Turing: fp16, no bf16)
    GpuModel("RTX 3070", 8, (8, 6)),  # the 8 GB consumer card (Ampere: bf16)
    GpuModel("RTX 4060", 8, (8, 9)),  # the 8 GB consumer card of the next generation (Ada)
    GpuModel("RTX 3060", 12, (8, 6)),  # 12 GB consumer card
    GpuModel("T4", 16, (7, 5)),  # Colab, free-tier cloud, Spaces "t4-small" (Turing: fp16 tensor cores, no bf16)
    GpuModel("V100", 16, (7, 0)),  # older datacenter card (Volta: fp16, no bf16)
    GpuModel("L4", 24, (8, 9)),  # cloud inference card (Ada)
    GpuModel("A10G", 24, (8, 6)),  # AWS g5, Spaces "a10g-small" (Ampere)
    GpuModel("RTX 3090", 24, (8, 6)),  # the article's card
    GpuModel("RTX 4090", 24, (8, 9)),
    GpuModel("L40S", 48, (8, 9)),
    GpuModel("A100 40GB", 40, (8, 0)),
    GpuModel("A100 80GB", 80, (8, 0)),
    GpuModel("H100", 80, (9, 0)),
    GpuModel("H200", 141, (9, 0)),  # the GPU this project's prepared check runs on
)}


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def gpu_model(name: str) -> GpuModel:
    """The catalog's GPU named `name`, in any case and spacing ("rtx3090", "A100-80GB"); InputError listing the
    names otherwise."""
    key = _key(name or "")
    found = [gpu for gpu in GPU_MODELS.values() if _key(gpu.name) == key]
    if not found:
        found = [gpu for gpu in GPU_MODELS.values() if key and _key(gpu.name).startswith(key)]
    if len(found) == 1:
        return found[0]
    what = "is ambiguous" if found else "is not in the catalog"
    raise InputError(f"GPU {name!r} {what}; known: {', '.join(GPU_MODELS)}, or give its memory (--gpu-memory GB; "
                     "the page's 'GPU memory (GB)', the API's gpu_memory_gb).")


def check_memory_gb(value: float, what: str, largest: float) -> float:
    """`value` when it is a plausible memory size in GB, else InputError saying why."""
    if value is None or not value > 0:
        raise InputError(f"{what} must be more than 0 GB, got {value}.")
    if value > largest:
        raise InputError(f"{what} of {value:g} GB is more than any machine here plans for ({largest:g} GB): "
                         "give the size in GB, not MB.")
    return float(value)


def parse_compute_capability(text: str | None) -> tuple[int, int] | None:
    """"8.6" -> (8, 6); None or "" -> None; InputError for anything else."""
    if text is None or str(text).strip() == "":
        return None
    match = re.fullmatch(r"\s*(\d{1,2})\.(\d)\s*", str(text))
    if not match:
        raise InputError(f"Compute capability {text!r} is not of the form MAJOR.MINOR, e.g. 7.5 or 8.6.")
    return int(match.group(1)), int(match.group(2))


def planned_hardware(gpu: GpuModel | None = None, *, gpu_memory_gb: float | None = None,
                     compute_capability: tuple[int, int] | None = None, gpus: int = 1,
                     host_memory_gb: float, cpu_bf16: bool = False) -> Hardware:
    """The `Hardware` of a machine with `gpus` copies of a GPU (a catalog model, or one given by its memory and,
    optionally, compute capability: unknown counts as without bf16), or none, and `host_memory_gb` of RAM."""
    if gpu is not None and (gpu_memory_gb is not None or compute_capability is not None):
        raise InputError(f"{gpu.name} is in the catalog with its memory and compute capability: give a GPU by name "
                         "or by its memory (and compute capability), not both.")
    host = check_memory_gb(host_memory_gb, "Host memory", MAX_HOST_MEMORY_GB)
    if gpu is None and gpu_memory_gb is None:
        return Hardware(cpu_bf16=cpu_bf16, host_memory_bytes=int(host * GB))
    if not isinstance(gpus, int) or not 1 <= gpus <= MAX_GPUS:
        raise InputError(f"The number of GPUs must be a whole number from 1 to {MAX_GPUS}, got {gpus}.")
    if gpu is None:
        memory = check_memory_gb(gpu_memory_gb, "GPU memory", MAX_GPU_MEMORY_GB)
        name, total, capability = f"{memory:g} GB GPU", int(memory * GB), compute_capability
    else:
        name, total, capability = gpu.name, gpu.total_bytes, gpu.compute_capability
    cards = tuple(Gpu(index=index, name=name, total_bytes=total, compute_capability=capability)
                  for index in range(gpus))
    return Hardware(gpus=cards, cuda_available=True, cpu_bf16=cpu_bf16, host_memory_bytes=int(host * GB))
