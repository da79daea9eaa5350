"""Comparing profiles: the same question over the same documents under each chosen profile in turn, each loaded
afresh through the backend (`longqa.backend.Backend`: the embedded `Session` or Ray Serve's `RaySession`), as one
table: time, peak memory, the request's own peak above the loaded model's baseline, windows a second, whether the
best answer is the first profile's, and ratios to the first profile. What was loaded before is loaded back after.

Composition: it drives a backend's loads, and each read through the request function (`longqa.request`), and
measures nothing itself (the figures are the readouts').
It formats nothing for people; JSON only in `Comparison.to_json`, for the CLI's --json and the page's JSON panel.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from longqa.backend import Backend, Progress, Selection
from longqa.readout import Readout
from longqa.request import run_request
from longqa.session import ReadRequest
from longqa_core.documents import Document
from longqa_core.errors import Cancelled, InputError
from longqa_core.limits import StopCheck, stop_check
from longqa_core.plan import check_mode
from longqa_core.reading import DEFAULT_READING

MAX_PROFILES = 8  # each is a load and a read: a comparison holds the model that long


@dataclass(frozen=True)
class ProfileChoice:
    """A profile to compare: its name and, for `custom`, the strategies ticked."""

    name: str
    strategies: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """"cpu", or "custom (int8_dynamic, fast_attention)"."""
        return f"{self.name} ({', '.join(self.strategies)})" if self.name == "custom" else self.name


@dataclass
class ComparedRun:
    """One profile's row: what loading it took, and the readout of the question asked under it."""

    choice: ProfileChoice
    load_s: float
    readout: Readout

    @property
    def profile(self) -> str | None:
        """The profile that answered (`auto` resolved to the one it picked)."""
        return self.readout.profile

    @property
    def time_s(self) -> float:
        return self.readout.result.latency_s["total"]

    @property
    def peak_bytes(self) -> int | None:
        """The process's peak (GPUs summed, else host RSS), what ran before included."""
        return self.readout.request_memory.peak_bytes

    @property
    def request_peak_bytes(self) -> int | None:
        """The request's own peak above the loaded model's baseline."""
        return self.readout.request_memory.request_peak_bytes

    @property
    def windows_per_s(self) -> float | None:
        """Windows read a second of forward passes (tokenizing, ranking and decoding not counted)."""
        forward = self.readout.result.forward
        return forward.windows / forward.seconds if forward.seconds > 0 else None

    @property
    def best(self) -> tuple | None:
        """The best answer as (document, start, end, text), or None when the verdict is "not found" or nothing was
        found: two profiles agree when these are equal."""
        result = self.readout.result
        if not result.answers or result.answers[0].document is None or result.found is False:
            return None
        best = result.answers[0]
        return best.document_index, best.start_char, best.end_char, best.text

    @property
    def answer_text(self) -> str | None:
        return self.best[3] if self.best is not None else None


@dataclass
class Comparison:
    """Every profile's run of one question, in the order chosen; ratios are to the first profile's run."""

    model: str
    question: str
    documents: list[str]
    runs: list[ComparedRun] = field(default_factory=list)

    @property
    def first(self) -> ComparedRun | None:
        return self.runs[0] if self.runs else None

    def same_answer(self, run: ComparedRun) -> bool:
        """Whether `run`'s best answer is the first profile's (same text at the same place, or both not found)."""
        return run.best == self.first.best

    def ratios(self, run: ComparedRun) -> dict[str, float | None]:
        """`run`'s figures divided by the first profile's: time, process peak, request peak, windows a second."""
        first = self.first
        return {"time": ratio(run.time_s, first.time_s), "peak": ratio(run.peak_bytes, first.peak_bytes),
                "request_peak": ratio(run.request_peak_bytes, first.request_peak_bytes),
                "windows_per_s": ratio(run.windows_per_s, first.windows_per_s)}

    def to_json(self) -> dict:
        return {"model": self.model, "question": self.question, "documents": list(self.documents),
                "runs": [{"profile": run.choice.name, "strategies": list(run.choice.strategies),
                          "answered_as": run.profile, "load_s": run.load_s, "time_s": run.time_s,
                          "peak_bytes": run.peak_bytes, "request_peak_bytes": run.request_peak_bytes,
                          "baseline_bytes": run.readout.request_memory.baseline_bytes,
                          "memory_measured_as": run.readout.request_memory.measured_as,
                          "windows": run.readout.result.windows, "windows_per_s": run.windows_per_s,
                          "answer": run.answer_text, "same_answer": self.same_answer(run),
                          "ratios": self.ratios(run), "readout": run.readout.to_json()} for run in self.runs]}


