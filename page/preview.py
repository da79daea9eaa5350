"""The documents' preview before asking: each document's characters, tokens and windows, counted at the lane's door
with every limit checked but without the model (a preview never waits for an answer in flight), a row for each
file that will be left out, and the line over the answer saying which and why. Not the answer (`page.asking`).
"""

from __future__ import annotations

import html

import gradio as gr
import pandas as pd

from longqa.request import plan_read
from longqa_core.errors import DocumentError
from page import format as fmt
from page.asking import hold_documents, read_at_door
from page.context import AppContext
from page.hardening import user_errors


def preview_documents(ctx: AppContext, files, pasted_text, question, request: gr.Request = None) -> pd.DataFrame:
    """Characters, tokens and windows of each document before asking (windows depend on the question's length),
    with every limit checked, and a row for each file that will be left out; counted without the model, so a
    preview never waits for an answer in flight. It counts toward the visitor's requests, as an answer does."""
    return preview_table(preview_read(ctx, files, pasted_text, question, request))


def preview_read(ctx: AppContext, files, pasted_text, question, request: gr.Request = None):
    """What a preview read: (rows of the documents read, the files left out (name, why)); no rows without
    documents."""
    if not files and not (pasted_text or "").strip():
        hold_documents(ctx, [], request)
        return [], ()
    with user_errors("Reading the documents"):
        with read_at_door(ctx, files, pasted_text, None, request) as (read, _):
            if ctx.session.loaded is None:
                rows = [[d.name, d.n_chars, None, None] for d in read.documents]
            else:
                plan = plan_read(ctx.session, read._replace(question=(question or "").strip() or "?"), "full",
                                 max_total_tokens=ctx.max_total_tokens)
                rows = fmt.document_rows(plan.stats)
    return rows, read.left_out


def preview_table(read) -> pd.DataFrame:
    rows, left_out = read
    return pd.DataFrame([*rows, *([name, fmt.LEFT_OUT, None, None] for name, _ in left_out)],
                        columns=fmt.DOCUMENT_HEADERS)


def preview_with_status(ctx: AppContext, files, pasted_text, question, request: gr.Request = None) -> dict:
    """The page's preview (`preview_documents`) and, where a file will be left out or none can be read, the line
    over the answer saying which and why in the words an answer would (never an error beside "press Ask")."""
    try:
        read = preview_read(ctx, files, pasted_text, question, request)
    except gr.Error as exc:
        if not isinstance(exc.__cause__, DocumentError):
            raise
        return {"documents": preview_table(([], ())),
                "status": fmt.unreadable_status(html.unescape(str(exc.message)))}
    _, left_out = read
    return {"documents": preview_table(read),
            "status": fmt.left_out_status(left_out) if left_out else gr.skip()}
