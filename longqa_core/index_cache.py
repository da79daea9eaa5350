"""The ranking indexes a server keeps between questions, bounded by their size in bytes: one build per key (an upload
for one visitor: `longqa_core.plan` makes the key) however many requests ask for it at once (the others wait for that
build), a bounded number of builds at a time, and no lock held while building, so a request that needs no index
never waits for one.

It keeps and shares indexes; it does not build them (the caller passes how, `longqa_core.reading.build_index`) nor
decide when a request may plan (the lane's door does).
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from typing import Callable

import numpy as np

from longqa_core.limits import StopCheck, stop_check
from longqa_core.waiting import wait_until

DEFAULT_MAX_BYTES = 512 * 1024 * 1024  # every cached index together (a 6 MB upload's index is about 60 MB)
DEFAULT_BUILDERS = 1  # indexes built at once: building holds the interpreter, which every other request needs
WAIT_POLL_S = 0.25  # how often a request waiting for a build checks whether it was abandoned
STOPPED = "The request was stopped while it waited for its documents' index."


class IndexCache:
    """Indexes by key (the key names one visitor: no index is shared between visitors), the most recently used
    last, `max_bytes` in all (an index larger than that is built for its request and not kept); at most `builders`
    builds at once, one per key."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, builders: int = DEFAULT_BUILDERS,
                 size_of: Callable[[object], int] | None = None):
        self.max_bytes = max_bytes
        self.size_of = size_of or index_bytes
        self._builders = threading.BoundedSemaphore(max(1, builders))
        self._lock = threading.Lock()  # guards the dictionaries below; never held while building
        self._indexes: OrderedDict[str, tuple[object, int]] = OrderedDict()
        self._building: dict[str, threading.Event] = {}
        self.builds = 0  # indexes built so far (a cache hit or a shared build adds nothing)

    def __len__(self) -> int:
        with self._lock:
            return len(self._indexes)

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return key in self._indexes

    @property
    def bytes(self) -> int:
        """The cached indexes' size together, as `size_of` counts them."""
        with self._lock:
            return sum(size for _, size in self._indexes.values())

    def get_or_build(self, key: str, build: Callable[[], object], should_stop: StopCheck | None = None):
        """The index under `key`: cached, or the one another request is building now (waiting for it), or built
        here once a builder is free. Cancelled when `should_stop` says so while waiting."""
        stop = stop_check(should_stop)
        while True:
            with self._lock:
                if key in self._indexes:
                    self._indexes.move_to_end(key)
                    return self._indexes[key][0]
                pending = self._building.get(key)
                if pending is None:
                    pending = self._building[key] = threading.Event()
                    break
            wait_until(pending.wait, stop, STOPPED, WAIT_POLL_S)  # another request builds it: then it is cached
        try:
            wait_until(lambda timeout_s: self._builders.acquire(timeout=timeout_s), stop, STOPPED, WAIT_POLL_S)
            try:
                index = build()
                self.builds += 1
            finally:
                self._builders.release()
            self._keep(key, index)
            return index
        finally:
            with self._lock:
                self._building.pop(key, None)
            pending.set()

    def _keep(self, key: str, index) -> None:
        size = self.size_of(index)
        if size > self.max_bytes:
            return
        with self._lock:
            self._indexes[key] = (index, size)
            while sum(s for _, s in self._indexes.values()) > self.max_bytes:
                self._indexes.popitem(last=False)


def index_bytes(index) -> int:
    """About the memory an index holds (its `nbytes`: `longqa_core.reading.DocumentIndex`), or a tuple of it and
    the documents' tokens."""
    if isinstance(index, (tuple, list)):
        return sys.getsizeof(index) + sum(index_bytes(part) for part in index)
    nbytes = getattr(index, "nbytes", None)
    if nbytes is not None:
        return int(nbytes)
    return sys.getsizeof(index) + sum(_size(value) for value in vars(index).values())


def _size(value) -> int:
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, (list, tuple)):
        return sys.getsizeof(value) + sum(_size(v) for v in value)
    return sys.getsizeof(value) if isinstance(value, (str, bytes, int, float)) else 0
