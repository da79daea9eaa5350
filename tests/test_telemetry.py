"""Telemetry: which physical GPU or MIG slice each readout describes (CUDA_VISIBLE_DEVICES as indices and UUIDs,
CUDA's own device order, MIG), with NVML and torch.cuda simulated; the real thing on a GPU behind `requires_cuda`.
"""

from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from longqa_core import gpu_devices, telemetry
from tests.fake_nvml import GiB, gpu, mig_slice, simulate, start_cuda
from tests.tiny import requires_cuda

PROJECT_ROOT = Path(__file__).resolve().parent.parent

UUID_A = "GPU-aaaaaaaa-1111-2222-3333-444444444444"
UUID_B = "GPU-bbbbbbbb-1111-2222-3333-444444444444"
UUID_C = "GPU-cccccccc-1111-2222-3333-444444444444"
MIG_1 = "MIG-11111111-aaaa-bbbb-cccc-dddddddddddd"
MIG_2 = "MIG-22222222-aaaa-bbbb-cccc-dddddddddddd"


def three_cards():
    """Three GPUs whose readings differ, so a readout of the wrong card shows."""
    return [gpu("NVIDIA A100-SXM4-40GB", 40 * GiB, (8, 0), uuid=UUID_A, used_bytes=1 * GiB),
            gpu("NVIDIA H100 80GB HBM3", 80 * GiB, (9, 0), uuid=UUID_B, used_bytes=2 * GiB),
            gpu("Tesla T4", 15 * GiB, (7, 5), uuid=UUID_C, used_bytes=3 * GiB)]


def mig_card(readable: bool = True):
    """An A100 in MIG mode with two slices of different sizes."""
    return gpu("NVIDIA A100-SXM4-80GB", 80 * GiB, (8, 0), uuid=UUID_A, used_bytes=0, slices=[
        mig_slice("NVIDIA A100-SXM4-80GB MIG 1g.10gb", 10 * GiB, uuid=MIG_1, used_bytes=1 * GiB, readable=readable),
        mig_slice("NVIDIA A100-SXM4-80GB MIG 3g.40gb", 40 * GiB, uuid=MIG_2, used_bytes=5 * GiB, readable=readable),
    ])


def names(snapshot):
    return [(row["index"], row["name"]) for row in snapshot]


# ------------------------------------------------------------------------------------------ missing NVML or driver
@pytest.mark.parametrize("nvml, fail_init", [(False, False), (True, True)])
def test_without_nvml_or_a_driver_everything_is_none(monkeypatch, nvml, fail_init):
    simulate(monkeypatch, three_cards(), nvml=nvml, fail_init=fail_init, cuda=False)
    assert gpu_devices.nvml() is None
    assert gpu_devices.gpu_snapshot() == []
    assert gpu_devices.nvml_handle(0) is None
    assert gpu_devices.device_memory(0) == (None, None)


def test_nvml_is_initialised_once(monkeypatch):
    fake = simulate(monkeypatch, three_cards())
    for _ in range(3):
        gpu_devices.gpu_snapshot()
        gpu_devices.device_memory(1)
    assert fake.inits == 1


def test_a_failing_driver_call_gives_none_not_an_exception(monkeypatch):
    fake = simulate(monkeypatch, three_cards())

    def broken(handle):
        raise RuntimeError("GPU is lost")

    monkeypatch.setattr(fake, "nvmlDeviceGetMemoryInfo", broken)
    monkeypatch.setattr(fake, "nvmlDeviceGetName", broken)
    snapshot = gpu_devices.gpu_snapshot()
    assert [row["nvml_used_bytes"] for row in snapshot] == [None, None, None]
    assert [row["name"] for row in snapshot] == ["GPU 0", "GPU 1", "GPU 2"]
    assert gpu_devices.device_memory(0) == (None, None)


# ------------------------------------------------------------------------------------------ CUDA_VISIBLE_DEVICES
def test_every_gpu_when_cuda_visible_devices_is_unset(monkeypatch):
    simulate(monkeypatch, three_cards())
    snapshot = gpu_devices.gpu_snapshot()
    assert names(snapshot) == [(0, "NVIDIA A100-SXM4-40GB"), (1, "NVIDIA H100 80GB HBM3"), (2, "Tesla T4")]
    assert snapshot[2] == {"index": 2, "name": "Tesla T4", "nvml_used_bytes": 3 * GiB, "nvml_total_bytes": 15 * GiB,
                           "compute_capability": (7, 5)}


