"""A request's turns and Stop: the keys a visitor counts under, its turn on the model (shown as progress while it
waits), the page's Stop, and how a page session's last answer ended. Not the request itself (`page.asking`).

Stop is the page's own, not gradio's `cancels=`. The answer streams (`page.streaming`), so a cancel would keep the
best answer so far on the page; but it ends the handler at once, also once every window is read and the answer is
being decoded (a Stop then must show the answer: issue 49), the answer area could not say how far the read got, and
it cannot stop the thread that reads, which would read on; the read must end between batches of windows. The Stop
button marks the page session (`press_stop`), and the read's stop check, asked between batches, sees the mark. An
API client cancels its job instead (`hardening.abandonment_check`).
"""

from __future__ import annotations

import contextlib
import functools
import html
import inspect
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

import gradio as gr
import pandas as pd

from longqa.readout import Readout
from longqa.backend import Provisional
from longqa.serving import policy
from longqa_core.errors import Cancelled
from page.context import AppContext
from page.hardening import abandonment_check, first_hop
from page.zerogpu import ZERO_GPU

MAX_VISITOR_NOTES = 256  # visitors whose last outcome or Stop the page keeps (the oldest go first)


def visitor_keys(ctx: AppContext, request: gr.Request | None) -> tuple[str, ...]:
    """Every key a visitor's requests count under: its gradio session, and where the deployment names a proxy
    header for the visitor (on a Space, by default), the address in its first hop, so that a fresh client per
    request gets no more than one visitor's share. On a direct connection the address is never a key: many
    visitors may share one (an office, a school, a test on loopback)."""
    keys = []
    session_hash = getattr(request, "session_hash", None)
    if session_hash:
        keys.append(f"session:{session_hash}")
    if ctx.visitor_header and request is not None:
        address = first_hop(request.headers.get(ctx.visitor_header))
        if address:
            keys.append(f"address:{address}")
    return tuple(keys)


def page_session(request: gr.Request | None) -> str | None:
    """The page session (browser tab) a request comes from: gradio's session hash, or None for a direct call."""
    return getattr(request, "session_hash", None) or None


def remember(notes: OrderedDict, key: str | None, value) -> None:
    """Keep `value` for page session `key`, forgetting the oldest sessions past MAX_VISITOR_NOTES."""
    if key is None:
        return
    notes[key] = value
    notes.move_to_end(key)
    while len(notes) > MAX_VISITOR_NOTES:
        notes.popitem(last=False)


def waiting_shown(progress) -> Callable[[int], None]:
    """The lane's `on_wait`: how many requests are ahead, shown as progress (when there is a progress bar)."""
    def on_wait(ahead: int) -> None:
        if progress is not None:
            progress(0.0, desc=f"Waiting for the model: {ahead} request{'s' if ahead != 1 else ''} ahead")
    return on_wait


@contextlib.contextmanager
def model_turn(ctx: AppContext, request: gr.Request | None, progress=None, *, exclusive: bool = False,
               only_one: str | None = None):
    """This request's turn on the model (`policy.model_turn`: `only_one` names a kind of exclusive turn the lane
    takes one of at a time), with the wait shown as progress; yields the key of its abandonment check."""
    with policy.model_turn(ctx.lane, visitor_keys(ctx, request), abandonment_check(), waiting_shown(progress),
                           exclusive=exclusive, only_one=only_one) as stop_key:
        yield stop_key


@contextlib.contextmanager
def request_turn(ctx: AppContext, request: gr.Request | None, progress=None, *, windows: int = 0, place=None):
    """This answer's place in the lane (`policy.request_turn`: turns on the model between batches), with the wait
    shown as progress; yields the key of its stop check and runner wrapper, and its ticket. It stops when abandoned
    or when its page session presses Stop. Under ZeroGPU the read runs in a forked worker that cannot take turns
    with this process's lane: it holds one turn throughout. `place`: its ticket from the lane's door
    (`ModelLane.door`)."""
    is_abandoned, stop_pressed = abandonment_check(), stop_check(ctx, request)
    with policy.request_turn(ctx.lane, visitor_keys(ctx, request), lambda: is_abandoned() or stop_pressed(),
                             waiting_shown(progress), windows=windows, whole=ZERO_GPU, place=place) as (key, ticket):
        yield key, ticket


def press_stop(ctx: AppContext, request: gr.Request = None) -> None:
    """Stop: the answer this page session is running ends before its next batch of windows, and says how far it
    got (the page's own Stop; an API client cancels its job instead). `noting_outcome` forgets it when the next
    answer begins."""
    remember(ctx.stops, page_session(request), time.monotonic())


def stop_check(ctx: AppContext, request: gr.Request | None) -> Callable[[], bool]:
    """Whether this page session pressed Stop during its current answer."""
    key = page_session(request)
    return lambda: key is not None and key in ctx.stops


def stop_pressed_from_now(ctx: AppContext, request: gr.Request | None) -> Callable[[], bool]:
    """Whether this page session presses Stop from now on: a press before is not for what begins now."""
    key = page_session(request)
    if key is not None:
        ctx.stops.pop(key, None)
    return stop_check(ctx, request)


@dataclass
class Outcome:
    """How a page session's last request ended, for the answer area: its readout (with the JSON and the history
    table the answer showed), or the message it ended with (an error's), or how far it got before Stop."""

    readout: Readout | None = None
    message: str | None = None
    stopped: tuple[int, int] | None = None  # (windows read, windows planned)
    partial: Provisional | None = None  # after a Stop: the best answer of the windows read, which the page shows
    # what the answer showed, built once, for the downloads: the readout's JSON and the history's table
    readout_json: dict | None = None
    history_table: pd.DataFrame | None = None


def noting_outcome(ctx: AppContext, handler: Callable, outputs) -> Callable:
    """`handler` (an answer through the page) keeping how it ended for the answer area (`show_outcome`): an error's
    message, raised on as before; a Stop of this page session, after which every output is left as it was (the best
    answer so far, where a streaming handler showed one); the handler notes its readout itself. Same signature and
    hints; a generator handler (`page.streaming`) stays one."""
    signature = inspect.signature(handler)

    @contextlib.contextmanager
    def noting(args, kwargs):
        key = page_session(signature.bind_partial(*args, **kwargs).arguments.get("request"))
        if key is not None:
            ctx.stops.pop(key, None)  # a Stop pressed before this answer began is not for it
        stopped = []
        try:
            yield stopped
        except gr.Error as exc:
            cause = exc.__cause__
            if key is not None and key in ctx.stops and isinstance(cause, Cancelled):
                remember(ctx.outcomes, key, Outcome(stopped=(cause.windows_done, cause.windows_total),
                                                    partial=cause.best))
                stopped.append(True)
                return
            # the toast's message is HTML-escaped (`escape`); the answer area escapes the plain text itself
            remember(ctx.outcomes, key, Outcome(message=html.unescape(str(exc.message))))
            raise
        finally:
            if key is not None:
                ctx.stops.pop(key, None)

    if inspect.isgeneratorfunction(handler):
        @functools.wraps(handler)
        def noted_each(*args, **kwargs):
            with noting(args, kwargs) as stopped:
                yield from handler(*args, **kwargs)
            if stopped:
                yield {name: gr.skip() for name in outputs}

        return noted_each

    @functools.wraps(handler)
    def noted(*args, **kwargs):
        with noting(args, kwargs) as stopped:
            return handler(*args, **kwargs)
        return {name: gr.skip() for name in outputs} if stopped else None

    return noted
