"""The page's event wiring, shared by every panel: a handler with its context bound (`bind`), a handler whose values
come by name answering gradio by component (`keyed`), and both wired to a trigger with the outputs' order written
once (`listen`).

UI only, and nothing of the page's own: it knows gradio's events and handlers' signatures, not the page's context,
components or models, so that every panel can use it.
"""

from __future__ import annotations

import functools
import inspect
from typing import Callable

from gradio.blocks import Block


def bind(handler: Callable, ctx) -> Callable:
    """`handler` with its first argument (the page's context) bound, keeping the signature and type hints gradio
    reads to pass gr.Request and gr.Progress (a functools.partial hides the hints)."""
    if inspect.isgeneratorfunction(handler):  # gradio streams a generator handler's updates: it stays one
        @functools.wraps(handler)
        def bound(*args, **kwargs):
            return (yield from handler(ctx, *args, **kwargs))
    else:
        @functools.wraps(handler)
        def bound(*args, **kwargs):
            return handler(ctx, *args, **kwargs)

    signature = inspect.signature(handler)
    bound.__signature__ = signature.replace(parameters=list(signature.parameters.values())[1:])
    return bound


def keyed(handler: Callable, outputs: dict[str, Block]) -> Callable:
    """`handler`, whose values come by name, answering gradio with {component: value} (same signature and hints; a
    generator handler stays one, each of its updates answered so)."""
    if inspect.isgeneratorfunction(handler):
        @functools.wraps(handler)
        def each_by_component(*args, **kwargs):
            updates = handler(*args, **kwargs)
            try:
                for update in updates:
                    yield {outputs[name]: value for name, value in update.items()}
            finally:  # closed by gradio (the client gone): the handler's read goes no further
                updates.close()

        return each_by_component

    @functools.wraps(handler)
    def by_component(*args, **kwargs):
        return {outputs[name]: value for name, value in handler(*args, **kwargs).items()}

    return by_component


def listen(trigger, handler: Callable, *, outputs: dict[str, Block], **event):
    """Wire `handler` (values by name) to `trigger`: the order of `outputs` is the event's, written once."""
    return trigger(keyed(handler, outputs), outputs=list(outputs.values()), **event)