def ratio(value: float | None, first: float | None) -> float | None:
    """`value / first`, or None where either is unknown or the first is zero."""
    if value is None or not first:
        return None
    return value / first


def choices_from(names: list[str], strategies=()) -> list[ProfileChoice]:
    """The profiles to compare, in the order given, each once; `custom` takes the ticked `strategies`. InputError for
    none or too many."""
    chosen = list(dict.fromkeys(name.strip() for name in names if name and name.strip()))
    if not chosen:
        raise InputError("Choose at least one profile to compare.")
    if len(chosen) > MAX_PROFILES:
        raise InputError(f"Compare at most {MAX_PROFILES} profiles at a time ({len(chosen)} were chosen).")
    return [ProfileChoice(name, tuple(strategies or ()) if name == "custom" else ()) for name in chosen]


def compare_profiles(backend: Backend, model_ref: str, choices: list[ProfileChoice], documents: list[Document],
                     question: str, reading: str = DEFAULT_READING, *, extract_s: float = 0.0,
                     should_stop: StopCheck | None = None, on_progress: Progress | None = None,
                     fallback_to_demo: bool = False, **overrides) -> Comparison:
    """Ask `question` over `documents` with `model_ref` under each profile of `choices` in turn, loading each afresh
    (also one loaded now: every run starts from a fresh load), then load back what was loaded before.

    Every profile is checked to run here, and the reading mode to be one, before anything loads (ProfileError naming
    the profile that cannot; InputError);
    `should_stop` ends the comparison between steps and inside a read (Cancelled); `on_progress(fraction,
    message)` hears each step; `overrides` are the request's engine settings (top_k, no_answer_below, ...)."""
    profiles = [backend.runnable_profile(choice.name, choice.strategies) for choice in choices]
    check_mode(reading)
    progress = on_progress or (lambda fraction, message: None)
    is_stopped = stop_check(should_stop)
    comparison = Comparison(model_ref, question, [d.name for d in documents])
    read = ReadRequest(documents, question, extract_s)
    previous = loaded_selection(backend)
    steps = len(choices)
    try:
        for index, (choice, profile) in enumerate(zip(choices, profiles)):
            if is_stopped():
                raise Cancelled(f"Stopped after {index} of {steps} profiles.")
            progress(index / steps, f"Loading {model_ref} with {choice.label} ({index + 1} of {steps})")
            load = backend.load(model_ref, profile, force=True, fallback_to_demo=fallback_to_demo,
                                strategies=choice.strategies)
            progress((index + 0.2) / steps, f"Asking under {choice.label} ({index + 1} of {steps})")
            readout = run_request(backend, lambda: read, reading, should_stop=should_stop,
                                  on_window_progress=window_progress(progress, index, steps, choice),
                                  **overrides).readout
            comparison.runs.append(ComparedRun(choice, load.load_time_s, readout))
    finally:
        restore(backend, previous, progress)
    progress(1.0, "Compared")
    return comparison


def window_progress(progress: Progress, index: int, steps: int, choice: ProfileChoice) -> Callable:
    """A read's window progress as the comparison's: the read fills the last 80 % of its profile's share."""
    def on_window_progress(state) -> None:
        done = state.windows_done / state.windows_total if state.windows_total else 1.0
        progress((index + 0.2 + 0.8 * done) / steps,
                 f"{choice.label}: {state.windows_done:,} of {state.windows_total:,} windows")
    return on_window_progress


def loaded_selection(backend: Backend) -> Selection | None:
    """What is loaded, as a load would ask for it: the model that did load, the profile asked for, and `custom`'s
    strategies; None when nothing is."""
    selection = backend.selection
    if selection is None:
        return None
    return replace(selection, model=backend.model_ref)


def restore(backend: Backend, previous: Selection | None, progress: Progress) -> None:
    """Load back what was loaded before the comparison (model, profile, `custom`'s strategies); nothing when nothing
    was loaded, or when it is what is loaded now."""
    if previous is None or loaded_selection(backend) == previous:
        return
    progress(1.0, f"Loading back {previous.model} with {previous.profile}")
    backend.load(previous.model, backend.runnable_profile(previous.profile, previous.strategies),
                 strategies=previous.strategies)
