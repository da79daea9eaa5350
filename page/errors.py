"""How handlers report errors: domain errors become `gr.Error` with their message (the only place that happens), and
messages shown as toasts stay text. Not where errors are made: the engine raises them.
"""

from __future__ import annotations

import contextlib
import html
import traceback

import gradio as gr

from longqa_core.errors import LongQAError

MAX_SHOWN_CHARS = 200  # a value a visitor sent, shown in a message: no longer than this
MAX_MESSAGE_CHARS = 2000  # a whole message: a few sentences, never a document

@contextlib.contextmanager
def user_errors(action: str):
    """Domain errors become `gr.Error` with their message; anything else a clear one. The app keeps serving."""
    try:
        yield
    except gr.Error:
        raise
    except LongQAError as exc:
        raise gr.Error(escape(str(exc)), print_exception=False) from exc
    except Exception as exc:
        traceback.print_exc()
        raise gr.Error(escape(f"{action} failed unexpectedly ({type(exc).__name__}: {exc}). "
                              "The app is still running: try again."), print_exception=False) from exc


def escape(message: str) -> str:
    """Toasts render HTML: file names and document text in messages must stay text; none runs on for pages."""
    return html.escape(cut(message, MAX_MESSAGE_CHARS), quote=False)


def cut(value, limit: int = MAX_SHOWN_CHARS) -> str:
    """`value` as text for a message, cut to at most `limit` characters (an ellipsis says where)."""
    text = str(value)
    return text if len(text) <= limit else f"{text[:limit - 1]}…"
