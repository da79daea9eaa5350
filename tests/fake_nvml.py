"""A fake `pynvml` for the NVML tests: GPUs and MIG slices with UUIDs and memory, answering like the driver does.

Plain classes and one `simulate` helper; no GPU, driver or CUDA is touched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import torch

from longqa_core import gpu_devices

MiB = 1024**2
GiB = 1024**3


class FakeNvmlError(Exception):
    """What pynvml raises (NVMLError_NotFound, _NoPermission, ...): one class is enough for the code under test."""


@dataclass(eq=False)
class FakeDevice:
    """A GPU, or a MIG slice of one (`parent` set). `slices` non-empty means the GPU is in MIG mode."""

    name: str
    total_bytes: int
    capability: tuple[int, int] | None = (9, 0)
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    used_bytes: int = 0
    slices: list["FakeDevice"] = field(default_factory=list)
    parent: "FakeDevice | None" = None
    memory_readable: bool = True  # a container may be refused a MIG slice's memory

    def __post_init__(self):
        for piece in self.slices:
            piece.parent = self


def gpu(name: str, total_bytes: int, capability=(9, 0), *, uuid: str, used_bytes: int = 0, slices=()) -> FakeDevice:
    return FakeDevice(name, total_bytes, capability, uuid, used_bytes, list(slices))


def mig_slice(name: str, total_bytes: int, *, uuid: str, used_bytes: int = 0, readable: bool = True) -> FakeDevice:
    return FakeDevice(name, total_bytes, None, uuid, used_bytes, memory_readable=readable)


class FakeNvml:
    """The pynvml calls the project makes, answering for a list of `FakeDevice` GPUs in PCI-bus order."""

    NVML_DEVICE_MIG_ENABLE = 1
    NVML_DEVICE_MIG_DISABLE = 0

    def __init__(self, gpus, *, fail_init: bool = False):
        self.gpus, self.fail_init, self.inits = list(gpus), fail_init, 0

    def _every_device(self):
        return [device for g in self.gpus for device in (g, *g.slices)]

    def nvmlInit(self):
        self.inits += 1
        if self.fail_init:
            raise FakeNvmlError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        if not 0 <= index < len(self.gpus):
            raise FakeNvmlError("Invalid Argument")
        return self.gpus[index]

    def nvmlDeviceGetHandleByUUID(self, uuid):
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        for device in self._every_device():
            if device.uuid == uuid:
                return device
        raise FakeNvmlError("Not Found")

    def nvmlDeviceGetUUID(self, handle):
        return handle.uuid

    def nvmlDeviceGetName(self, handle):
        return handle.name.encode()  # older nvidia-ml-py returns bytes

    def nvmlDeviceGetMemoryInfo(self, handle):
        if not handle.memory_readable:
            raise FakeNvmlError("Insufficient Permissions")
        return SimpleNamespace(total=handle.total_bytes, used=handle.used_bytes,
                               free=handle.total_bytes - handle.used_bytes)

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        if handle.capability is None:
            raise FakeNvmlError("Not Supported")
        return handle.capability

    def nvmlDeviceGetMigMode(self, handle):
        if handle.parent is not None:
            raise FakeNvmlError("Not Supported")  # a slice has no MIG mode of its own
        mode = self.NVML_DEVICE_MIG_ENABLE if handle.slices else self.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle):
        return 7 if handle.slices else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, index):
        if index >= len(handle.slices):
            raise FakeNvmlError("Not Found")
        return handle.slices[index]

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle):
        if handle.parent is None:
            raise FakeNvmlError("Invalid Argument")
        return handle.parent


def simulate(monkeypatch, gpus, *, visible: str | None = None, cuda: bool = True, fail_init: bool = False,
             nvml: bool = True) -> FakeNvml:
    """NVML answering for `gpus`, CUDA_VISIBLE_DEVICES set to `visible` (None: unset), torch with or without CUDA
    but not yet initialised (so only NVML is asked). `nvml=False`: the package is missing."""
    fake = FakeNvml(gpus, fail_init=fail_init)
    monkeypatch.setattr(gpu_devices, "pynvml", fake if nvml else None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    return fake


def start_cuda(monkeypatch, devices: list[dict]) -> None:
    """torch.cuda as a process sees it once CUDA is up: `devices[i]` is what `cuda:i` reports (uuid, name,
    major, minor, total_memory, and free_bytes for cudaMemGetInfo)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(devices))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: SimpleNamespace(**devices[index]))
    monkeypatch.setattr(torch.cuda, "mem_get_info",
                        lambda index: (devices[index]["free_bytes"], devices[index]["total_memory"]))
