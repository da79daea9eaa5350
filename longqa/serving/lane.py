"""The model lane of a shared deployment: requests take turns on the model between batches of windows, so a small
request waits about one batch per other request in progress, not for their whole reads; bounds per visitor, on the
requests in progress and on the work queued, so that no visitor (nor a crowd of fresh clients) can hold everybody
else's turn. A request counts from the door, while it is read and planned; one that grows (a guided read falling
back to every window) is admitted again as what it becomes before it reads more. An exclusive turn (a reload, a
comparison, a training step) waits for every request that came before it and holds the model alone; a visitor may
have one in line at a time, and the lane one comparison and one training step.

It orders and bounds who may use the model next, and hands a request its gate (`request_turn`: a turn per batch);
it knows nothing of models, documents or gradio (the page says who a visitor is, how much work a request predicts
and how to tell that it was abandoned).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

from longqa.readout import QueueReadout
from longqa_core.errors import InputError
from longqa_core.waiting import wait_until

WAIT_POLL_S = 0.25  # how often a waiting request checks whether it was abandoned
MAX_ACTIVE = 2  # requests larger than a few batches that hold their tokenized windows at once (memory)
SMALL_WINDOWS = 8  # a request of at most this many windows is small: admitted and activated whatever waits
MAX_QUEUED_WINDOWS = 4096  # the windows of work the lane accepts in all before refusing new large requests
ORDERS = ("round_robin", "shortest_first")  # how the next batch is chosen among requests in progress


class LaneBusyError(InputError):
    """Refused at the door: this visitor already has its share of the lane, or the whole wait is full."""


@dataclass(eq=False)  # each ticket is its own place in line, even two of one visitor
class Ticket:
    visitors: tuple[str, ...]  # every key the visitor is known by (its gradio session, its address)
    exclusive: bool = False
    windows: int = 0  # predicted windows of work (0: unknown)
    done: int = 0  # windows run so far
    active: bool = False  # in progress: may hold its tokenized windows and take batch turns
    holding: bool = False  # runs on the model now
    ready: bool = False  # waits for its next batch turn
    served: int = 0  # when it last had a turn (round robin serves the longest unserved first)
    arrived_s: float = field(default_factory=time.monotonic)
    waited_s: float = 0.0  # for activation, for every batch turn and for widening, together
    ahead_at_start: int = 0  # requests in the lane when it arrived
    planning: bool = False  # at the door: its documents are being read and planned, its windows not known yet
    only_one: str | None = None  # a kind of exclusive turn the lane takes one of at a time (a training step)
    started_after_s: float = 0.0  # waited before it was in progress (its place among large requests)
    widened_after_s: float | None = None  # waited to become large again before a wider read (None: never widened)

    @property
    def remaining(self) -> int:
        return max(0, self.windows - self.done)

    def queue_readout(self) -> QueueReadout:
        """What the readout says about this request's wait: seconds waited and how many were ahead."""
        return QueueReadout(self.waited_s, self.ahead_at_start, self.started_after_s,
                            max(0.0, self.waited_s - self.started_after_s - (self.widened_after_s or 0.0)),
                            self.widened_after_s)


