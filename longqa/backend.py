"""The one interface between the page and wherever the model runs: a `Backend` loads a model, plans a request
(before its turn on the model) and answers a plan, with a gate for turns on a shared model, progress and a stop
check; `Session` (the model in this process) and `longqa.serving.ray_replicas.RaySession` (Ray Serve replicas)
implement all of it.

Types only: it holds no model and runs nothing.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Callable, Protocol, runtime_checkable

from longqa_core.answering import Provisional
from longqa_core.batching import Runner, WindowProgress
from longqa_core.documents import Document
from longqa_core.limits import StopCheck
from longqa_core.plan import RequestPlan

Progress = Callable[[float, str], None]


class Gate(Protocol):
    """A request's turns on a shared model (the page's lane): a turn per batch where the batches run here
    (`runner`), or one turn for the whole read where they run elsewhere (`whole`); `widen(windows)` before a read
    grows past what the request was admitted for (a guided read falling back to every window), which may wait for
    the larger read's place."""

    def runner(self, runner: Runner) -> Runner: ...

    def whole(self) -> AbstractContextManager: ...

    def widen(self, windows: int) -> None: ...


@runtime_checkable
class Backend(Protocol):
    """Where the model runs. `loaded` is the one record of what is loaded (model, profile, what was asked for,
    which load it is, settings, tokenizer, and the model's one throughput estimate in `batch_state`)."""

    hardware: object
    loaded: object

    @property
    def capacity(self) -> int:
        """How many requests it answers side by side."""

    def load(self, model_ref: str, profile, *, on_progress: Progress | None = None, fallback_to_demo: bool = False,
             force: bool = False, strategies=()): ...

    def plan(self, documents: list[Document], question: str, reading: str = ..., *,
             should_stop: StopCheck | None = None, **overrides) -> RequestPlan: ...

    def ask(self, plan: RequestPlan, *, extract_s: float = 0.0, gate: Gate | None = None,
            should_stop: StopCheck | None = None,
            on_window_progress: Callable[[WindowProgress], None] | None = None,
            on_candidate: Callable[[Provisional], None] | None = None): ...

    def learn(self, readout) -> None: ...

    def training_step(self, window_tokens: int): ...

    def runnable_profile(self, name: str, strategies=()): ...

    def auto_profile(self, model_ref: str): ...

    def close(self) -> None: ...
