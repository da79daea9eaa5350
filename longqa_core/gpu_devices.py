"""Which GPUs this process uses or can see, through the project's one NVML wrapper: each CUDA device mapped to its
physical GPU or MIG slice (`nvml_handle`), its memory (`device_memory`) and a row per device (`gpu_snapshot`).

It reads NVML and torch's device numbering; it does not time anything or measure a request (`telemetry`), and
formats nothing for people. Missing CUDA or NVML gives `None` or an empty list, never an error.
"""

from __future__ import annotations

import os

import torch

try:  # nvidia-ml-py provides `pynvml`; without an NVIDIA driver nvmlInit() raises and NVML is simply absent
    import pynvml
except ImportError:  # pragma: no cover - the package is in requirements, but the UI must still start without it
    pynvml = None

UUID_PREFIXES = ("GPU-", "MIG-")  # how NVML and CUDA_VISIBLE_DEVICES spell a whole GPU and a MIG slice


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


# ------------------------------------------------------------------------------------------------ NVML
_nvml_state: tuple[object, bool] | None = None  # (the module initialised, whether nvmlInit succeeded)


def nvml():
    """The `pynvml` module, initialised once per process, or None where the package or a driver is missing."""
    global _nvml_state
    if pynvml is None:
        return None
    if _nvml_state is None or _nvml_state[0] is not pynvml:  # a test may swap the module for a fake
        try:
            pynvml.nvmlInit()
            _nvml_state = (pynvml, True)
        except Exception:  # no driver: NVMLError_LibraryNotFound / DriverNotLoaded, or anything else it throws
            _nvml_state = (pynvml, False)
    return pynvml if _nvml_state[1] else None


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _mig_handles(nv, handle) -> list:
    """The MIG slices of a GPU in MIG mode, in NVML's order; empty for a GPU without MIG (or a driver without it)."""
    try:
        if nv.nvmlDeviceGetMigMode(handle)[0] != nv.NVML_DEVICE_MIG_ENABLE:
            return []
        slots = nv.nvmlDeviceGetMaxMigDeviceCount(handle)
    except Exception:
        return []
    slices = []
    for slot in range(slots):
        try:
            slices.append(nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot))
        except Exception:  # an empty slot
            continue
    return slices


def _uuid(nv, handle) -> str | None:
    try:
        return _text(nv.nvmlDeviceGetUUID(handle))
    except Exception:
        return None


def parse_visible_devices(value: str | None) -> list[int] | list[str] | None:
    """CUDA_VISIBLE_DEVICES as CUDA reads it: None when unset (every GPU), else integer indices or UUID prefixes
    (`GPU-...`, `MIG-...`), up to the first malformed or negative entry; a repeated entry makes the list empty."""
    if value is None:
        return None
    parts = [part.strip() for part in value.split(",")]
    if parts and parts[0].startswith(UUID_PREFIXES):
        uuids = []
        for part in parts:
            if not part.startswith(UUID_PREFIXES):
                break
            if part in uuids:
                return []
            uuids.append(part)
        return uuids
    indices: list[int] = []
    for part in parts:
        try:
            index = int(part)
        except ValueError:
            break
        if index < 0:
            break
        if index in indices:
            return []
        indices.append(index)
    return indices


def _handles_from_environment(nv) -> list:
    """NVML handles of the GPUs CUDA_VISIBLE_DEVICES lets this process see, in CUDA's index order, found without
    initialising CUDA (a forked worker must inherit no CUDA state). An index counts in NVML's PCI-bus order, which
    is CUDA's when CUDA_DEVICE_ORDER=PCI_BUS_ID or the cards are alike; a GPU in MIG mode stands for its slices."""
    gpus = [nv.nvmlDeviceGetHandleByIndex(index) for index in range(nv.nvmlDeviceGetCount())]
    visible = parse_visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"))
    if visible is None:
        visible = list(range(len(gpus)))
    if all(isinstance(entry, int) for entry in visible):
        handles = []
        for index in visible:
            if index >= len(gpus):  # CUDA stops at the first index that names no GPU
                break
            handles += _mig_handles(nv, gpus[index]) or [gpus[index]]
        return handles
    known = [(_uuid(nv, handle), handle) for gpu in gpus for handle in (gpu, *_mig_handles(nv, gpu))]
    handles = []
    for prefix in visible:  # CUDA accepts any unambiguous prefix of a UUID
        matches = [handle for uuid, handle in known if uuid is not None and uuid.startswith(prefix)]
        if len(matches) != 1:
            break
        handles.append(matches[0])
    return handles