def test_cuda_visible_devices_1_reads_the_second_card_as_cuda_0(monkeypatch):
    simulate(monkeypatch, three_cards(), visible="1")
    assert names(gpu_devices.gpu_snapshot()) == [(0, "NVIDIA H100 80GB HBM3")]
    assert gpu_devices.device_memory(0) == (2 * GiB, 80 * GiB)  # the H100's, not the A100's at NVML index 0
    assert gpu_devices.device_memory(1) == (None, None)  # cuda:1 does not exist for this process


def test_cuda_visible_devices_order_is_cudas_order(monkeypatch):
    simulate(monkeypatch, three_cards(), visible="2,0")
    assert names(gpu_devices.gpu_snapshot()) == [(0, "Tesla T4"), (1, "NVIDIA A100-SXM4-40GB")]
    assert gpu_devices.device_memory(1) == (1 * GiB, 40 * GiB)


@pytest.mark.parametrize("visible, expected", [
    ("0,7,1", ["NVIDIA A100-SXM4-40GB"]),  # CUDA stops at the first index naming no GPU
    ("1,1", []),  # a repeated entry hides every GPU
    ("-1", []),
    ("", []),
    ("1, 2", ["NVIDIA H100 80GB HBM3", "Tesla T4"]),
])
def test_cuda_visible_devices_edge_cases(monkeypatch, visible, expected):
    simulate(monkeypatch, three_cards(), visible=visible)
    assert [row["name"] for row in gpu_devices.gpu_snapshot()] == expected


def test_gpu_uuids_and_unambiguous_prefixes_name_the_cards(monkeypatch):
    simulate(monkeypatch, three_cards(), visible=f"{UUID_C},GPU-bbbb")
    assert names(gpu_devices.gpu_snapshot()) == [(0, "Tesla T4"), (1, "NVIDIA H100 80GB HBM3")]
    assert gpu_devices.device_memory(1) == (2 * GiB, 80 * GiB)


def test_an_ambiguous_or_unknown_uuid_ends_the_list(monkeypatch):
    simulate(monkeypatch, three_cards(), visible=f"{UUID_B},GPU-,{UUID_A}")  # "GPU-" matches all three
    assert names(gpu_devices.gpu_snapshot()) == [(0, "NVIDIA H100 80GB HBM3")]
    simulate(monkeypatch, three_cards(), visible="GPU-deadbeef")
    assert gpu_devices.gpu_snapshot() == []


# ------------------------------------------------------------------------------------------ MIG
def test_a_mig_uuid_reads_that_slice(monkeypatch):
    simulate(monkeypatch, [mig_card()], visible=MIG_2)
    [row] = gpu_devices.gpu_snapshot()
    assert row["name"] == "NVIDIA A100-SXM4-80GB MIG 3g.40gb"
    assert (row["nvml_used_bytes"], row["nvml_total_bytes"]) == (5 * GiB, 40 * GiB)  # the slice, not the 80 GB card
    assert row["compute_capability"] == (8, 0)  # the slice does not say; its GPU does
    assert gpu_devices.device_memory(0) == (5 * GiB, 40 * GiB)


def test_a_gpu_in_mig_mode_stands_for_its_slices(monkeypatch):
    simulate(monkeypatch, [mig_card(), three_cards()[2]])
    assert names(gpu_devices.gpu_snapshot()) == [(0, "NVIDIA A100-SXM4-80GB MIG 1g.10gb"),
                                               (1, "NVIDIA A100-SXM4-80GB MIG 3g.40gb"), (2, "Tesla T4")]


# ------------------------------------------------------------------------------------------ once CUDA is up
def cuda_view(*cards, free_bytes=0):
    """What torch reports for cuda:0, cuda:1, ... (`uuid` printed without its prefix, as torch prints it)."""
    return [{"uuid": card.uuid.split("-", 1)[1], "name": card.name, "major": 9, "minor": 0,
             "total_memory": card.total_bytes, "free_bytes": free_bytes} for card in cards]


def test_once_cuda_is_up_its_uuids_decide_which_card_each_index_is(monkeypatch):
    cards = three_cards()
    simulate(monkeypatch, cards)
    start_cuda(monkeypatch, cuda_view(cards[1], cards[0], cards[2]))  # CUDA orders fastest first: the H100 first
    assert gpu_devices.device_memory(0) == (2 * GiB, 80 * GiB)
    assert names(gpu_devices.gpu_snapshot()) == [(0, "NVIDIA H100 80GB HBM3"), (1, "NVIDIA A100-SXM4-40GB"),
                                               (2, "Tesla T4")]


