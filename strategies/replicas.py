"""Replicas: one full model copy per GPU, each batch's windows spread across them in threads (what the classic
advice's `DataParallel` is for). Not a layer split (`model_split`).
"""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor

import torch

from longqa_core.batching import ModelRunner
from strategies.base import RUNTIME, Strategy
from strategies.hardware import Hardware


class Replicas(Strategy):
    """A full model copy on every GPU; windows of a batch run on all GPUs at once.

    Saves: time: N GPUs answer about N times as many windows per second (long documents have many windows).
    Costs: N times the weight memory (each GPU holds the whole model); a batch of one window uses one GPU.
    Requires: two or more CUDA GPUs, each large enough for the whole model.
    """

    name = "replicas"
    description = "One model copy per GPU; each batch's windows are spread across the GPUs in threads."
    phase = RUNTIME
    conflicts_with = ("model_split", "offload", "int8_dynamic", "bnb_8bit", "bnb_4bit")

    def unavailable_reason(self, hardware: Hardware) -> str | None:
        if hardware.gpu_count < 2:
            return f"needs 2+ CUDA GPUs, found {hardware.gpu_count}"
        return None

    def make_runner(self, model, context_factory):
        devices = [torch.device("cuda", gpu.index) for gpu in self.hardware.usable_gpus]
        replicas = [model if _device_of(model) == devices[0] else model.to(devices[0])]
        replicas += [copy.deepcopy(model).to(device) for device in devices[1:]]
        return ReplicaRunner([ModelRunner(replica, context_factory, device=device)
                              for replica, device in zip(replicas, devices)])


def _device_of(model) -> torch.device:
    return next(model.parameters()).device


class ReplicaRunner:
    """Runs a batch split across several runners (one per device) concurrently; same outputs as one runner."""

    def __init__(self, runners: list):
        if not runners:
            raise ValueError("ReplicaRunner needs at least one runner")
        self.runners = runners
        self.devices = [device for runner in runners for device in runner.devices]

    @property
    def models(self) -> list:
        return [runner.model for runner in self.runners]

    def __call__(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        size = next(iter(batch.values())).shape[0]
        pieces = min(size, len(self.runners))
        chunks = [dict(zip(batch, parts)) for parts in zip(*(torch.tensor_split(t, pieces) for t in batch.values()))]
        with ThreadPoolExecutor(max_workers=pieces) as pool:
            results = list(pool.map(lambda job: job[0](job[1]), zip(self.runners, chunks)))
        starts, ends = zip(*results)
        return torch.cat(starts), torch.cat(ends)  # (B, L) each