def _handle_by_cuda_uuid(nv, index: int):
    """The NVML handle of CUDA device `index` by the UUID CUDA itself reports (exact whatever order CUDA counts
    the cards in). Only asked once CUDA is up, so it never initialises CUDA."""
    try:
        uuid = str(torch.cuda.get_device_properties(index).uuid)
    except Exception:
        return None
    candidates = [uuid] if uuid.startswith(UUID_PREFIXES) else [prefix + uuid for prefix in UUID_PREFIXES]
    for candidate in candidates:
        try:
            return nv.nvmlDeviceGetHandleByUUID(candidate)
        except Exception:
            continue
    return None


def _is_cuda_initialized() -> bool:
    try:
        return bool(torch.cuda.is_initialized())
    except Exception:
        return False


def _environment_handles(nv) -> list:
    try:
        return _handles_from_environment(nv)
    except Exception:
        return []


def _is_named_by_uuid() -> bool:
    visible = parse_visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"))
    return bool(visible) and isinstance(visible[0], str)


def nvml_handle(index: int):
    """The NVML handle of the GPU (or MIG slice) that torch calls `cuda:{index}`, or None.

    CUDA_VISIBLE_DEVICES given as UUIDs names the devices exactly. Otherwise, once CUDA is up, the UUID CUDA
    reports decides (an index alone can mean another card when CUDA orders the cards fastest first); a GPU in MIG
    mode cannot run CUDA itself, so an answer naming one is not trusted."""
    nv = nvml()
    if nv is None:
        return None
    if _is_cuda_initialized() and not _is_named_by_uuid():
        handle = _handle_by_cuda_uuid(nv, index)
        if handle is not None and not _mig_handles(nv, handle):
            return handle
    handles = _environment_handles(nv)
    return handles[index] if index < len(handles) else None


def _nvml_memory(nv, handle) -> tuple[int | None, int | None]:
    try:
        info = nv.nvmlDeviceGetMemoryInfo(handle)
        return int(info.used), int(info.total)
    except Exception:  # e.g. a MIG slice whose memory a container may not read
        return None, None


def device_memory(index: int) -> tuple[int | None, int | None]:
    """(used, total) bytes of the device torch calls `cuda:{index}`, every process's use counted (what
    nvidia-smi shows): NVML for that physical GPU or MIG slice, else CUDA's own `cudaMemGetInfo` once CUDA is up,
    else (None, None)."""
    handle = nvml_handle(index)
    used, total = _nvml_memory(nvml(), handle) if handle is not None else (None, None)
    if total is None and _is_cuda_initialized():
        try:
            free, total = torch.cuda.mem_get_info(index)
            used, total = int(total - free), int(total)
        except Exception:
            used, total = None, None
    return used, total


def _compute_capability(nv, handle) -> tuple[int, int] | None:
    try:
        return tuple(int(part) for part in nv.nvmlDeviceGetCudaComputeCapability(handle))
    except Exception:
        pass
    try:  # a MIG slice may not answer; its GPU does
        parent = nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
        return tuple(int(part) for part in nv.nvmlDeviceGetCudaComputeCapability(parent))
    except Exception:
        return None


def _gpu_row(nv, index: int, handle) -> dict:
    if handle is not None:
        try:
            name = _text(nv.nvmlDeviceGetName(handle))
        except Exception:
            name = f"GPU {index}"
        used, total = _nvml_memory(nv, handle)
        capability = _compute_capability(nv, handle)
    else:  # CUDA is up, but NVML is absent or does not know this device: CUDA's own view
        try:
            props = torch.cuda.get_device_properties(index)
            name, capability = props.name, (props.major, props.minor)
        except Exception:
            name, capability = f"GPU {index}", None
        used, total = device_memory(index)
    return {"index": index, "name": name, "nvml_used_bytes": used, "nvml_total_bytes": total,
            "compute_capability": capability}


def gpu_snapshot() -> list[dict]:
    """The GPUs this process can see (CUDA_VISIBLE_DEVICES respected, a MIG slice as a device of its own), indexed
    as torch indexes them: name, used/total bytes and compute capability. For the live gauge and hardware
    detection. Before CUDA is up it asks NVML alone (no CUDA context is made); after, CUDA's UUIDs decide which
    GPU each index is. Empty when neither NVML nor CUDA answers."""
    nv = nvml()
    if _is_cuda_initialized():
        try:
            count = torch.cuda.device_count()
        except Exception:
            count = 0
        handles = [nvml_handle(index) for index in range(count)]
    elif nv is not None:
        handles = _environment_handles(nv)
    else:
        return []
    return [_gpu_row(nv, index, handle) for index, handle in enumerate(handles)]

