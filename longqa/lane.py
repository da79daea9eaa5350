"""The one-at-a-time model lane of a shared deployment: first come, first served, a bounded wait, and a bound per
visitor, so that one visitor cannot hold everybody else's turn.

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


class ModelLane:
    """FIFO access to the model. `max_waiting` bounds everyone's wait together, `per_visitor` how many requests one
    visitor may have in the lane at once (the one running included)."""

    def __init__(self, max_waiting: int = 64, per_visitor: int = 3):
        self.max_waiting = max_waiting
        self.per_visitor = per_visitor
        self._condition = threading.Condition()
        self._waiting: deque[Ticket] = deque()
        self._holder: Ticket | None = None

    def waiting(self) -> int:
        with self._condition:
            return len(self._waiting)

    def is_busy(self) -> bool:
        with self._condition:
            return self._holder is not None

    @contextlib.contextmanager
    def turn(self, visitor: str | None = None, *, should_stop: Callable[[], bool] | None = None,
             on_wait: Callable[[int], None] | None = None) -> Iterator[None]:
        """Wait for this request's turn (LaneBusyError at once when over a bound; Cancelled when `should_stop`
        says so while waiting), hold the model for the `with` body, then hand it to the next in line.
        `on_wait(ahead)` hears how many requests are ahead whenever that changes."""
        ticket = Ticket(visitor)
        with self._condition:
            self._admit(ticket)
            self._waiting.append(ticket)
            try:
                ahead = None
                while self._holder is not None or self._waiting[0] is not ticket:
                    if should_stop is not None and should_stop():
                        raise Cancelled("The request was stopped while it waited for the model.")
                    now_ahead = self._waiting.index(ticket) + (self._holder is not None)
                    if on_wait is not None and now_ahead != ahead:
                        on_wait(now_ahead)
                    ahead = now_ahead
                    self._condition.wait(WAIT_POLL_S)
            except BaseException:
                self._waiting.remove(ticket)
                self._condition.notify_all()
                raise
            self._waiting.popleft()
            self._holder = ticket
        try:
            yield
        finally:
            with self._condition:
                self._holder = None
                self._condition.notify_all()

    def _admit(self, ticket: Ticket) -> None:
        if ticket.visitor is not None:
            mine = sum(t.visitor == ticket.visitor for t in self._waiting)
            running = self._holder is not None and self._holder.visitor == ticket.visitor
            if mine + running >= self.per_visitor:
                raise LaneBusyError(
                    f"You already have a request running{f' and {mine} waiting' if mine else ''}: wait for "
                    f"{'them' if mine else 'it'} to finish (or stop {'them' if mine else 'it'}) before sending "
                    "another.")
        if len(self._waiting) >= self.max_waiting:
            raise LaneBusyError(f"The queue is full ({len(self._waiting)} requests are waiting for the model). "
                                "Please try again in a minute.")
