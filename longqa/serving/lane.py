"""The model lane of a shared deployment: first come, first served, a bounded wait, and a bound per visitor, so
that one visitor cannot hold everybody else's turn. One turn at a time by default; with `capacity` N (a model
served by several replicas), up to N shared turns run side by side, and an exclusive turn (a reload) waits for all of
them and holds the model alone.

It orders and bounds who may use the model next; it knows nothing of models, documents or gradio (the page says who
a visitor is and how to tell that a request was abandoned).
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterator

from longqa_core.errors import Cancelled, InputError

WAIT_POLL_S = 0.25  # how often a waiting request checks whether it was abandoned


class LaneBusyError(InputError):
    """Refused at the door: this visitor already has its share of the lane, or the whole wait is full."""


@dataclass(eq=False)  # each ticket is its own place in line, even two of one visitor
class Ticket:
    visitor: str | None
    exclusive: bool = False


class ModelLane:
    """FIFO access to the model. `max_waiting` bounds everyone's wait together, `per_visitor` how many requests one
    visitor may have in the lane at once (the ones running included), `capacity` how many shared turns may run at
    once."""

    def __init__(self, max_waiting: int = 64, per_visitor: int = 3, capacity: int = 1):
        self.max_waiting = max_waiting
        self.per_visitor = per_visitor
        self.capacity = capacity
        self._condition = threading.Condition()
        self._waiting: deque[Ticket] = deque()
        self._holders: list[Ticket] = []

    def waiting(self) -> int:
        with self._condition:
            return len(self._waiting)

    def is_busy(self) -> bool:
        with self._condition:
            return bool(self._holders)

    def _may_enter(self, ticket: Ticket) -> bool:
        """The first in line enters when the model has room for it: alone for an exclusive turn, beside fewer than
        `capacity` shared turns (and no exclusive one) for a shared turn."""
        if self._waiting[0] is not ticket:
            return False
        if ticket.exclusive:
            return not self._holders
        return len(self._holders) < self.capacity and not any(h.exclusive for h in self._holders)

    @contextlib.contextmanager
    def turn(self, visitor: str | None = None, *, should_stop: Callable[[], bool] | None = None,
             on_wait: Callable[[int], None] | None = None, exclusive: bool = False) -> Iterator[None]:
        """Wait for this request's turn (LaneBusyError at once when over a bound; Cancelled when `should_stop`
        says so while waiting), hold the model for the `with` body (alone when `exclusive`), then hand it on.
        `on_wait(ahead)` hears how many requests are ahead whenever that changes."""
        ticket = Ticket(visitor, exclusive)
        with self._condition:
            self._admit(ticket)
            self._waiting.append(ticket)
            try:
                ahead = None
                while not self._may_enter(ticket):
                    if should_stop is not None and should_stop():
                        raise Cancelled("The request was stopped while it waited for the model.")
                    now_ahead = self._waiting.index(ticket) + len(self._holders)
                    if on_wait is not None and now_ahead != ahead:
                        on_wait(now_ahead)
                    ahead = now_ahead
                    self._condition.wait(WAIT_POLL_S)
            except BaseException:
                self._waiting.remove(ticket)
                self._condition.notify_all()
                raise
            self._waiting.popleft()
            self._holders.append(ticket)
            self._condition.notify_all()  # the next in line may fit beside this one
        try:
            yield
        finally:
            with self._condition:
                self._holders.remove(ticket)
                self._condition.notify_all()

    def _admit(self, ticket: Ticket) -> None:
        if ticket.visitor is not None:
            mine = sum(t.visitor == ticket.visitor for t in self._waiting)
            running = sum(h.visitor == ticket.visitor for h in self._holders)
            if mine + running >= self.per_visitor:
                raise LaneBusyError(
                    f"You already have a request running{f' and {mine} waiting' if mine else ''}: wait for "
                    f"{'them' if mine else 'it'} to finish (or stop {'them' if mine else 'it'}) before sending "
                    "another.")
        if len(self._waiting) >= self.max_waiting:
            raise LaneBusyError(f"The queue is full ({len(self._waiting)} requests are waiting for the model). "
                                "Please try again in a minute.")
