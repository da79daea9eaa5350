"""Handing freed host memory back to the system: glibc's heap trim, and the allocator settings a long-running server
starts with (docs/crowd-lane.md measures what they change).

It frees nothing itself and measures nothing; where glibc is absent (macOS, musl, Windows) each call does nothing.
"""

from __future__ import annotations

import ctypes
import functools
import os

M_ARENA_MAX = -8  # mallopt's parameter (glibc's malloc.h)
# Allocator settings for a server: few arenas, so that memory freed by one request thread is reused by the next
# instead of sitting in a thread's own arena. A fixed mmap threshold (buffers from 4 MB up mapped on their own, freed
# at once) was measured too and is not set: every large tensor of a forward pass then faults in fresh pages, and a
# window of the base architecture took 1.40x as long (docs/crowd-lane.md). The environment's MALLOC_* settings win.
SERVER_ARENA_MAX = 2


@functools.cache
def _libc():
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim, libc.mallopt  # noqa: B018 - both must exist (glibc)
        return libc
    except (OSError, AttributeError):
        return None


def trim_heap() -> bool:
    """Ask glibc to return the free pages of every arena to the system (`malloc_trim(0)`); whether it could."""
    libc = _libc()
    return libc is not None and bool(libc.malloc_trim(0))


def tune_allocator() -> dict[str, int]:
    """Set glibc's arena count for this process (SERVER_ARENA_MAX); nothing when the environment sets any of glibc's
    own MALLOC_* variables (the operator's settings win). Returns what was set, by glibc's variable name."""
    libc = _libc()
    if libc is None or any(name.startswith("MALLOC_") for name in os.environ):
        return {}
    return {"MALLOC_ARENA_MAX": SERVER_ARENA_MAX} if libc.mallopt(M_ARENA_MAX, SERVER_ARENA_MAX) == 1 else {}