class ModelLane:
    """Turns on the model. `max_waiting` bounds the requests waiting, `per_visitor` how many requests one visitor
    (by any of its keys) may have in the lane at once, `capacity` how many batches may run at once, `max_active`
    how many large requests are in progress at once (the rest wait without tokenized windows), `max_queued_windows`
    the predicted work of every request together (small requests are never refused by it), `order` which request
    in progress gets the next batch."""

    def __init__(self, max_waiting: int = 64, per_visitor: int = 3, capacity: int = 1, *,
                 max_active: int = MAX_ACTIVE, small_windows: int = SMALL_WINDOWS,
                 max_queued_windows: int | None = MAX_QUEUED_WINDOWS, order: str = "round_robin",
                 seconds_for_windows: Callable[[int], float | None] = lambda windows: None):
        if order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)}, got {order!r}")
        self.max_waiting = max_waiting
        self.per_visitor = per_visitor
        self.capacity = capacity
        self.max_active = max_active
        self.small_windows = small_windows
        self.max_queued_windows = max_queued_windows
        self.order = order
        # forward seconds so many windows take on the model now (its owner measures them; None before), for retry hints
        self.seconds_for_windows = seconds_for_windows
        self._condition = threading.Condition()
        self._tickets: list[Ticket] = []  # in arrival order
        self._turns = itertools.count(1)

    # ---------------------------------------------------------------------------------------------- questions
    def waiting(self) -> int:
        """Requests in the lane that do not run on the model now."""
        with self._condition:
            return sum(not t.holding for t in self._tickets)

    def is_busy(self) -> bool:
        with self._condition:
            return any(t.holding for t in self._tickets)

    def is_reloading(self) -> bool:
        """Whether an exclusive turn (a reload, a comparison, a training step) is in the lane: what is loaded may
        change until it ends."""
        with self._condition:
            return any(t.exclusive for t in self._tickets)

    def is_small(self, ticket: Ticket) -> bool:
        return not ticket.exclusive and 0 < ticket.windows <= self.small_windows

    # ---------------------------------------------------------------------------------------------- turns
    @contextlib.contextmanager
    def door(self, visitors=None, *, after_exclusive: bool = False, should_stop: Callable[[], bool] | None = None,
             on_wait: Callable[[int], None] | None = None) -> Iterator[Ticket]:
        """A request's place from the moment it arrives, while its documents are read and planned (its windows not
        known yet): LaneBusyError at once when the visitor already has its share or the queue is full, so reading,
        indexing and planning count toward both; `request(..., ticket=place)` then takes it on with its windows.
        An exclusive turn that comes later waits for it. `after_exclusive`: it first waits (Cancelled when
        `should_stop` says so) for the exclusive turns that came before it, as a page visit does, so that what it
        shows is what they loaded."""
        ticket = Ticket(_keys(visitors), planning=True)
        with self._condition:
            self._admit_visitor(ticket)
            ticket.ahead_at_start = len(self._tickets)
            self._tickets.append(ticket)
        try:
            if after_exclusive:
                self.after_exclusive(ticket, should_stop, on_wait)
            yield ticket
        finally:
            with self._condition:
                self._leave(ticket)

    def after_exclusive(self, ticket: Ticket, should_stop: Callable[[], bool] | None = None,
                        on_wait: Callable[[int], None] | None = None) -> None:
        """Waits (Cancelled when `should_stop` says so) until no exclusive turn that came before `ticket` is in
        line: what a request plans or shows at the door is then what those reloads loaded, and reloads that come
        later wait for it."""
        with self._condition:
            self._wait(ticket, self._after_exclusive, should_stop, on_wait,
                       "The request was stopped while it waited for a reload.")

    @contextlib.contextmanager
    def request(self, visitors=None, *, windows: int = 0, should_stop: Callable[[], bool] | None = None,
                on_wait: Callable[[int], None] | None = None, ticket: Ticket | None = None) -> Iterator[Ticket]:
        """A request in the lane, from the door (or from `ticket`, its place taken at the `door`) to its last
        batch: LaneBusyError at once when over a bound, then a wait (Cancelled when `should_stop` says so) until it
        may be in progress; the body takes its batch turns with `batch(ticket)`. `on_wait(ahead)` hears how many
        requests are ahead whenever that changes."""
        with self._condition:
            if ticket is None:
                ticket = Ticket(_keys(visitors), windows=max(0, int(windows)))
                ticket.served = next(self._turns)
                self._join(ticket, self._may_activate, should_stop, on_wait)
            else:
                ticket.windows, ticket.served = max(0, int(windows)), next(self._turns)
                try:
                    self._admit_work(ticket)
                    ticket.planning = False
                    self._wait(ticket, self._may_activate, should_stop, on_wait,
                               "The request was stopped while it waited for the model.")
                except BaseException:
                    self._leave(ticket)
                    raise
            ticket.active = True
            ticket.started_after_s = ticket.waited_s
        try:
            yield ticket
        finally:
            with self._condition:
                self._leave(ticket)

    @contextlib.contextmanager
    def batch(self, ticket: Ticket, rows: int = 1, should_stop: Callable[[], bool] | None = None,
              on_wait: Callable[[int], None] | None = None) -> Iterator[None]:
        """One batch turn of a request in progress: waits until the lane's order picks it, runs the body on the
        model, then counts `rows` windows done and hands the model on."""
        with self._condition:
            ticket.ready = True
            try:
                self._wait(ticket, self._may_run_batch, should_stop, on_wait,
                           "The request was stopped while it waited for its next batch.")
            finally:
                ticket.ready = False
            ticket.holding = True
        try:
            yield
        finally:
            with self._condition:
                ticket.holding = False
                ticket.done += rows
                ticket.served = next(self._turns)
                self._condition.notify_all()

    def widen(self, ticket: Ticket, windows: int, should_stop: Callable[[], bool] | None = None,
              on_wait: Callable[[int], None] | None = None) -> None:
        """A request in progress is about to read `windows` more than it has read (a guided read falling back to
        the full read): it is admitted again as what it now is, keeping its place in arrival order. Grown past a
        small request, it leaves progress and waits (Cancelled when `should_stop` says so) for a large request's
        slot, as a request of that size would have from the start; the wait is counted in `widened_after_s`."""
        with self._condition:
            was_small = self.is_small(ticket)
            ticket.windows = ticket.done + max(0, int(windows))
            began = ticket.waited_s
            try:
                if was_small and not self.is_small(ticket):
                    ticket.active = False
                    self._condition.notify_all()
                    self._wait(ticket, self._may_activate, should_stop, on_wait,
                               "The request was stopped while it waited to read the whole text.")
                    ticket.active = True
            finally:
                ticket.widened_after_s = (ticket.widened_after_s or 0.0) + ticket.waited_s - began

    @contextlib.contextmanager
    def turn(self, visitor=None, *, should_stop: Callable[[], bool] | None = None,
             on_wait: Callable[[int], None] | None = None, exclusive: bool = False,
             only_one: str | None = None) -> Iterator[None]:
        """The model for the whole `with` body: alone when `exclusive` (after every request that came before it;
        requests after it wait), else one request holding one batch turn throughout (a read that cannot take
        turns, such as a ZeroGPU worker's). `only_one`: the kind of this exclusive turn (a training step, a
        comparison), of which the lane takes one at a time, whoever asks: another is refused at once, so a crowd of
        them holds the others back by one turn, not by all of theirs."""
        if not exclusive:
            with self.request(visitor, should_stop=should_stop, on_wait=on_wait) as ticket:
                with self.batch(ticket, should_stop=should_stop, on_wait=on_wait):
                    yield
            return
        ticket = Ticket(_keys(visitor), exclusive=True, only_one=only_one)
        with self._condition:
            self._join(ticket, self._may_hold_alone, should_stop, on_wait)
            ticket.active = ticket.holding = True
        try:
            yield
        finally:
            with self._condition:
                self._leave(ticket)

    # ---------------------------------------------------------------------------------------------- rules
    def _after_exclusive(self, ticket: Ticket) -> bool:
        return not any(t.exclusive for t in self._tickets[:self._tickets.index(ticket)])

    def _may_activate(self, ticket: Ticket) -> bool:
        """In progress once no exclusive turn came before it, and (unless small) a slot for large requests is free
        and it is the first large one waiting."""
        if not self._after_exclusive(ticket):
            return False
        if self.is_small(ticket):
            return True
        large = [t for t in self._tickets if not t.exclusive and not t.planning and not self.is_small(t)]
        in_progress = sum(t.active for t in large)
        first_waiting = next(t for t in large if not t.active)
        return in_progress < self.max_active and first_waiting is ticket

    def _may_run_batch(self, ticket: Ticket) -> bool:
        """The model has room (fewer than `capacity` batches, no exclusive turn) and the order picks this one among
        the requests ready for a batch."""
        running = [t for t in self._tickets if t.holding]
        if len(running) >= self.capacity or any(t.exclusive for t in running):
            return False
        ready = sorted((t for t in self._tickets if t.ready and not t.holding), key=self._priority)
        return ticket in ready[: self.capacity - len(running)]

    def _priority(self, ticket: Ticket) -> tuple:
        """Round robin: the request served longest ago first (a new one counts as served when it arrived).
        Shortest first: the least predicted work left (unknown work last), then round robin."""
        if self.order == "shortest_first":
            return (ticket.remaining if ticket.windows else float("inf"), ticket.served)
        return (ticket.served,)

    def _may_hold_alone(self, ticket: Ticket) -> bool:
        return self._tickets[0] is ticket and not any(t.holding for t in self._tickets)

    def _wait(self, ticket: Ticket, may_go: Callable[[Ticket], bool], should_stop, on_wait, stopped: str) -> None:
        if may_go(ticket):  # no wait: as `wait_until` would return at once, without a poll or a report
            self._condition.notify_all()
            return
        began = time.monotonic()
        ahead = None

        def report_and_wait() -> None:
            nonlocal ahead
            now_ahead = self._ahead(ticket)
            if on_wait is not None and now_ahead != ahead:
                on_wait(now_ahead)
            ahead = now_ahead
            self._condition.wait(WAIT_POLL_S)

        try:
            wait_until(lambda _: may_go(ticket), should_stop, stopped, WAIT_POLL_S, between=report_and_wait)
        finally:
            ticket.waited_s += time.monotonic() - began
        self._condition.notify_all()  # the next in line may fit beside this one

    def _ahead(self, ticket: Ticket) -> int:
        """Requests before this one in line, and those running on the model now."""
        position = self._tickets.index(ticket)
        return sum(not t.holding for t in self._tickets[:position]) + sum(t.holding for t in self._tickets)

    def _join(self, ticket: Ticket, may_go: Callable[[Ticket], bool], should_stop, on_wait) -> None:
        """Into the line (LaneBusyError at once when over a bound), then wait until `may_go`; a ticket that stops
        waiting (Cancelled, or anything else) leaves the line. Called with the condition held."""
        self._admit(ticket)
        ticket.ahead_at_start = len(self._tickets)
        self._tickets.append(ticket)
        try:
            self._wait(ticket, may_go, should_stop, on_wait, "The request was stopped while it waited for the model.")
        except BaseException:
            self._leave(ticket)
            raise

    def _leave(self, ticket: Ticket) -> None:
        with contextlib.suppress(ValueError):
            self._tickets.remove(ticket)
        self._condition.notify_all()

    def _queued_windows(self, besides: Ticket | None = None) -> int:
        return sum(t.remaining for t in self._tickets if not t.exclusive and t is not besides)

    def _admit(self, ticket: Ticket) -> None:
        self._admit_visitor(ticket)
        self._admit_work(ticket)

    def _admit_visitor(self, ticket: Ticket) -> None:
        """LaneBusyError when the visitor already has its share (of requests, or its one exclusive turn), or the
        queue is full."""
        for key in ticket.visitors:
            mine = [t for t in self._tickets if key in t.visitors]
            if ticket.exclusive and any(t.exclusive for t in mine):  # checked first: the more useful message
                raise LaneBusyError("You already have a reload or a comparison in line: wait for it to finish (or "
                                    "stop it) before sending another.")
            if len(mine) >= self.per_visitor:
                reading = sum(t.planning for t in mine)  # documents being read and planned, not yet waiting
                waiting = sum(not t.holding and not t.planning for t in mine)
                running = len(mine) - waiting - reading
                if running:
                    what = "a request running" + "".join(f" and {n} {state}" for n, state in
                                                         ((reading, "being read"), (waiting, "waiting")) if n)
                elif not waiting:
                    what = f"{reading} request{'s' if reading != 1 else ''} being read"
                else:
                    n = len(mine)
                    what = f"{n} request{'s' if n != 1 else ''} {'being read or ' if reading else ''}waiting"
                them = "them" if len(mine) > 1 else "it"
                raise LaneBusyError(f"You already have {what}: wait for {them} to finish (or stop {them}) before "
                                    "sending another.")
        if ticket.only_one and any(t.only_one == ticket.only_one for t in self._tickets):
            raise LaneBusyError(f"A {ticket.only_one} is already running or waiting: it holds the model alone, so "
                                f"this deployment takes one at a time. Please try again "
                                f"{retry_hint(self.seconds_for_windows(1))}.")
        if len(self._tickets) - self.capacity >= self.max_waiting:
            raise LaneBusyError(f"The queue is full ({len(self._tickets) - self.capacity} requests are waiting for "
                                "the model). Please try again in a minute.")

    def _admit_work(self, ticket: Ticket) -> None:
        """LaneBusyError when this large request would pass the bound on the work queued."""
        queued = self._queued_windows(besides=ticket)
        if (self.max_queued_windows is not None and not ticket.exclusive and not self.is_small(ticket)
                and queued + ticket.windows > self.max_queued_windows):
            raise LaneBusyError(
                f"The model has about {queued:,} windows of other visitors' work queued, and this request would add "
                f"about {ticket.windows:,} (the bound is {self.max_queued_windows:,}). Please try again "
                f"{retry_hint(self.seconds_for_windows(queued + ticket.windows - self.max_queued_windows))}, or ask "
                "about a shorter text (a request of a few windows is always taken).")