def test_uuid_mapping_also_with_integer_cuda_visible_devices(monkeypatch):
    cards = three_cards()
    simulate(monkeypatch, cards, visible="2")
    start_cuda(monkeypatch, cuda_view(cards[2]))
    assert gpu_devices.device_memory(0) == (3 * GiB, 15 * GiB)
    assert names(gpu_devices.gpu_snapshot()) == [(0, "Tesla T4")]


def test_a_mig_slice_named_by_uuid_is_not_mistaken_for_its_gpu(monkeypatch):
    card = mig_card()
    simulate(monkeypatch, [card], visible=MIG_1)
    start_cuda(monkeypatch, cuda_view(card))  # even if CUDA reported the parent's UUID, the slice is read
    assert gpu_devices.device_memory(0) == (1 * GiB, 10 * GiB)


def test_a_slice_nvml_may_not_read_falls_back_to_cudas_own_count(monkeypatch):
    card = mig_card(readable=False)
    simulate(monkeypatch, [card], visible=MIG_2)
    start_cuda(monkeypatch, [{"uuid": MIG_2, "name": "MIG 3g.40gb", "major": 8, "minor": 0,
                              "total_memory": 40 * GiB, "free_bytes": 36 * GiB}])
    assert gpu_devices.device_memory(0) == (4 * GiB, 40 * GiB)  # cudaMemGetInfo: total - free


def test_without_nvml_cuda_still_fills_the_gauge(monkeypatch):
    cards = three_cards()
    simulate(monkeypatch, cards, nvml=False)
    start_cuda(monkeypatch, cuda_view(cards[2], free_bytes=11 * GiB))
    assert gpu_devices.gpu_snapshot() == [{"index": 0, "name": "Tesla T4", "nvml_used_bytes": 4 * GiB,
                                         "nvml_total_bytes": 15 * GiB, "compute_capability": (9, 0)}]


def test_before_cuda_is_up_nothing_asks_cuda(monkeypatch):
    simulate(monkeypatch, three_cards(), visible="1")

    def refuse(*args, **kwargs):
        raise AssertionError("CUDA was asked before it was up (a forked worker would inherit it)")

    for name in ("get_device_properties", "mem_get_info", "device_count", "get_device_name"):
        monkeypatch.setattr(torch.cuda, name, refuse)
    assert gpu_devices.gpu_snapshot()[0]["nvml_total_bytes"] == 80 * GiB
    assert gpu_devices.device_memory(0) == (2 * GiB, 80 * GiB)


# ------------------------------------------------------------------------------------------ measure()
def test_measure_reads_the_card_the_request_ran_on(monkeypatch):
    cards = three_cards()
    simulate(monkeypatch, cards, visible="1")
    start_cuda(monkeypatch, cuda_view(cards[1]))
    for name in ("reset_peak_memory_stats", "synchronize"):
        monkeypatch.setattr(torch.cuda, name, lambda index: None)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda index: 7 * 10**8)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda index: 10**8)  # the model, before the request
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda index: 9 * 10**8)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: "NVIDIA H100 80GB HBM3")
    with telemetry.measure(["cuda:0"]) as measurement:
        pass
    memory = measurement.memory.to_json()
    assert memory["devices"] == [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "peak_allocated_bytes": 7 * 10**8,
                                  "reserved_bytes": 9 * 10**8, "nvml_used_bytes": 2 * GiB,
                                  "nvml_total_bytes": 80 * GiB, "baseline_allocated_bytes": 10**8,
                                  "request_peak_bytes": 6 * 10**8}]
    assert memory["nvml_used_bytes"] == 2 * GiB and memory["peak_allocated_bytes"] == 7 * 10**8
    assert measurement.memory.peak_on("cuda:0") == 7 * 10**8 and measurement.memory.peak_on("cuda:1") is None


def test_measure_on_cpu_has_no_device_rows(monkeypatch):
    simulate(monkeypatch, [], cuda=False)
    with telemetry.measure(["cpu"]) as measurement:
        sum(range(1000))
    memory = measurement.memory.to_json()
    assert memory["devices"] == [] and memory["nvml_used_bytes"] is None and memory["peak_allocated_bytes"] is None
    assert memory["host_peak_rss_bytes"] >= memory["host_rss_bytes"] * 0.5 > 0
    assert measurement.latency_s["total"] > 0


