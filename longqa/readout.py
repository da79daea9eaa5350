"""What a load and an answer report, as typed parts: the load's cost (`LoadReadout`), and end to end for one
answer, the engine's result (answers, latency by stage, memory, what was read), the model and profile that answered
(with the strategies it applied), the request's own memory above the loaded model's baseline beside the process's
total, the memory planner's prediction beside the measured peak, and where a deployment adds them, the wait in the
lane and the Ray replica. Each part is built by the layer that knows it.

`Readout.to_json` is the one place it becomes JSON: the CLI's --json, the web API's last output and the page's JSON
panel, in the shape those have always had. It measures and formats nothing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from longqa_core.answering import QAResult
from longqa_core.batching import BatchState
from longqa_core.telemetry import MemoryReadout


@dataclass
class LoadReadout:
    """What loading cost. Bytes and seconds; `weight_bytes_per_device` keys: "cpu", "cuda:0", ..., "disk"."""

    load_time_s: float
    weight_bytes_per_device: dict[str, int]
    device_map: dict | None
    host_peak_rss_bytes: int | None
    fallback_reason: str | None
    strategies: list[str]
    dtype: str
    host_rss_before_bytes: int | None = None
    step_time_s: dict[str, float] = field(default_factory=dict)  # per step of the load (`loader.LOAD_STEPS`)
    profile: str = ""
    model_ref: str = ""
    notes: list[str] = field(default_factory=list)  # what the strategies chose at load (e.g. the band kernel's use)

    @property
    def weight_bytes(self) -> int:
        return sum(self.weight_bytes_per_device.values())

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class MemoryPrediction:
    """The memory planner's peak for a request (from the model's config, the profile, the window and the batch, as
    it would predict before loading) beside the peak measured on the same device."""

    device: str  # "cpu" or "cuda:N"
    predicted_peak_bytes: int
    measured_peak_bytes: int | None
    error_pct: float | None
    measured_as: str  # "peak RSS" on CPU, "torch peak allocated" on a GPU


@dataclass
class RequestMemory:
    """A request's memory on the device it ran on: the process's total at its peak (what earlier requests and models
    left behind included), what the device held right before the request (the loaded model's resident baseline),
    and the request's own peak above that baseline, the figure that does not depend on what ran before."""

    device: str  # "cpu", or "cuda" for the GPUs the request used, summed
    measured_as: str  # "RSS" on CPU, "torch allocated" on GPUs
    peak_bytes: int | None
    baseline_bytes: int | None
    request_peak_bytes: int | None

    @classmethod
    def of(cls, memory: MemoryReadout) -> "RequestMemory":
        """From a request's memory readout: its GPUs' figures summed where it used any, else the host's."""
        if memory.devices:
            baselines = [d.baseline_allocated_bytes for d in memory.devices]
            requests = [d.request_peak_bytes for d in memory.devices]
            return cls("cuda", "torch allocated", memory.peak_allocated_bytes,
                       None if None in baselines else sum(baselines), None if None in requests else sum(requests))
        return cls("cpu", "RSS", memory.host_peak_rss_bytes, memory.host_baseline_rss_bytes,
                   memory.host_request_peak_bytes)


@dataclass
class QueueReadout:
    """How long a request waited for the model in a shared deployment, and how many were ahead when it came; and
    when it waited: before it started, for its batch turns, and before a guided read fell back to reading
    everything (admitted again as a full read: None when it did not)."""

    waited_s: float
    ahead_at_start: int
    waited_to_start_s: float = 0.0
    waited_for_turns_s: float = 0.0
    waited_to_read_all_s: float | None = None


@dataclass
class Readout:
    """One answer as the page, the API and the CLI report it."""

    result: QAResult
    model: str | None
    profile: str | None
    memory_prediction: MemoryPrediction | None = None
    queue: QueueReadout | None = None  # a shared deployment's lane
    replica: str | None = None  # Ray Serve: the replica that answered
    generation: int | None = None  # Ray Serve: the deployment it belongs to
    full_read_s: float | None = None  # a guided read's prediction of reading every window (`predict_full_read_s`)
    strategies: list[str] | None = None  # what the profile applied on this machine (`custom`: the ticked ones)

    @property
    def request_memory(self) -> RequestMemory:
        """The request's own peak above the loaded model's baseline, beside the process's total."""
        return RequestMemory.of(self.result.memory)

    def to_json(self) -> dict:
        out = self.result.to_json()
        out.update(model=self.model, profile=self.profile,
                   memory_prediction=asdict(self.memory_prediction) if self.memory_prediction else None)
        out.update(strategies=self.strategies, request_memory=asdict(self.request_memory))
        if self.replica is not None:
            out.update(replica=self.replica, generation=self.generation)
        if self.queue is not None:
            out["queue"] = asdict(self.queue)
        return out


def predict_full_read_s(result: QAResult, measured: BatchState) -> float | None:
    """A guided read's prediction of the full read's time: reading the files once, its own seconds per window for
    tokenizing and decoding, and every window's forward pass at the model's measured seconds a window (None when
    nothing was skipped or nothing was measured)."""
    reading, latency = result.reading, result.latency_s
    if reading is None or reading.windows_read <= 0 or reading.windows_total <= reading.windows_read:
        return None
    forward_s = measured.seconds_for_windows(reading.windows_total)
    if forward_s is None:
        return None
    # Reading the files is paid once whatever is read; tokenizing, the forward passes and decoding grow with the
    # windows.
    per_window = sum(latency.get(stage, 0.0) for stage in ("tokenize", "decode")) / reading.windows_read
    return latency.get("extract", 0.0) + per_window * reading.windows_total + forward_s