def retry_hint(work_s: float | None) -> str:
    """When to try again: once `work_s` seconds of others' work have run (None: not measured yet)."""
    if not work_s:
        return "in a few minutes"
    seconds = max(10.0, work_s)
    return f"in about {seconds / 60:.0f} minutes" if seconds >= 90 else f"in about {seconds:.0f} s"


def _keys(visitors) -> tuple[str, ...]:
    """A visitor's keys: None (anonymous: no bound per visitor), one key, or several (session and address)."""
    if visitors is None:
        return ()
    if isinstance(visitors, str):
        return (visitors,)
    return tuple(v for v in visitors if v)


class GatedRunner:
    """A model runner that takes a batch turn in the lane before each batch: what the engine calls once per batch,
    so a request's read interleaves with the others' between batches. `waited_s` counts the seconds spent
    waiting for turns (not forward time)."""

    def __init__(self, lane: ModelLane, ticket: Ticket, runner, should_stop: Callable[[], bool] | None = None):
        self.lane, self.ticket, self.runner, self.should_stop = lane, ticket, runner, should_stop
        self.devices = runner.devices

    @property
    def waited_s(self) -> float:
        return self.ticket.waited_s

    def __call__(self, batch):
        with self.lane.batch(self.ticket, rows=int(batch["input_ids"].shape[0]), should_stop=self.should_stop):
            return self.runner(batch)