# ------------------------------------------------------------------------------------------ host memory
MB = 10**6


@contextmanager
def fresh_pages(megabytes: int):
    """Hold `megabytes` of newly mapped, touched memory, then unmap it. An anonymous mapping always gets pages the
    process did not have (a freed tensor's pages may be handed out again without RSS growing: failed in a full run)."""
    size = megabytes * MB
    block = mmap.mmap(-1, size)
    try:
        for offset in range(0, size, mmap.PAGESIZE):
            block[offset] = 1
        yield
    finally:
        block.close()


def spike(megabytes: int) -> None:
    """Hold `megabytes` of touched memory for a moment, then hand it back."""
    with fresh_pages(megabytes):
        pass


def can_reset_peak() -> bool:
    return telemetry._reset_high_water_mark()


@pytest.mark.slow
@pytest.mark.skipif(not can_reset_peak(), reason="needs Linux's resettable VmHWM")
def test_host_peak_sees_a_spike_before_a_nested_block_resets_the_mark():
    with telemetry.HostPeak() as outer:
        spike(300)
        with telemetry.HostPeak() as inner:  # resets the process's mark: outer must keep the spike
            sum(range(1000))
        with telemetry.measure(["cpu"]) as measurement:  # a request measured inside a benchmark row
            sum(range(1000))
    assert outer.method == inner.method == "VmHWM"
    assert outer.peak_rss_bytes - outer.baseline_rss_bytes > 250 * MB
    assert inner.peak_rss_bytes - inner.baseline_rss_bytes < 100 * MB
    # against the resident memory the request started from (the spike's pages may or may not have gone back)
    assert measurement.memory.host_peak_rss_bytes - inner.baseline_rss_bytes < 100 * MB


@pytest.mark.slow
def test_host_peak_samples_rss_where_the_mark_cannot_be_reset(monkeypatch, tmp_path):
    monkeypatch.setattr(telemetry, "CLEAR_REFS", tmp_path / "absent" / "clear_refs")
    with telemetry.HostPeak(interval_s=0.001) as host:
        with fresh_pages(300):
            held = telemetry.current_rss_bytes()
            time.sleep(0.2)  # held long enough for several samples
    assert host.method == "sampled RSS"
    # against what the process held during the spike, not against its start: other threads of a busy test run
    # may hand memory back meanwhile (the rise over the start was 215 MB once, beside two busy loops)
    assert host.peak_rss_bytes >= held - 20 * MB
    assert host.peak_rss_bytes - host.baseline_rss_bytes > 100 * MB


# ------------------------------------------------------------------------------------------ on a real GPU
def bare(uuid: str) -> str:
    """A UUID without its GPU-/MIG- prefix (torch prints none, NVML always one)."""
    return uuid[4:].lower() if uuid.startswith(gpu_devices.UUID_PREFIXES) else uuid.lower()


def _snapshot_in_a_process(visible: str) -> list[dict]:
    """gpu_snapshot() in a fresh process with CUDA_VISIBLE_DEVICES=`visible`, and what torch sees there."""
    code = ("import json, torch; from longqa_core import gpu_devices; "
            "print(json.dumps({'snapshot': gpu_devices.gpu_snapshot(), 'torch': torch.cuda.device_count()}))")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": visible}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=PROJECT_ROOT, capture_output=True, text=True,
                         check=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


@requires_cuda
def test_on_a_gpu_nvml_and_cuda_describe_the_same_device():
    torch.cuda.init()
    index = 0
    handle = gpu_devices.nvml_handle(index)
    assert handle is not None, "NVML answers on a GPU machine (nvidia-ml-py installed, driver present)"
    assert bare(gpu_devices._uuid(gpu_devices.nvml(), handle)) == bare(str(torch.cuda.get_device_properties(index).uuid))
    used_before, total = gpu_devices.device_memory(index)
    free, cuda_total = torch.cuda.mem_get_info(index)
    assert abs(total - cuda_total) <= 0.05 * total
    block = torch.empty(2 * GiB, dtype=torch.uint8, device=f"cuda:{index}")
    used_after, _ = gpu_devices.device_memory(index)
    assert used_after - used_before >= 1.9 * GiB
    del block
    snapshot = gpu_devices.gpu_snapshot()
    assert len(snapshot) == torch.cuda.device_count() and snapshot[0]["nvml_total_bytes"] == total


