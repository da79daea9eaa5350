"""The door of a shared deployment: how many requests each visitor has inside, from the moment one arrives (before
its documents are read) to its end, refused at once past `per_visitor`, so that reading uploads (slow HTML, large
files) counts toward a visitor's share as the model lane's turns do.

It counts and refuses; it knows nothing of reading, models or gradio (the page says who a visitor is).
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from typing import Iterator

from longqa.serving.lane import LaneBusyError


class Door:
    """Requests inside, by visitor key (a request counts under every key its visitor is known by); a visitor with
    `per_visitor` inside under any key is refused (`LaneBusyError`) until one ends. Anonymous requests (no key) are
    never counted."""

    def __init__(self, per_visitor: int = 3):
        self.per_visitor = per_visitor
        self._inside: Counter[str] = Counter()
        self._lock = threading.Lock()

    def inside(self, key: str) -> int:
        with self._lock:
            return self._inside[key]

    @contextlib.contextmanager
    def enter(self, visitors: tuple[str, ...]) -> Iterator[None]:
        """One request of `visitors` inside for the `with` body."""
        keys = tuple(dict.fromkeys(v for v in visitors if v))
        with self._lock:
            full = max((self._inside[key] for key in keys), default=0)
            if full >= self.per_visitor:
                them = "them" if full > 1 else "it"
                raise LaneBusyError(f"You already have {full} request{'s' if full > 1 else ''} being read or "
                                    f"answered: wait for {them} to finish (or stop {them}) before sending another.")
            self._inside.update(keys)
        try:
            yield
        finally:
            with self._lock:
                self._inside.subtract(keys)
                for key in keys:
                    if self._inside[key] <= 0:
                        del self._inside[key]
