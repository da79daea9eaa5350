"""Waiting for what a request needs (an index another request builds, a free builder, its turn in line, a child
process, a remote call) while hearing that the request was stopped: the one polling loop every such wait uses.

It waits and raises Cancelled; what is waited for, and any other limit on the wait, belong to the caller.
"""

from __future__ import annotations

from typing import Callable

from longqa_core.errors import Cancelled


def wait_until(is_done: Callable[[float], bool], should_stop: Callable[[], bool] | None, stopped: str,
               poll_s: float, *, between: Callable[[], None] | None = None) -> None:
    """Return once `is_done(poll_s)` says the wait is over: each call may itself wait up to `poll_s` for what it
    waits on (an event, a lock, a child process, a remote call). After every call that says not yet: Cancelled
    with the message `stopped` when `should_stop()` says so, else `between()` (progress to report, another limit
    that raises, or a condition's wait for the line to move)."""
    while not is_done(poll_s):
        if should_stop is not None and should_stop():
            raise Cancelled(stopped)
        if between is not None:
            between()
