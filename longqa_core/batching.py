"""Batches: windows collated into tensors and run through a model's runner a batch at a time, stoppable between
batches, halving the batch on out-of-memory; what a loaded model remembers between requests (the batch size that
worked, the forward time it measured); memory handed back after a refused request.

It runs forward passes and knows nothing of documents, plans or answers.
"""

from __future__ import annotations

import contextlib
import gc
import time
from dataclasses import dataclass
from typing import Any, Callable, Generator, Protocol, TypeVar

import numpy as np
import torch
from accelerate.utils.memory import clear_device_cache, should_reduce_batch_size

from longqa_core.errors import Cancelled, OutOfMemoryError
from longqa_core.telemetry import trim_heap
from longqa_core.limits import FIT_PROFILES_HINT, EngineSettings, StopCheck, check_predicted_time, stop_check
from longqa_core.windows import Window

T = TypeVar("T")


@dataclass(frozen=True)
class ForwardSample:
    """What one request's forward passes measured: window tokens and windows run, and their own seconds (turns
    waited for others not counted). A run in another process (a ZeroGPU worker, a Ray replica) hands it back, so
    the loaded model's record learns from it too."""

    tokens: int = 0
    windows: int = 0
    seconds: float = 0.0


@dataclass
class BatchState:
    """What the engine remembers about a loaded model between requests: the batch size that last worked, how many
    out-of-memory back-offs happened, and the forward time measured on it: the model's one throughput estimate,
    which time predictions, ZeroGPU durations and retry estimates read."""

    size: int
    backoffs: int = 0
    # Window tokens and windows run and the seconds they took, each earlier request counting half as much as the
    # next, so the rate follows a machine whose load changes. Zero until a request has run (or a caller seeds one).
    forward_tokens: float = 0.0
    forward_s: float = 0.0
    forward_windows: float = 0.0
    # The loaded model's whole window, in tokens: a window's seconds are then its tokens' at the measured rate, so
    # that windows read sized to a passage (a quarter of the tokens) do not make whole ones look cheaper.
    window_tokens: int | None = None

    @property
    def tokens_per_s(self) -> float | None:
        """Window tokens per second of forward passes on this model, or None before any was measured."""
        return self.forward_tokens / self.forward_s if self.forward_s > 0 and self.forward_tokens > 0 else None

    @property
    def window_s(self) -> float | None:
        """Forward seconds a whole window takes on this model, or None before any was measured: its tokens at the
        measured rate where `window_tokens` is known, else the windows run on average."""
        if self.window_tokens and self.tokens_per_s:
            return self.window_tokens / self.tokens_per_s
        return self.forward_s / self.forward_windows if self.forward_s > 0 and self.forward_windows > 0 else None

    def seconds_for_tokens(self, tokens: float, assumed_tokens_per_s: float | None = None) -> float | None:
        """Forward seconds `tokens` window tokens take at the measured rate (`assumed_tokens_per_s` before any was
        measured; without it, None): the one place where tokens become seconds."""
        rate = self.tokens_per_s or assumed_tokens_per_s
        return tokens / rate if rate else None

    def seconds_for_windows(self, windows: float) -> float | None:
        """Forward seconds `windows` windows take at the measured seconds a window, or None before any ran."""
        window_s = self.window_s
        return windows * window_s if window_s else None

    def record_forward(self, tokens: int, seconds: float, windows: int = 0) -> None:
        if tokens > 0 and seconds > 0:
            self.forward_tokens = self.forward_tokens / 2 + tokens
            self.forward_s = self.forward_s / 2 + seconds
            self.forward_windows = self.forward_windows / 2 + windows

    def record(self, sample: ForwardSample) -> None:
        """Learn from forward passes that ran elsewhere (see ForwardSample)."""
        self.record_forward(sample.tokens, sample.seconds, sample.windows)


class Runner(Protocol):
    """Runs one collated batch. A runner that waits for turns on a shared model before a batch may say how long
    it has waited in all (`waited_s`): those seconds are not forward time."""

    devices: list[torch.device]

    def __call__(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]: ...


