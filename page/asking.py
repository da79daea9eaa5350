"""A request's way in and out: its settings cleaned, its documents read at the lane's door, the answer (or the
training step) in its turn on the model, and the answer area cleared before and told after how it ended.
Not the turns and Stop themselves (`page.turns`) nor the model work (`page.zerogpu`).
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Callable

import gradio as gr
import pandas as pd

from longqa.session import read_request
from longqa_core.errors import DocumentError, InputError, ProfileError
from longqa_core.limits import whole_number
from longqa_core.reading import DEFAULT_READING, READING_MODES
from page import format as fmt
from page.context import AppContext
from page.downloads import DOWNLOADS, doc_url
from page.errors import cut, escape, user_errors
from page.hardening import abandonment_check, number_or_none
from page.history_panel import history_outputs
from page.picks import changed_since, ensure_loaded, seen_now
from page.turns import Outcome, model_turn, page_session, remember, request_turn, visitor_keys, waiting_shown
from page.zerogpu import RUNS_IN_WORKER, answer_on_gpu, training_step_on_gpu

DEFAULT_TOP_K = 3
DEFAULT_TRAINING_WINDOW = 512
TRAINING_LOCKED = ("This deployment is shared and fixes its model: the training-step readout holds the model alone, "
                   "so it is turned off here. Run the page yourself (`python app.py`) to try it.")
CLEARED_TABLES = {"answers": fmt.ANSWER_HEADERS, "latency": fmt.LATENCY_HEADERS,
                  "memory": fmt.MEMORY_HEADERS, "run": fmt.RUN_HEADERS}


def count_or_default(value, what: str, default: int) -> int:
    """A count from the page or the API (None or an empty field: `default`; a numeric string: its number), refused
    unless whole, before any work."""
    value = number_or_none(value, what)
    return default if value is None else whole_number(what, value)


def reading_or_default(value) -> str:
    """A reading mode from the page or the API (empty: the default), refused unless it is one of the modes."""
    if value is None or value == "":
        return DEFAULT_READING
    if value not in READING_MODES:
        raise InputError(f"Reading must be one of {', '.join(READING_MODES)}, got {cut(repr(value))}.")
    return value


def request_settings(ctx: AppContext, top_k, reading, no_answer_below) -> tuple[str, dict]:
    """A request's reading mode and engine settings from the page or the API, cleaned before any work (top-k a
    whole number, else its default; the reading one of the modes, empty: the default; an empty not-found threshold:
    the model's own rule, anything else the settings check), with this deployment's limits: what an answer and a
    comparison both plan with."""
    top_k = count_or_default(top_k, "Top-k", DEFAULT_TOP_K)
    if isinstance(no_answer_below, str) and not no_answer_below.strip():
        no_answer_below = None
    return reading_or_default(reading), {"top_k": top_k, "no_answer_below": no_answer_below,
                                         "max_total_tokens": ctx.max_total_tokens,
                                         "max_request_s": ctx.max_request_s}


def read_uploads(ctx: AppContext, files, pasted_text, question, progress=None):
    """`read_request` for the page: the uploads kept on disk while they are read (a deleted one named as such), a
    wait for a document reader shown as progress, and the read stopped when the request is abandoned."""
    files = list(files or [])
    for path in files:
        if not os.path.exists(path):
            raise DocumentError(f"'{os.path.basename(path)}' is no longer on this server: uploads are deleted "
                                f"{ctx.uploads.keep_s / 60:g} minutes after they came (sooner when the server needs "
                                "the room). Upload it again.")
    with ctx.uploads.reading(files):
        return read_request(files, pasted_text, question, max_bytes=ctx.max_file_bytes,
                            max_total_tokens=ctx.max_total_tokens, should_stop=abandonment_check(),
                            on_wait=reader_wait_shown(progress))


@contextlib.contextmanager
def read_at_door(ctx: AppContext, files, pasted_text, question, request: gr.Request | None, progress=None,
                 planned_here: bool = True):
    """A request's place at the lane's door (counted toward the visitor's share and the queue: LaneBusyError past
    either, before anything is read) and its documents read there (`read_uploads`), held while the body plans it:
    yields (documents, seconds reading them, the place), once the reloads that came before it have ended where it is
    `planned_here` (a plan made while one unloads the model would find none). What an answer, a preview and a
    comparison all read by."""
    with ctx.lane.door(visitor_keys(ctx, request)) as place:
        if progress is not None:
            progress(0.0, desc="Reading the documents")
        documents, extract_s = read_uploads(ctx, files, pasted_text, question, progress)
        if planned_here:
            ctx.lane.after_exclusive(place, abandonment_check(), waiting_shown(progress))
        yield documents, extract_s, place


def read_before_turn(ctx: AppContext, files, pasted_text, question, request: gr.Request | None, progress=None):
    """A request's documents and the seconds reading them (`read_at_door`), its place at the door left once they
    are read: for a comparison, whose exclusive turn on the model waits for every request in line before it, its
    own place included, and which plans inside that turn."""
    with read_at_door(ctx, files, pasted_text, question, request, progress, planned_here=False) as (documents,
                                                                                                   extract_s, _):
        return documents, extract_s


def reader_wait_shown(progress) -> Callable[[int], None]:
    """The document readers' `on_wait` (PDF and HTML children): how many documents are read or wait ahead, shown
    as progress."""
    def on_wait(ahead: int) -> None:
        if progress is not None:
            progress(0.0, desc=f"Waiting for a document reader: {ahead} document{'s' if ahead != 1 else ''} ahead")
    return on_wait


def preview_documents(ctx: AppContext, files, pasted_text, question, request: gr.Request = None) -> pd.DataFrame:
    """Characters, tokens and windows of each document before asking (windows depend on the question's length),
    with every limit checked; counted without the model, so a preview never waits for an answer in flight. It
    counts toward the visitor's requests, as an answer does."""
    if not files and not (pasted_text or "").strip():
        return pd.DataFrame([], columns=fmt.DOCUMENT_HEADERS)
    with user_errors("Reading the documents"):
        with read_at_door(ctx, files, pasted_text, None, request) as (documents, _, _):
            if ctx.session.loaded is None:
                rows = [[d.name, d.n_chars, None, None] for d in documents]
            else:
                plan = ctx.session.plan(documents, (question or "").strip() or "?", "full",
                                        max_total_tokens=ctx.max_total_tokens)
                rows = fmt.document_rows(plan.stats)
    return pd.DataFrame(rows, columns=fmt.DOCUMENT_HEADERS)


def ask(ctx: AppContext, files, pasted_text, question, top_k, reading, history, seen=None, no_answer_below="",
        request: gr.Request = None, progress=gr.Progress()) -> dict:
    """Answer the question over the documents: every readout by name, the full JSON readout as "readout".

    Reading the documents and planning the request (every limit checked, the ranking run, the windows to read
    estimated) happen once, first, at the lane's door (counted toward the visitor's share, but taking no turn on
    the model) and outside the GPU function: a bad or slow upload costs only its own visitor's time, and no GPU
    time; the lane admits, and the GPU function asks for time, by that plan.
    `reading` is "auto", "full" or "guided" (empty: auto); `no_answer_below` a score in (0, 1) under which the answer
    is "not found" (empty: the model's own rule)."""
    with user_errors("Answering"):
        reading, settings = request_settings(ctx, top_k, reading, no_answer_below)
        # Its place in the lane first: reading, indexing and planning count toward the visitor's share and the queue.
        with read_at_door(ctx, files, pasted_text, question, request, progress) as (documents, extract_s, place):
            ensure_loaded(ctx, progress)
            progress(0.0, desc="Ranking the windows" if reading != "full" else "Planning the read")
            plan = ctx.session.plan(documents, question, reading, should_stop=abandonment_check(),
                                    visitor=" ".join(visitor_keys(ctx, request)) or None, **settings)
            with request_turn(ctx, request, progress, windows=plan.expected_windows, place=place) as (stop_key,
                                                                                                      ticket):
                changed = changed_since(ctx, seen)
                progress(0.0, desc=fmt.read_expectation(plan))
                readout = answer_on_gpu(ctx.key, plan, extract_s, progress, stop_key)
    if RUNS_IN_WORKER:
        ctx.session.learn(readout)
    readout.queue = ticket.queue_readout()
    result = readout.result
    if changed:
        result.notices.insert(0, changed)
    for notice in result.notices:
        gr.Warning(escape(notice))
    best = result.answers[0] if result.answers else None
    if result.verdict is not None and result.verdict.found is False:  # no span in its passage reads as the answer
        passage = fmt.closest_passages([document.text for document in documents], result.answers)
    else:
        passage = (fmt.evidence(documents[best.document_index].text, best.start_char, best.end_char)
                   if best is not None and best.document_index >= 0 else [])
    runs = history_outputs(history, [readout])  # the history, its table and the plots' data: one bar per run
    readout_json = readout.to_json()
    # for the page's answer area, which offers both as downloads
    remember(ctx.outcomes, page_session(request), Outcome(readout=readout, readout_json=readout_json,
                                                          history_table=runs["history_table"]))
    return {
        "documents": pd.DataFrame(fmt.document_rows(result.documents),
                                  columns=fmt.DOCUMENT_HEADERS),
        "answer": fmt.best_answer(result),
        "answers": pd.DataFrame(fmt.answer_rows(result.answers), columns=fmt.ANSWER_HEADERS),
        "evidence": passage,
        "latency": pd.DataFrame(fmt.latency_rows(result.latency_s, result.tokens_per_s),
                                columns=fmt.LATENCY_HEADERS),
        "memory": pd.DataFrame(fmt.memory_rows(result.memory), columns=fmt.MEMORY_HEADERS),
        "run": pd.DataFrame(fmt.run_rows(readout), columns=fmt.RUN_HEADERS),
        **runs,
        "seen": seen_now(ctx),
        "readout": readout_json,
    }


def ask_in_full(ctx: AppContext, files, pasted_text, question, top_k, history, seen=None, no_answer_below="",
                request: gr.Request = None, progress=gr.Progress()) -> dict:
    """The same question read in full ("Read the whole document"): every window, whatever the ranking says."""
    return ask(ctx, files, pasted_text, question, top_k, "full", history, seen, no_answer_below, request, progress)


def clear_answer(status: str) -> dict:
    """What a new question or new documents do to the answer area before anything runs: no previous answer, its
    evidence, readouts or downloads left showing; `status` says why."""
    tables = {name: pd.DataFrame([], columns=headers) for name, headers in CLEARED_TABLES.items()}
    return {"status": status, "answer": gr.update(value="", label=fmt.answer_label()), "evidence": None,
            "readout": None, "download_json": no_download(), "download_csv": no_download(), "wait": "", **tables}


def no_download() -> dict:
    """A download button hidden and emptied: a new update each time, since gradio takes an update's value out of
    the dict it is given (a module-level one came back without it on the next answer)."""
    return gr.update(value=None, visible=False)


def show_outcome(ctx: AppContext, request: gr.Request = None) -> dict:
    """After an answer through the page: over the answer, whether it was found (or the error's message, or how far
    a Stop got), the answer box's label (the answer, or the partial one a Stop kept), the passage box's label (the
    closest passages where nothing was found), and the readout and history the answer showed, to download."""
    outcome = ctx.outcomes.pop(page_session(request), None)
    if outcome is None:
        return {"status": gr.skip(), "download_json": gr.skip(), "download_csv": gr.skip(), "evidence": gr.skip(),
                "answer": gr.skip()}
    if outcome.readout is None:
        status = (fmt.stopped_status(*outcome.stopped, outcome.partial) if outcome.stopped is not None
                  else fmt.failed_status(outcome.message or "The request failed."))
        label = fmt.answer_label(fmt.partial_label(*outcome.stopped) if outcome.partial is not None else None)
        return {"status": status, "download_json": no_download(), "download_csv": no_download(),
                "evidence": gr.update(label=fmt.EVIDENCE_LABEL), "answer": gr.update(label=label)}
    folder = DOWNLOADS.new()
    readout_path = folder / "longqa-readout.json"
    readout_path.write_text(json.dumps(outcome.readout_json, indent=2, ensure_ascii=False), encoding="utf-8")
    history_path = folder / "longqa-history.csv"
    outcome.history_table.to_csv(history_path, index=False)
    result = outcome.readout.result
    evaluation = result.verdict.evaluation if result.verdict is not None else None
    return {"status": fmt.answer_status(result, doc_url(evaluation)),
            "evidence": gr.update(label=fmt.evidence_label(result)),
            "download_json": gr.update(value=str(readout_path), visible=True),
            "download_csv": gr.update(value=str(history_path), visible=True),
            "answer": gr.update(label=fmt.answer_label())}  # no longer the best so far: the answer


def run_training_step(ctx: AppContext, window_tokens, request: gr.Request = None, progress=gr.Progress()) -> dict:
    """The training-step readout: both peaks and times, and what checkpointing saved. It holds the model alone (it
    changes the model's mode), one step at a time whoever asks (`ModelLane.turn`'s `only_one`: another is refused
    at once), so a crowd of steps holds another visitor's answer back by one step, not by all of them. Off under
    --lock-profile unless the operator allows it (`--allow-training`)."""
    with user_errors("The training step"):
        if ctx.lock_profile and not ctx.allow_training:
            raise ProfileError(TRAINING_LOCKED)
        window_tokens = count_or_default(window_tokens, "The window", DEFAULT_TRAINING_WINDOW)
        with model_turn(ctx, request, progress, exclusive=True, only_one="training step"):
            ensure_loaded(ctx, progress)
            progress(0.1, desc="Forward+backward without, then with checkpointing")
            readout, window = training_step_on_gpu(ctx.key, window_tokens)
    return {"table": pd.DataFrame(fmt.training_rows(readout), columns=fmt.TRAINING_HEADERS),
            "summary": fmt.training_summary(readout, window)}
