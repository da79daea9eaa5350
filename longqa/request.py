"""One request, from its documents to its answer: read at the lane's door, the model loaded where none is, planned
once, its turns on the model taken, answered with its stop check and its listener for the best answer so far. What
the page's Ask, the CLI's `ask` and a comparison's reads all run, on any backend (`longqa.backend.Backend`: the
embedded `Session` or Ray Serve's `RaySession`).

Not what each caller checks or shows: the page cleans its inputs and formats the answer, the CLI prints it. Knows
nothing of gradio: the page hands in how to read its uploads, how to load, and where an answer runs (a ZeroGPU
worker).
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Callable, Generator, Iterator, Protocol

from longqa.backend import Backend, Gate
from longqa.readout import QueueReadout, Readout
from longqa.session import ReadRequest
from longqa_core.answering import Provisional
from longqa_core.batching import WindowProgress, drain
from longqa_core.limits import StopCheck, stop_check
from longqa_core.plan import RequestPlan
from longqa_core.reading import DEFAULT_READING
from longqa_core.telemetry import trim_heap

# The steps a request tells `on_step` of, in order: its documents being read, its plan being made (ranking or not),
# and its answer begun (with its plan).
READING, PLANNING, ANSWERING = "reading", "planning", "answering"

Reader = Callable[[], ReadRequest]
# Where a planned request is answered when not by `backend.ask_steps` here (a ZeroGPU worker): (plan, extract_s,
# gate, should_stop) to its steps: each best answer so far, then the readout it returns.
Answerer = Callable[[RequestPlan, float, "Gate | None", "StopCheck | None"], Generator[Provisional, None, Readout]]


class Place(Protocol):
    """A request's place in line (the lane's `Ticket`): what its wait was, for the readout."""

    def queue_readout(self) -> QueueReadout: ...


class Turns(Protocol):
    """A request's turns on a shared model (a deployment's lane: `longqa.serving.lane.LaneTurns`): its place at the
    door, taken before anything is read; the wait for the reloads that came before it; and from its plan on, its
    place among the requests in progress with its gate (a turn per batch; None where it holds one turn throughout).
    A caller with the model to itself (the CLI) has none."""

    def door(self) -> AbstractContextManager[Any]: ...

    def after_exclusive(self, place, should_stop: StopCheck | None) -> None: ...

    def turns(self, place, windows: int,
              should_stop: StopCheck | None) -> AbstractContextManager[tuple[Place, Gate | None]]: ...


@dataclass
class Answered:
    """How a request ended: what was read at the door (the documents, the question as checked, the files left out),
    the plan it ran by, and its readout (its wait in the lane in `readout.queue`, where it had turns)."""

    read: ReadRequest
    plan: RequestPlan
    readout: Readout


@contextlib.contextmanager
def at_door(read: Reader, turns: Turns | None = None, should_stop: StopCheck | None = None, *,
            planned_here: bool = True,
            on_step: Callable[[str, RequestPlan | None], None] | None = None) -> Iterator[tuple[ReadRequest, Any]]:
    """A request's place at the lane's door (counted toward its visitor's share and the queue: LaneBusyError past
    either, before anything is read) and its documents read there, held while the body plans: yields what was read
    and the place (None without a lane), once the reloads that came before it have ended where it is
    `planned_here` (a plan made while one unloads the model would find none)."""
    with turns.door() if turns is not None else contextlib.nullcontext() as place:
        if on_step is not None:
            on_step(READING, None)
        documents = read()
        if turns is not None and planned_here:
            turns.after_exclusive(place, should_stop)
        yield documents, place


def plan_read(backend: Backend, read: ReadRequest, reading: str = DEFAULT_READING, *,
              should_stop: StopCheck | None = None, visitor: str | None = None, **settings) -> RequestPlan:
    """The one plan of a request read at the door (`Backend.plan`: every limit checked, the ranking run, the windows
    to read estimated): what the lane admits it by, a preview counts, and the answer reads. `visitor` names whose
    ranking indexes it may reuse; `settings` replace the loaded model's engine settings."""
    return backend.plan(read.documents, read.question, reading, should_stop=should_stop, visitor=visitor, **settings)


def run_request(backend: Backend, read: Reader, reading: str = DEFAULT_READING, *,
                on_candidate: Callable[[Provisional], None] | None = None, **options) -> Answered:
    """`request_steps` read to its end (`options` as there), each best answer so far told to `on_candidate` (none
    decoded without one)."""
    return drain(request_steps(backend, read, reading, best_so_far=on_candidate is not None, **options),
                 on_candidate)


def request_steps(backend: Backend, read: Reader, reading: str = DEFAULT_READING, *, turns: Turns | None = None,
                  load: Callable[[], None] | None = None, should_stop: StopCheck | None = None,
                  stop_from_turn: StopCheck | None = None, visitor: str | None = None,
                  answer: Answerer | None = None, on_step: Callable[[str, RequestPlan | None], None] | None = None,
                  on_window_progress: Callable[[WindowProgress], None] | None = None, best_so_far: bool = True,
                  **settings) -> Generator[Provisional, None, Answered]:
    """One request's steps in order, as a generator: its documents read at the door (`read`, with its place in `turns`
    where it has some), the model loaded where none is (`load`), the plan made once (`plan_read`), its turns on the
    model taken (`Turns.turns`: a turn per batch through its gate, or one throughout), and the plan answered
    (`answer`, else `backend.ask_steps` here) with `on_window_progress` hearing each batch. It yields the best
    answer so far after each batch that has one (none with `best_so_far` false, where the answer runs here) and
    returns how the request ended; closed at a yield, the read goes no further and its turns end.

    `should_stop` ends it at any step (Cancelled); `stop_from_turn` too, from its turn on (a Stop that counts for
    the answer, not for the reading). `on_step(step, plan)` hears each step as it begins (`READING`, `PLANNING`,
    `ANSWERING` with the plan). `settings` are the request's engine settings (top_k, max_total_tokens, ...)."""
    answer_stop = either(should_stop, stop_from_turn)
    try:
        with at_door(read, turns, should_stop, on_step=on_step) as (documents, place):
            if backend.loaded is None and load is not None:
                load()
            if on_step is not None:
                on_step(PLANNING, None)
            plan = plan_read(backend, documents, reading, should_stop=should_stop, visitor=visitor, **settings)
            with (turns.turns(place, plan.expected_windows, answer_stop) if turns is not None
                  else contextlib.nullcontext((None, None))) as (ticket, gate):
                if on_step is not None:
                    on_step(ANSWERING, plan)
                if answer is not None:
                    readout = yield from answer(plan, documents.extract_s, gate, answer_stop)
                else:
                    readout = yield from backend.ask_steps(
                        plan, extract_s=documents.extract_s, gate=gate, should_stop=answer_stop,
                        on_window_progress=on_window_progress, best_so_far=best_so_far)
    except BaseException:  # ended before its answer did (an answer trims its own, `Session.ask_steps`)
        trim_heap()  # what reading and planning freed goes back to the system
        raise
    if ticket is not None:
        readout.queue = ticket.queue_readout()
    return Answered(documents, plan, readout)


def either(first: StopCheck | None, second: StopCheck | None) -> StopCheck | None:
    """A stop check that says stop when either does (None where neither is given)."""
    if first is None or second is None:
        return first or second
    first, second = stop_check(first), stop_check(second)
    return lambda: bool(first()) or bool(second())