@requires_cuda
def test_on_a_gpu_measure_reports_this_device():
    with telemetry.measure(["cuda:0"]) as measurement:
        block = torch.ones(256 * 1024**2, dtype=torch.uint8, device="cuda:0")
    [row] = measurement.memory.devices
    assert row.peak_allocated_bytes >= block.numel() and row.nvml_used_bytes >= row.peak_allocated_bytes
    assert row.nvml_total_bytes > row.nvml_used_bytes


@requires_cuda
def test_on_a_gpu_cuda_visible_devices_as_uuid_and_as_a_missing_index():
    torch.cuda.init()
    uuid = gpu_devices._uuid(gpu_devices.nvml(), gpu_devices.nvml_handle(0))
    by_uuid = _snapshot_in_a_process(uuid)
    assert by_uuid["torch"] == 1 and len(by_uuid["snapshot"]) == 1
    assert by_uuid["snapshot"][0]["name"] == gpu_devices.gpu_snapshot()[0]["name"]
    beyond = _snapshot_in_a_process(str(gpu_devices.nvml().nvmlDeviceGetCount()))  # an index naming no GPU
    assert beyond == {"snapshot": [], "torch": 0}


def test_the_environment_s_malloc_settings_leave_the_allocator_alone(monkeypatch):
    """The server's allocator settings: an operator's MALLOC_* variables win over them."""
    monkeypatch.setenv("MALLOC_ARENA_MAX", "16")
    assert telemetry.tune_allocator() == {}


LARGE_BUFFERS = """
import json, resource, sys
import numpy
from longqa_core import telemetry

kept = telemetry.keep_large_buffers()
faults = []
for _ in range(3):  # a forward's 64 MiB tensors, one after another
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    buffer = numpy.ones(1 << 23)  # 64 MiB, every page touched
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    del buffer
trimmed = telemetry.trim_heap()
print(json.dumps({"kept": kept, "faults": faults, "trimmed": trimmed}))
"""


def _large_buffers(env: dict) -> dict:
    done = subprocess.run([sys.executable, "-c", LARGE_BUFFERS], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parent.parent, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.slow  # three interpreters, each importing torch
def test_a_cpu_forward_s_large_buffers_reuse_freed_heap_and_the_operator_s_settings_win():
    """After `keep_large_buffers` a second 64 MiB buffer takes the first one's pages: it faults in almost none,
    where glibc's defaults map each afresh; the explicit trim still hands them back. Where the operator set glibc's
    malloc (a glibc.malloc tunable, or any MALLOC_* variable), glibc's own settings stay."""
    plain = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    kept = _large_buffers(plain)
    assert kept["kept"] == {"MALLOC_MMAP_MAX_": 0, "MALLOC_TRIM_THRESHOLD_": telemetry.KEPT_HEAP_BYTES}
    first, *later = kept["faults"]  # (pages or, with transparent huge pages, 2 MiB pages)
    assert first > 0 and max(later) <= first // 10, kept
    assert kept["trimmed"]  # the freed buffer's pages go back on the explicit trim
    defaults = _large_buffers({**plain, "GLIBC_TUNABLES": "glibc.malloc.check=0"})  # glibc's default, said
    first, *later = defaults["faults"]
    assert defaults["kept"] == {} and first > 0 and min(later) >= first // 2, defaults
    assert _large_buffers({**plain, "MALLOC_ARENA_MAX": "4"})["kept"] == {}


FROZEN_START_UP = """
import gc, json, weakref
import torch, transformers  # what a server imports before its model loads
from longqa.serving import policy

class Node:
    pass

before = len(gc.get_objects())
settings = policy.tune_server_process()
a, b = Node(), Node()  # a reference cycle made after start-up: a model unloaded later holds many
a.other, b.other = b, a
gone = weakref.ref(a)
del a, b
gc.collect()
print(json.dumps({"before": before, "frozen": settings["frozen_objects"], "left": len(gc.get_objects()),
                  "collected": gone() is None}))
"""


@pytest.mark.slow
def test_a_server_freezes_what_start_up_made_and_still_collects_what_comes_after():
    """`python app.py` freezes start-up's objects: a collection then walks only what came after, and garbage made
    after start-up (an unloaded model's reference cycles) is still collected."""
    out = subprocess.run([sys.executable, "-c", FROZEN_START_UP], cwd=PROJECT_ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["collected"]
    assert result["frozen"] >= result["before"] // 2  # torch and transformers' objects, at least
    assert result["left"] < result["frozen"] // 10
