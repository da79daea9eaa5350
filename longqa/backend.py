"""The one interface between the page and wherever the model runs: a `Backend` loads a model, plans a request
(before its turn on the model) and answers a plan, with a gate for turns on a shared model, progress and a stop
check; `Session` (the model in this process) and `longqa.serving.ray_replicas.RaySession` (Ray Serve replicas)
implement all of it (`ask_steps` yields the best answer so far as a read goes on; `ask` hears it through a
callback), the second a `Session` whose loader deploys and whose answers come from the replicas. A visitor's
choice of model is a `Selection`, taken whole; the best answer so far while a read goes on, a `Provisional`
(the engine's).

Types only: it holds no model and runs nothing.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Callable, Generator, Protocol, runtime_checkable

import torch
from transformers import PreTrainedTokenizerBase

from longqa.readout import LoadReadout
from longqa_core.answering import Provisional
from longqa_core.batching import BatchState, Runner, WindowProgress
from longqa_core.documents import Document
from longqa_core.limits import EngineSettings, StopCheck
from longqa_core.plan import RequestPlan
from strategies.hardware import Hardware
from strategies.profiles import Profile

Progress = Callable[[float, str], None]


@dataclass(frozen=True)
class Selection:
    """What a visitor asked to load: the model, the profile's name (`auto` stays `auto`: what it became is the
    loaded model's `profile`), and for `custom` the ticked strategies."""

    model: str
    profile: str
    strategies: tuple[str, ...] = ()

    @classmethod
    def of(cls, model: str, profile: str, strategies=()) -> "Selection":
        """What a load of `model` with the profile named `profile` asks for: the ticked strategies count for
        `custom` only."""
        return cls(model, profile, tuple(strategies or ()) if profile == "custom" else ())


class Gate(Protocol):
    """A request's turns on a shared model (the page's lane): a turn per batch where the batches run here
    (`runner`), or one turn for the whole read where they run elsewhere (`whole`); `widen(windows)` before a read
    grows past what the request was admitted for (a guided read falling back to every window), which may wait for
    the larger read's place."""

    def runner(self, runner: Runner) -> Runner: ...

    def whole(self) -> AbstractContextManager: ...

    def widen(self, windows: int) -> None: ...


class Loaded(Protocol):
    """The one record of what is loaded (`longqa.loader.LoadedModel` here, `RemoteModel` for Ray's replicas): the
    model (None where the weights live elsewhere), the profile it became, what was asked for, which load it is, the
    settings, the tokenizer, and the model's one throughput estimate."""

    model: torch.nn.Module | None
    model_ref: str
    profile: Profile
    settings: EngineSettings
    tokenizer: PreTrainedTokenizerBase
    readout: LoadReadout
    hardware: Hardware | None
    batch_state: BatchState
    selection: Selection | None
    generation: int


@runtime_checkable
class Backend(Protocol):
    """Where the model runs: what the page, the CLI and the comparison use of it, and nothing else. `lock` is held
    by loads, and is re-entrant (the page holds it to load only when nothing is loaded yet, and loads inside); a
    load waits for the requests in progress, and requests wait for a load."""

    hardware: Hardware | None
    lock: AbstractContextManager

    @property
    def loaded(self) -> Loaded | None: ...

    @property
    def model_ref(self) -> str | None: ...

    @property
    def profile_name(self) -> str | None: ...

    @property
    def selection(self) -> Selection | None:
        """What the loaded model was asked for (None: nothing loaded)."""

    @property
    def generation(self) -> int:
        """Counts the loads: a visitor can tell that someone else switched the model."""

    @property
    def capacity(self) -> int:
        """How many requests it answers side by side."""

    def load(self, model_ref: str, profile, *, on_progress: Progress | None = None, fallback_to_demo: bool = False,
             force: bool = False, strategies=()): ...

    def plan(self, documents: list[Document], question: str, reading: str = ..., *,
             should_stop: StopCheck | None = None, visitor: str | None = None, **overrides) -> RequestPlan: ...

    def ask(self, plan: RequestPlan, *, extract_s: float = 0.0, gate: Gate | None = None,
            should_stop: StopCheck | None = None,
            on_window_progress: Callable[[WindowProgress], None] | None = None,
            on_candidate: Callable[[Provisional], None] | None = None): ...

    def ask_steps(self, plan: RequestPlan, *, extract_s: float = 0.0, gate: Gate | None = None,
                  should_stop: StopCheck | None = None,
                  on_window_progress: Callable[[WindowProgress], None] | None = None,
                  best_so_far: bool = True) -> Generator[Provisional, None, object]:
        """`ask` as a generator: each best answer so far as the read goes on, then the readout it returns; closed
        at a yield, the read goes no further."""

    def learn(self, readout) -> None: ...

    def training_step(self, window_tokens: int): ...

    def runnable_profile(self, name: str, strategies=()) -> Profile: ...

    def auto_profile(self, model_ref: str) -> Profile | None: ...

    def close(self) -> None: ...