class ModelRunner:
    """Runs a batch on one model: inputs to its device, inference mode plus the strategies' context."""

    def __init__(self, model: torch.nn.Module, context_factory: Callable = contextlib.nullcontext, device=None):
        self.model = model
        self.context_factory = context_factory
        self.device = torch.device(device) if device is not None else _input_device(model)
        self.devices = _model_devices(model) or [self.device]

    def __call__(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        inputs = {name: tensor.to(self.device) for name, tensor in batch.items()}
        with torch.inference_mode(), self.context_factory():
            out = self.model(**inputs)
        return out.start_logits.float().cpu(), out.end_logits.float().cpu()  # (B, L) each


def _input_device(model: torch.nn.Module) -> torch.device:
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if embeddings is not None and embeddings.weight.device.type != "meta":
        return embeddings.weight.device
    for parameter in model.parameters():
        if parameter.device.type != "meta":
            return parameter.device
    return torch.device("cpu")


def _model_devices(model: torch.nn.Module) -> list[torch.device]:
    seen: list[torch.device] = []
    for parameter in model.parameters():
        if parameter.device.type not in ("meta",) and parameter.device not in seen:
            seen.append(parameter.device)
    return seen


def release_memory() -> None:
    """Hand freed memory back to the system: collect reference cycles, then ask glibc to return its free heap
    pages (`telemetry.trim_heap`). Without the trim, the allocations of a refused huge request stay in the
    process's RSS."""
    gc.collect()
    trim_heap()


def collate(windows: list[Window], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Pad windows to the longest one; global attention on `<s>` and the question tokens."""
    length = max(len(w.input_ids) for w in windows)
    input_ids = torch.full((len(windows), length), pad_token_id, dtype=torch.long)  # (B, L)
    attention_mask = torch.zeros((len(windows), length), dtype=torch.long)  # (B, L)
    global_attention_mask = torch.zeros((len(windows), length), dtype=torch.long)  # (B, L)
    for row, window in enumerate(windows):
        input_ids[row, : len(window.input_ids)] = torch.from_numpy(np.asarray(window.input_ids, dtype=np.int64))
        attention_mask[row, : len(window.input_ids)] = 1
        global_attention_mask[row, : window.n_global] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask,
            "global_attention_mask": global_attention_mask}


def stack_batches(batches: list[dict[str, torch.Tensor]], pad_token_id: int) -> tuple[dict[str, torch.Tensor],
                                                                                      list[int]]:
    """Collated batches (of other requests, perhaps of other lengths) as one: each padded to the longest and
    stacked, and the rows each brought, so `split_rows` can hand every caller its own part of the logits."""
    length = max(batch["input_ids"].shape[1] for batch in batches)
    rows = [batch["input_ids"].shape[0] for batch in batches]
    merged = {}
    for name in batches[0]:
        fill = pad_token_id if name == "input_ids" else 0  # padding: no attention, no global attention
        merged[name] = torch.cat([torch.nn.functional.pad(batch[name], (0, length - batch[name].shape[1]), value=fill)
                                  for batch in batches])  # (sum of B, L)
    return merged, rows


def split_rows(start: torch.Tensor, end: torch.Tensor, rows: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The (start, end) logits of each batch `stack_batches` merged, in order; each keeps the merged width, which
    is at least its own (the engine reads only a window's own tokens)."""
    return list(zip(torch.split(start, rows), torch.split(end, rows)))


def is_out_of_memory(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or should_reduce_batch_size(exc)


@dataclass(frozen=True)
class WindowProgress:
    """Where a request's forward passes stand, reported before the first batch and after each one."""

    windows_done: int
    windows_total: int
    elapsed_s: float  # its own forward seconds since the first batch began (turns waited for others not counted)
    eta_s: float | None  # time left: this request's own rate once a batch is done, before that the model's
    # measured throughput; None when neither exists yet

    @property
    def windows_left(self) -> int:
        return self.windows_total - self.windows_done

    @property
    def fraction(self) -> float:
        return self.windows_done / self.windows_total if self.windows_total else 1.0


def run_windows(runner: Runner, windows: list[Window], pad_token_id: int, settings: EngineSettings,
                batch_state: BatchState, *, should_stop: StopCheck | None = None,
                on_window_progress: Callable[[WindowProgress], None] | None = None,
                on_batch: Callable[[list[Window], list], None] | None = None
                ) -> tuple[list, int, ForwardSample]:
    """`iter_windows` read to its end: the logits, the batch size used and what the passes measured."""
    return drain(iter_windows(runner, windows, pad_token_id, settings, batch_state, should_stop=should_stop,
                              on_window_progress=on_window_progress, on_batch=on_batch))


def drain(steps: Generator[Any, None, T], on_step: Callable[[Any], None] | None = None) -> T:
    """What a generator of steps (`iter_windows`, and the reads and answers built on it) returns, each step it
    yields told to `on_step` (or passed over): for callers that hear a read through callbacks, or not at all. Closed
    however this ends, so that a listener's error leaves the lane, the count of asks and the memory watch at once."""
    try:
        while True:
            try:
                step = next(steps)
            except StopIteration as done:
                return done.value
            if on_step is not None:
                on_step(step)
    finally:
        steps.close()


def iter_windows(runner: Runner, windows: list[Window], pad_token_id: int, settings: EngineSettings,
                 batch_state: BatchState, *, should_stop: StopCheck | None = None,
                 on_window_progress: Callable[[WindowProgress], None] | None = None,
                 on_batch: Callable[[list[Window], list], None] | None = None
                 ) -> Generator[None, None, tuple[list, int, ForwardSample]]:
    """Start/end logits of every window, in batches; on out-of-memory halve the batch and go on. Yields after each
    batch, once it was heard (`on_batch`, then `on_window_progress`): the seconds spent there, until the next step
    is asked for, are neither forward time nor anybody's turn. Returns the logits, the batch size used and what the
    passes measured. Closed at a yield, it reads no further.

    Finished windows are kept (never recomputed); the size that worked stays in `batch_state` for the next request,
    with the forward time measured here. Without adaptive batching, or at batch size 1, out-of-memory is a clear
    OutOfMemoryError. `should_stop` is checked before every batch (Cancelled); `on_window_progress` reports before
    the first batch and after every one; `on_batch(windows, logits)` hears each batch's windows and their logits as
    they come, before that batch's progress report (its seconds are not counted as forward time). With
    `settings.max_request_s` and no throughput measured before, the first batch measures it and the rest of the
    request is refused (RequestTooLongError) if it would go over."""
    logits: list[tuple[np.ndarray, np.ndarray]] = []
    size = max(1, batch_state.size if settings.adaptive_batching else settings.batch_size)
    stop = stop_check(should_stop)
    total_tokens = sum(len(w.input_ids) for w in windows)
    rate_before = batch_state.tokens_per_s
    done = done_tokens = 0
    began = time.perf_counter()
    waited_before = getattr(runner, "waited_s", 0.0)
    heard_s = 0.0  # spent in `on_batch`, and away at a yield

    def forward_s() -> float:
        """Seconds since the first batch began, less those spent waiting for turns on a shared model or in
        `on_batch`."""
        return time.perf_counter() - began - (getattr(runner, "waited_s", 0.0) - waited_before) - heard_s

    def report() -> None:
        if on_window_progress is None:
            return
        elapsed = forward_s()
        rate = done_tokens / elapsed if done_tokens and elapsed > 0 else rate_before
        eta = (total_tokens - done_tokens) / rate if rate else None
        on_window_progress(WindowProgress(done, len(windows), elapsed, eta))

    try:
        report()
        while done < len(windows):
            if stop():
                raise Cancelled(f"The request was cancelled after {done:,} of {len(windows):,} windows.",
                                windows_done=done, windows_total=len(windows))
            size = _run_batch(runner, windows, done, size, pad_token_id, settings, batch_state, logits)
            done_tokens += sum(len(w.input_ids) for w in windows[done: len(logits)])
            if on_batch is not None:
                heard_from = time.perf_counter()
                on_batch(windows[done: len(logits)], logits[done:])
                heard_s += time.perf_counter() - heard_from
            done = len(logits)
            report()
            if rate_before is None and done < len(windows):
                rate_before = _check_after_first_batch(settings, windows, done_tokens, total_tokens, forward_s())
            away_from = time.perf_counter()
            yield
            heard_s += time.perf_counter() - away_from
    finally:
        sample = ForwardSample(done_tokens, done, forward_s())
        batch_state.record(sample)
    if settings.adaptive_batching:
        batch_state.size = size
    return logits, size, sample


def _check_after_first_batch(settings: EngineSettings, windows: list[Window], done_tokens: int, total_tokens: int,
                             elapsed_s: float) -> float:
    """With no throughput known before, the first batch's: RequestTooLongError if the whole request would take
    longer than `max_request_s` at that rate."""
    rate = done_tokens / elapsed_s if elapsed_s > 0 else float("inf")
    check_predicted_time(total_tokens / rate, settings, len(windows), total_tokens, rate,
                         after=" (measured on its first batch: no earlier request had measured this model)")
    return rate


def _run_batch(runner: Runner, windows: list[Window], done: int, size: int, pad_token_id: int,
               settings: EngineSettings, batch_state: BatchState, logits: list) -> int:
    """Run the next batch of windows into `logits`, halving the batch on out-of-memory; the size that worked."""
    while True:
        chunk = windows[done: done + size]
        try:
            start, end = runner(collate(chunk, pad_token_id))  # (B, L) each
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            del exc
            gc.collect()
            clear_device_cache()
            if not settings.adaptive_batching or size == 1:
                raise OutOfMemoryError(
                    f"Out of memory at batch size {size} with {settings.max_seq_len}-token windows. "
                    f"Try a profile that offloads or quantizes: {FIT_PROFILES_HINT}.") from None
            size = max(1, size // 2)
            batch_state.size = size
            batch_state.backoffs += 1
            continue
        for row, window in enumerate(chunk):
            n = len(window.input_ids)
            logits.append((start[row, :n].numpy(), end[row, :n].numpy()))
        return size

