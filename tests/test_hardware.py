"""Hardware detection with NVML and torch.cuda simulated: what each machine looks like, and never an exception."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from longqa_core import gpu_devices
from strategies import hardware
from strategies.hardware import Gpu, Hardware, detect_hardware
from tests import fake_nvml
from tests.fake_nvml import GiB, MiB, mig_slice

T4 = ("Tesla T4", 15360 * MiB, (7, 5))
RTX_3090 = ("NVIDIA GeForce RTX 3090", 24576 * MiB, (8, 6))
H100 = ("NVIDIA H100 80GB HBM3", 81559 * MiB, (9, 0))


def card(index: int, name: str, total_bytes: int, capability, slices=()):
    return fake_nvml.gpu(name, total_bytes, capability, uuid=f"GPU-{index:08x}-0000-0000-0000-000000000000",
                         slices=slices)


def simulate(monkeypatch, cards, *, cuda: bool = True, fail_init: bool = False, visible: str | None = None):
    """NVML answering for `cards` (name, total bytes, compute capability), in PCI-bus order."""
    return fake_nvml.simulate(monkeypatch, [card(i, *c) for i, c in enumerate(cards)], visible=visible, cuda=cuda,
                              fail_init=fail_init)


def test_reads_gpus_from_nvml(monkeypatch):
    simulate(monkeypatch, [T4, RTX_3090])
    found = detect_hardware()
    assert found.gpus == (Gpu(0, "Tesla T4", 15360 * MiB, (7, 5)),
                          Gpu(1, "NVIDIA GeForce RTX 3090", 24576 * MiB, (8, 6)))
    assert found.cuda_available and found.gpu_count == 2


def test_no_driver_means_no_gpus(monkeypatch):
    simulate(monkeypatch, [T4], cuda=False, fail_init=True)
    found = detect_hardware()
    assert found.gpus == () and found.gpu_count == 0 and not found.cuda_available


def test_missing_pynvml_falls_back_to_torch(monkeypatch):
    monkeypatch.setattr(gpu_devices, "pynvml", None)  # nvidia-ml-py not installed
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda index: SimpleNamespace(name="NVIDIA A100-SXM4-40GB", total_memory=40 * 1024**3,
                                                      major=8, minor=0))
    found = detect_hardware()
    assert found.gpus == (Gpu(0, "NVIDIA A100-SXM4-40GB", 40 * 1024**3, (8, 0)),)
    assert found.gpus[0].supports_bf16


def test_gpus_torch_cannot_use_are_seen_but_not_usable(monkeypatch):
    simulate(monkeypatch, [T4], cuda=False)
    found = detect_hardware()
    assert len(found.gpus) == 1 and found.usable_gpus == () and found.gpu_count == 0
    assert "torch has no CUDA" in found.describe()


def test_cuda_visible_devices_restricts_the_list(monkeypatch):
    simulate(monkeypatch, [T4, RTX_3090, H100], visible="2")
    found = detect_hardware()
    assert [gpu.name for gpu in found.gpus] == ["NVIDIA H100 80GB HBM3"] and found.gpus[0].index == 0


def test_cuda_visible_devices_as_uuids_restricts_the_list(monkeypatch):
    simulate(monkeypatch, [T4, RTX_3090, H100], visible=f"{card(2, *H100).uuid},GPU-00000000")
    found = detect_hardware()
    assert found.gpus == (Gpu(0, "NVIDIA H100 80GB HBM3", 81559 * MiB, (9, 0)), Gpu(1, "Tesla T4", 15360 * MiB, (7, 5)))


def test_a_mig_slice_is_planned_with_its_own_memory(monkeypatch):
    slices = [mig_slice("NVIDIA H100 80GB HBM3 MIG 1g.10gb", 10 * GiB, uuid="MIG-aaaaaaaa-0000-0000-0000-000000000000"),
              mig_slice("NVIDIA H100 80GB HBM3 MIG 3g.40gb", 40 * GiB, uuid="MIG-bbbbbbbb-0000-0000-0000-000000000000")]
    fake_nvml.simulate(monkeypatch, [card(0, *H100, slices=slices)], visible="MIG-bbbbbbbb")
    found = detect_hardware()
    assert found.gpus == (Gpu(0, "NVIDIA H100 80GB HBM3 MIG 3g.40gb", 40 * GiB, (9, 0)),)
    assert found.gpus[0].supports_bf16


def test_never_raises_when_everything_fails(monkeypatch):
    def broken():
        raise RuntimeError("driver exploded")

    simulate(monkeypatch, [T4], fail_init=True)
    monkeypatch.setattr(torch.cuda, "is_available", broken)
    assert detect_hardware() == Hardware(gpus=(), cuda_available=False, cpu_bf16=hardware.is_cpu_bf16_native())


def test_bf16_support_follows_compute_capability():
    assert not Gpu(0, "T4", 16 * 10**9, (7, 5)).supports_bf16
    assert Gpu(0, "A100", 40 * 10**9, (8, 0)).supports_bf16
    assert not Gpu(0, "unknown", 16 * 10**9, None).supports_bf16


@pytest.mark.parametrize("flags, expected", [("fpu avx512f avx512_bf16", True), ("fpu avx2", False)])
def test_cpu_bf16_from_cpuinfo_when_torch_cannot_say(monkeypatch, tmp_path, flags, expected):
    def unknown():
        raise RuntimeError("no mkldnn")

    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", unknown, raising=False)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"flags\t: {flags}\n")
    real_open = open
    monkeypatch.setattr("builtins.open", lambda path, *a, **k: real_open(cpuinfo if path == "/proc/cpuinfo" else path,
                                                                         *a, **k))
    assert hardware.is_cpu_bf16_native() is expected


def test_hardware_for_a_cpu_kind_sets_only_native_bf16(monkeypatch):
    """Measurements filed by CPU kind resolve the profiles as on that kind; "detected" is this machine as it is."""
    detected = hardware.Hardware(gpus=(), cuda_available=False, cpu_bf16=True)
    monkeypatch.setattr(hardware, "detect_hardware", lambda: detected)
    assert hardware.hardware_for("detected") is detected
    assert hardware.hardware_for("avx2") == hardware.Hardware(gpus=(), cuda_available=False, cpu_bf16=False)
    assert hardware.hardware_for("avx512-bf16").cpu_bf16 is True