class LaneGate:
    """A request's turns on the model in the lane (`longqa.backend.Gate`): a turn per batch, or one for a whole read
    that runs elsewhere (Ray Serve replicas)."""

    def __init__(self, lane: ModelLane, ticket: Ticket, should_stop: Callable[[], bool] | None = None):
        self.lane, self.ticket, self.should_stop = lane, ticket, should_stop

    def runner(self, runner) -> GatedRunner:
        return GatedRunner(self.lane, self.ticket, runner, self.should_stop)

    def whole(self):
        return self.lane.batch(self.ticket, should_stop=self.should_stop)

    def widen(self, windows: int) -> None:
        self.lane.widen(self.ticket, windows, self.should_stop)


@contextlib.contextmanager
def request_turn(lane: ModelLane, visitors, should_stop: Callable[[], bool],
                 on_wait: Callable[[int], None] | None = None, *, windows: int = 0, whole: bool = False,
                 place: Ticket | None = None) -> Iterator[tuple[Ticket, LaneGate | None]]:
    """This request's place in the lane, from the door to its last batch: it waits (without tokenized windows)
    until it may be in progress, then takes a turn on the model per batch of windows through its gate (`whole`: one
    turn for the whole body and no gate, for a read that runs where the lane cannot reach, a forked ZeroGPU
    worker). Yields its ticket (for the readout's `queue`) and its gate. `place`: the ticket it took at the lane's
    door before it was planned."""
    with lane.request(visitors, windows=windows, should_stop=should_stop, on_wait=on_wait, ticket=place) as ticket:
        with lane.batch(ticket, should_stop=should_stop, on_wait=on_wait) if whole else contextlib.nullcontext():
            yield ticket, None if whole else LaneGate(lane, ticket, should_stop)


@dataclass(frozen=True)
class LaneTurns:
    """A request's turns in `lane` (`longqa.request.Turns`): counted by its visitor's `visitors` keys at the door,
    `whole` where its read runs where the lane cannot reach (one turn throughout, no gate), `on_wait` hearing how
    many requests are ahead while it waits."""

    lane: ModelLane
    visitors: tuple[str, ...] = ()
    whole: bool = False
    on_wait: Callable[[int], None] | None = None

    def door(self):
        return self.lane.door(self.visitors)

    def after_exclusive(self, place: Ticket, should_stop: Callable[[], bool] | None) -> None:
        self.lane.after_exclusive(place, should_stop, self.on_wait)

    def turns(self, place: Ticket | None, windows: int, should_stop: Callable[[], bool]):
        return request_turn(self.lane, self.visitors, should_stop, self.on_wait, windows=windows, whole=self.whole,
                            place=place)
