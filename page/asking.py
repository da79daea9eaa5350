"""A request's way in and out: its settings cleaned, what the request function (`longqa.request.request_steps`:
read at the lane's door, load, plan once, turns, answer) needs of the page (its uploads read, the model loaded if
none is through `page.loading`, the page's Stop, where the answer runs), the best answer so far shown as the request
yields it, and the answer area cleared before and told after how it ended. Not the panels' layout
(`page.answer_panel`), the preview (`page.preview`), the training step nor the model work itself (the backend's).

Stop is the page's own, not gradio's `cancels=`: a cancel would end the handler only at its next yield (a stage
between batches, tokenizing or decoding, runs on), drop the answer being decoded once every window is read (a Stop
then must show it: issue 49), and leave the answer area unable to say how far the read got. The Stop button marks
the page session (`press_stop`); the read's stop check, asked between batches and inside stages, sees the mark.
An API client cancels its job, or closes its connection (`abandonment_check`).

Off ZeroGPU the answer runs in this process, handed its stop check and gate directly (`answer`). Under ZeroGPU it
runs in a forked worker (`answer_on_gpu`) whose pickled arguments carry the context and the stop check as keys
(`page.context.CONTEXTS`, `policy.stop_check`); it holds one turn throughout, and yields each best answer so far.
"""

from __future__ import annotations

import contextlib
import functools
import html
import inspect
import json
import os
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Iterator

import gradio as gr
import pandas as pd

from longqa.backend import Provisional
from longqa.readout import Readout
from longqa.request import ANSWERING, PLANNING, READING, at_door, request_steps
from longqa.serving import policy
from longqa.serving.lane import LaneTurns
from longqa.session import NO_MODEL, ReadRequest, page_image, read_request
from longqa_core.documents import passage_place
from longqa_core.errors import Cancelled, DocumentError, LongQAError, ModelLoadError
from longqa_core.limits import EMPTY_QUESTION, check_question_length, whole_number
from longqa_core.reading import DEFAULT_READING
from page import format as fmt
from page import page_view
from page.context import CONTEXTS, AppContext
from page.downloads import DOWNLOADS, doc_url
from page.hardening import abandonment_check, escape, expect, number_or_none, proxy_address, user_errors
from page.history_panel import history_outputs
from page.loading import ensure_loaded, loaded_now
from page.streaming import provisional_outputs
from page.words import PICK_MODEL
from page.zerogpu import RUNS_IN_WORKER, ZERO_GPU, answer_duration, gpu_function

DEFAULT_TOP_K = 3
CLEARED_TABLES = {"answers": fmt.ANSWER_HEADERS, "latency": fmt.LATENCY_HEADERS,
                  "memory": fmt.MEMORY_HEADERS, "run": fmt.RUN_HEADERS}
MAX_VISITOR_NOTES = 256  # visitors whose last outcome or Stop the page keeps (the oldest go first)


# ------------------------------------------------------------------------------------------- turns and Stop
def visitor_keys(ctx: AppContext, request: gr.Request | None) -> tuple[str, ...]:
    """Every key a visitor's requests count under: its gradio session, and where the deployment names a proxy
    header for the visitor (on a Space, by default), the address the proxy gives in it (`proxy_address`: not the
    first hop, which the client writes), so a fresh client per request gets no more than one visitor's share. On a
    direct connection the address is never a key: many visitors may share one (an office, a school, loopback)."""
    keys = []
    session_hash = getattr(request, "session_hash", None)
    if session_hash:
        keys.append(f"session:{session_hash}")
    if ctx.visitor_header and request is not None:
        address = proxy_address(request.headers.get(ctx.visitor_header))
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
    """This request's turn on the model (`ModelLane.turn`: answers share the model up to the lane's capacity; a
    reload, a comparison or a training step (`exclusive`) holds it alone; `only_one` names a kind of exclusive turn
    the lane takes one of at a time), with the wait shown as progress; yields its abandonment check."""
    should_stop = abandonment_check()
    with ctx.lane.turn(visitor_keys(ctx, request), should_stop=should_stop, on_wait=waiting_shown(progress),
                       exclusive=exclusive, only_one=only_one):
        yield should_stop


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
    # what the answer showed, built once, for the downloads: the readout's JSON and the history as data
    readout_json: dict | None = None
    history_table: pd.DataFrame | None = None
    passage_place: str | None = None  # where the answer's passage stands in its file (`documents.passage_place`)


def noting_outcome(ctx: AppContext, handler: Callable, outputs) -> Callable:
    """`handler` (an answer through the page, a generator) keeping how it ended for the answer area (`show_outcome`):
    an error's message, raised on as before; a Stop of this page session, after which every output is left as it was
    (the best answer so far, where one was shown); the handler notes its readout itself. Same signature and hints."""
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

    @functools.wraps(handler)
    def noted_each(*args, **kwargs):
        with noting(args, kwargs) as stopped:
            yield from handler(*args, **kwargs)
        if stopped:
            yield {name: gr.skip() for name in outputs}

    return noted_each


def seen_now(ctx: AppContext) -> dict:
    """What a visitor has seen loaded (kept per browser tab): the session's load generation and its names."""
    return {"generation": ctx.session.generation, "model": ctx.session.model_ref,
            "profile": ctx.session.profile_name}


def changed_since(now: dict, seen) -> str | None:
    """A notice where another visitor's reload came since this visitor last saw `seen` (both `seen_now`'s)."""
    if not seen or seen.get("generation") in (None, now["generation"]):
        return None
    return (f"The model or profile was changed by another visitor since your last answer: now {now['model']} "
            f"with profile {now['profile']} (was {seen.get('model')} with {seen.get('profile')}).")


# ------------------------------------------------------------------------------------------------ the request
def count_or_default(value, what: str, default: int) -> int:
    """A count from the page or the API (None or an empty field: `default`; a numeric string: its number), refused
    unless whole, before any work."""
    value = number_or_none(value, what)
    return default if value is None else whole_number(what, value)


def request_settings(ctx: AppContext, top_k, reading, no_answer_below) -> tuple[str, dict]:
    """A request's reading mode and engine settings from the page or the API, cleaned before any work (top-k a
    whole number, else its default; the reading one of the modes, empty: the default; an empty not-found threshold:
    the model's own rule, anything else the settings check), with this deployment's limits: what an answer and a
    comparison both plan with."""
    top_k = count_or_default(top_k, "Top-k", DEFAULT_TOP_K)
    if isinstance(no_answer_below, str) and not no_answer_below.strip():
        no_answer_below = None
    reading = DEFAULT_READING if reading is None or reading == "" else reading  # checked where it is planned
    return reading, {"top_k": top_k, "no_answer_below": no_answer_below, "max_total_tokens": ctx.max_total_tokens,
                     "max_request_s": ctx.max_request_s, "passage_window_tokens": ctx.passage_window_tokens}


def read_uploads(ctx: AppContext, files, pasted_text, question, progress=None) -> ReadRequest:
    """`read_request` for the page: the uploads kept on disk while they are read (a deleted one named as such), a
    wait for a document reader shown as progress, and the read stopped when the request is abandoned."""
    for field, text in (("pasted_text", pasted_text), ("question", question)):
        expect(field, text, str, max_chars=sys.maxsize)  # how long each may be, the request's limits say
    check_question_length(question)  # before the documents are read: a question that long is refused anyway
    files = list(files or [])
    with ctx.uploads.reading(files):  # held first: a sweep between the check below and the read deletes none
        for path in files:
            if not os.path.exists(path):
                name = os.path.basename(path)
                if not ctx.uploads.was_deleted(path):
                    raise DocumentError(f"'{name}' is not on this server: upload the file itself.")
                raise DocumentError(f"'{name}' is no longer on this server: uploads are deleted "
                                    f"{ctx.uploads.keep_s / 60:g} minutes after they came, once no open page holds "
                                    "them (sooner when the server needs the room). Upload it again.")
        return read_request(files, pasted_text, question, max_bytes=ctx.max_file_bytes,
                            max_total_tokens=ctx.max_total_tokens, should_stop=abandonment_check(),
                            on_wait=reader_wait_shown(progress))


@contextlib.contextmanager
def read_at_door(ctx: AppContext, files, pasted_text, question, request: gr.Request | None, progress=None,
                 planned_here: bool = True):
    """A request's place at the lane's door and its uploads read there (`longqa.request.at_door`, `read_uploads`),
    held meanwhile: yields what was read (`ReadRequest`) and the place. What a preview and a comparison read by."""
    hold_documents(ctx, files, request)
    with at_door(lambda: read_uploads(ctx, files, pasted_text, question, progress), lane_turns(ctx, request, progress),
                 abandonment_check(), planned_here=planned_here, on_step=steps_shown(progress, "full")) as door:
        yield door


def lane_turns(ctx: AppContext, request: gr.Request | None, progress=None) -> LaneTurns:
    """A request's place in the page's lane: counted by its visitor's keys, its wait shown as progress; under
    ZeroGPU, whose forked worker cannot take turns with this process's lane, one turn throughout."""
    return LaneTurns(ctx.lane, visitor_keys(ctx, request), whole=ZERO_GPU, on_wait=waiting_shown(progress))


def steps_shown(progress, reading: str, planned: list | None = None,
                on_turn: Callable[[], None] | None = None) -> Callable:
    """The request's `on_step`: each step as progress (reading, ranking or planning, the read's expected time), the
    plan kept in `planned` once made, and `on_turn` told as its turn on the model begins."""
    def on_step(step: str, plan) -> None:
        if plan is not None and planned is not None:
            planned.append(plan)
        if step == ANSWERING and on_turn is not None:
            on_turn()
        if progress is None:
            return
        if step == READING:
            progress(0.0, desc="Reading the documents")
        elif step == PLANNING:
            progress(0.0, desc="Ranking the windows" if reading != "full" else "Planning the read")
        else:
            progress(0.0, desc=fmt.read_expectation(plan))
    return on_step


def hold_documents(ctx: AppContext, files, request: gr.Request = None) -> None:
    """This page's documents now: the uploads among them stay on the server while it holds them, whoever else
    uploaded or let go of the same file (`UploadStore.claim`); a direct call, with no page session, holds none."""
    paths = [path for path in files or [] if isinstance(path, str)] if isinstance(files, list) else []
    ctx.uploads.claim(page_session(request), paths)


def let_go_of_documents(ctx: AppContext, request: gr.Request = None) -> None:
    """This page closed: its claims on uploads end (other pages' stay)."""
    ctx.uploads.release(page_session(request))


def read_before_turn(ctx: AppContext, files, pasted_text, question, request: gr.Request | None,
                     progress=None) -> ReadRequest:
    """What a request read (`read_at_door`), its place at the door left once it is read: for a comparison, whose
    exclusive turn waits for every request in line before it, its own place included, and which plans inside it."""
    with read_at_door(ctx, files, pasted_text, question, request, progress, planned_here=False) as (read, _):
        return read


def reader_wait_shown(progress) -> Callable[[int], None]:
    """The document readers' `on_wait` (PDF and HTML children): how many documents are read or wait ahead, shown
    as progress."""
    def on_wait(ahead: int) -> None:
        if progress is not None:
            progress(0.0, desc=f"Waiting for a document reader: {ahead} document{'s' if ahead != 1 else ''} ahead")
    return on_wait


def ask(ctx: AppContext, files, pasted_text, question, top_k, reading, history, seen=None, no_answer_below="",
        request: gr.Request = None, progress=gr.Progress()) -> Iterator[dict]:
    """Answer the question over the documents: the best answer so far after each batch of windows that has one
    (`provisional_outputs`), then every readout by name, the full JSON readout as "readout". A Stop's best answer
    (`Cancelled.best`) is shown before its error is raised.

    Reading and planning (every limit checked, the ranking run, the windows to read estimated) happen once, first,
    at the lane's door (counted toward the visitor's share, taking no turn on the model) and outside the GPU
    function: the lane admits, and the GPU function asks for time, by that plan.
    `reading` is "auto", "full" or "guided" (empty: auto); `no_answer_below` a score in (0, 1) under which the answer
    is "not found" (empty: the model's own rule)."""
    planned, at_turn = [], []  # the plan, once made; what was loaded as its turn began (what the answer runs on)
    try:
        with user_errors("Answering"):
            reading, settings = request_settings(ctx, top_k, reading, no_answer_below)
            hold_documents(ctx, files, request)
            steps = request_steps(
                ctx.session, lambda: read_uploads(ctx, files, pasted_text, question, progress), reading,
                turns=lane_turns(ctx, request, progress),
                load=lambda: ensure_loaded(ctx, progress),  # the first request after start loads it
                should_stop=abandonment_check(), stop_from_turn=stop_check(ctx, request),
                visitor=" ".join(visitor_keys(ctx, request)) or None, answer=answered_here(ctx, progress),
                on_step=steps_shown(progress, reading, planned, lambda: at_turn.append(seen_now(ctx))), **settings)
            answered = yield from shown_as_it_goes(steps, planned)
    except gr.Error as exc:
        best = exc.__cause__.best if isinstance(exc.__cause__, Cancelled) else None
        if best is not None and planned:
            yield provisional_outputs(best, planned[-1].documents)
        raise
    ran_on = at_turn[-1] if at_turn else seen_now(ctx)
    read, readout, changed = answered.read, answered.readout, changed_since(ran_on, seen)
    documents = read.documents
    if RUNS_IN_WORKER:
        ctx.session.learn(readout)
    result = readout.result
    if changed:
        result.notices.insert(0, changed)
    result.notices[:0] = [fmt.left_out_notice(name, why) for name, why in read.left_out]
    for notice in shown_notices(result):
        gr.Warning(escape(notice))
    best = result.answers[0] if result.answers else None
    place = None  # where the passage shown stands in its file
    if result.verdict is not None and result.verdict.found is False:  # no span in its passage reads as the answer
        passage = fmt.closest_passages([document.text for document in documents], result.answers)
    elif best is not None and best.document_index >= 0:
        document = documents[best.document_index]
        passage = fmt.evidence(document.text, best.start_char, best.end_char)
        place = passage_place(document, *fmt.passage_bounds(document.text, best.start_char, best.end_char))
    else:
        passage = []
    runs = history_outputs(history, [readout])  # the history, its table and the plots' data: one bar per run
    readout_json = readout.to_json()
    # for the page's answer area, which offers both as downloads
    remember(ctx.outcomes, page_session(request), Outcome(readout=readout, readout_json=readout_json,
                                                          history_table=fmt.history_data(runs["history"]),
                                                          passage_place=place))
    page_view.keep_pages(page_session(request), result, documents)  # its pages, drawn if the visitor opens them
    yield {
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
        "seen": ran_on,
        "readout": readout_json,
    }


def shown_notices(result) -> list[str]:
    """The notices the page shows beside an answer: all but the verdict's own where nothing is found (the line over
    the answer box says why, once)."""
    verdict = result.verdict
    said = verdict.notices if verdict is not None and verdict.found is False else []
    return [notice for notice in result.notices if notice not in said]


def shown_as_it_goes(steps, planned: list) -> Iterator[dict]:
    """A request's steps (`longqa.request.request_steps`) as the page's updates: each best answer so far as
    `provisional_outputs` over the documents of the plan (`planned`); returns how the request ended. Closed, it
    closes the request: the read goes no further."""
    try:
        while True:
            try:
                best = next(steps)
            except StopIteration as done:
                return done.value
            yield provisional_outputs(best, planned[-1].documents)
    finally:
        steps.close()


def answered_here(ctx: AppContext, progress=None):
    """Where the page's planned request is answered (`longqa.request.Answerer`): in this process (`answer`), or under
    ZeroGPU in a forked worker (`answer_on_gpu`), its stop check a key, its best answers so far yielded back."""
    def on_gpu(plan, extract_s, gate, should_stop) -> Iterator[Provisional]:
        with policy.stop_key(should_stop) as key:
            work_s = policy.answer_work_s(plan, ctx.measured())  # once: the grant and the budget
            return (yield from from_gpu_worker(answer_on_gpu(ctx.key, plan, extract_s, progress, key, work_s)))

    return on_gpu if ZERO_GPU else lambda plan, extract_s, gate, stop: answer(ctx, plan, extract_s, progress, gate,
                                                                              stop)


def answer(ctx: AppContext, plan, extract_s: float = 0.0, progress=None, gate=None,
           should_stop: Callable[[], bool] | None = None) -> Iterator[Provisional]:
    """The model work of one planned request (`Backend.ask_steps`): its batches take their turns through `gate`
    (None: one turn held throughout), and it ends between batches when `should_stop` says so. Its windows are shown
    as progress; it yields the best answer so far after each batch and returns the readout."""
    if ctx.session.loaded is None:
        raise ModelLoadError(f"{NO_MODEL} {PICK_MODEL}")
    return (yield from ctx.session.ask_steps(plan, extract_s=extract_s, gate=gate, should_stop=should_stop,
                                             on_window_progress=windows_shown(progress)))


def windows_shown(progress):
    """The engine's `on_window_progress`: windows done and to go, and the time left, shown as progress."""
    if progress is None:
        return None

    def on_window_progress(state) -> None:
        left = f", about {fmt.format_seconds(state.eta_s)} left" if state.eta_s is not None else ""
        progress((state.windows_done, state.windows_total),
                 desc=f"{state.windows_done:,} windows done, {state.windows_left:,} to go{left}", unit="windows")
    return on_window_progress


@gpu_function(duration=answer_duration)
def answer_on_gpu(context_key: str, plan, extract_s: float = 0.0, progress=None, stop_key: str | None = None,
                  work_s: float | None = None) -> Iterator[Provisional | Readout]:
    """`answer` as ZeroGPU's GPU function: its arguments and what it yields pickle (ZeroGPU runs it in a forked
    worker and sends each yield back as it comes), so it finds the context and the stop check by key; its turn is
    held throughout. It yields each best answer so far, then the readout. In the worker the plan's time budget is
    no more than the GPU time it asked for: `work_s`, the forward seconds the page predicted once for both."""
    ctx = CONTEXTS[context_key]
    if RUNS_IN_WORKER:  # ZeroGPU ends the function at the duration it asked for: read no further than that
        granted_s = policy.granted_work_s(work_s if work_s is not None else policy.answer_work_s(plan, ctx.measured()))
        plan = plan.with_budget(min(plan.settings.max_request_s or granted_s, max(1.0, granted_s)))
    with user_errors("Answering"):  # inside: ZeroGPU passes only gr.Error through from its worker
        yield (yield from answer(ctx, plan, extract_s, progress, should_stop=policy.stop_check(stop_key)))


def from_gpu_worker(updates: Iterator[Provisional | Readout]) -> Iterator[Provisional]:
    """`answer_on_gpu`'s best answers so far, yielded as they come; returns the readout it ends with. Closed, it is
    read to its end (ZeroGPU releases the GPU as the function ends), and how that ends is not the close's."""
    readout = None
    try:
        for update in updates:
            if isinstance(update, Readout):
                readout = update
            else:
                yield update
    except GeneratorExit:
        with contextlib.suppress(Exception):
            for _ in updates:
                pass
        raise
    if readout is None:
        raise RuntimeError("the GPU function ended without a readout")
    return readout


def ask_in_full(ctx: AppContext, files, pasted_text, question, top_k, history, seen=None, no_answer_below="",
                request: gr.Request = None, progress=gr.Progress()) -> Iterator[dict]:
    """The same question read in full ("Read the whole document"): every window, whatever the ranking says."""
    yield from ask(ctx, files, pasted_text, question, top_k, "full", history, seen, no_answer_below, request,
                   progress)


def show_answer_page(ctx: AppContext, choice, request: gr.Request = None) -> dict:
    """The picked answer's PDF page drawn with its mark (`page_view`: the top answer's where none is picked), at the
    visitor's place at the door, its file held meanwhile; drawn once, then kept. One that cannot be drawn says why."""
    session = page_session(request)
    page = page_view.page_of(session, choice)
    if page is None:
        return {"page_note": page_view.NO_PAGE, "page_image": None}
    picture = page_view.kept_image(session, page.choice)
    if picture is None:
        try:
            with ctx.lane.door(visitor_keys(ctx, request)), ctx.uploads.reading([page.source]):
                png = page_image(page.source, page.document, page.mark, abandonment_check())
        except LongQAError as exc:
            return {"page_note": escape(str(exc)), "page_image": None}
        # the child's PNG as it is, a file gradio serves a copy of: not decoded here to be encoded again
        path = DOWNLOADS.new() / f"page-{page.mark.page}.png"
        path.write_bytes(png)
        picture = str(path)
        page_view.keep_image(session, page.choice, picture)
    return {"page_note": f"{escape(page.document)}, page {page.mark.page}: the answer is marked in yellow.",
            "page_image": picture}


def clear_answer(status: str) -> dict:
    """What a new question or new documents do to the answer area before anything runs: no previous answer, its
    evidence, readouts or downloads left showing; `status` says why."""
    tables = {name: pd.DataFrame([], columns=headers) for name, headers in CLEARED_TABLES.items()}
    return {"status": status, "answer": gr.update(value="", label=fmt.answer_label()), "evidence": None,
            "readout": None, "download_json": no_download(), "download_csv": no_download(), "wait": "", **tables,
            "question_note": gr.update(visible=False), **page_view.room_closed()}


def start_asking(files, pasted_text, question) -> dict:
    """The page's first step of every way of asking: the answer area cleared and Stop enabled; but where there are
    documents and the question box is empty, the ask stops here, unseen (an error gradio does not show), and
    `no_question_shown` says so beside the box: no failed request, no notice, no scroll. (An API call's empty
    question is still `ask`'s error: the API runs `ask` alone.)"""
    has_documents = bool(files) or (isinstance(pasted_text, str) and bool(pasted_text.strip()))
    if has_documents and isinstance(question, str) and not question.strip():
        raise gr.Error(EMPTY_QUESTION, visible=False, print_exception=False)
    return {**clear_answer(fmt.ASKING_STATUS), **stop_enabled(True)}


def no_question_shown() -> dict:
    """Ask with the question box empty: a short note right under the box, and the line over the answer says so."""
    return {"status": fmt.NO_QUESTION_STATUS, "question_note": gr.update(value=fmt.NO_QUESTION_NOTE, visible=True)}


def stop_enabled(enabled: bool) -> dict:
    """The Stop button, enabled while a read or a comparison runs (pressed with nothing running it does nothing)."""
    return {"stop": gr.update(interactive=enabled)}


def new_documents(files, pasted_text) -> dict:
    """The answer area when the documents change: cleared, saying what to do next (press Ask, or give a document
    where none is left: a rejected upload or a cleared box leaves none)."""
    has_text = isinstance(pasted_text, str) and pasted_text.strip()
    return clear_answer(fmt.NEW_DOCUMENTS_STATUS if files or has_text else fmt.NO_DOCUMENTS_STATUS)


def answered_before(ctx: AppContext, readout) -> dict:
    """After a reload: where the answer shown (its readout) came from another model or profile than the one loaded
    now, the line over it says so; else it stays."""
    session = ctx.session
    if (not isinstance(readout, dict) or not readout.get("model") or session.loaded is None
            or (readout["model"], readout.get("profile")) == (session.model_ref, session.profile_name)):
        return {"status": gr.skip()}
    return {"status": fmt.answered_before_status(str(readout["model"]), str(readout.get("profile")),
                                                 loaded_now(ctx))}


def no_download() -> dict:
    """A download button hidden and emptied: a new update each time (gradio takes an update's value out of the
    dict it is given)."""
    return gr.update(value=None, visible=False)


def show_outcome(ctx: AppContext, request: gr.Request = None) -> dict:
    """After an answer through the page: over the answer, whether it was found (or the error's message, or how far
    a Stop got), the answer box's label (the answer, or the partial one a Stop kept), the passage box's label (the
    closest passages where nothing was found), the readout and history the answer showed, to download, and Stop
    disabled until the next read."""
    outcome = ctx.outcomes.pop(page_session(request), None)
    if outcome is None:
        return {"status": gr.skip(), "download_json": gr.skip(), "download_csv": gr.skip(), "evidence": gr.skip(),
                "answer": gr.skip(), "answers": gr.skip(), **stop_enabled(False)}
    if outcome.readout is None:
        status = (fmt.stopped_status(*outcome.stopped, outcome.partial) if outcome.stopped is not None
                  else fmt.failed_status(outcome.message or "The request failed."))
        if outcome.stopped is None:  # failed: no best answer so far stays shown as if it were the answer
            return {"status": status, "download_json": no_download(), "download_csv": no_download(),
                    "evidence": gr.update(value=None, label=fmt.EVIDENCE_LABEL),
                    "answer": gr.update(value="", label=fmt.answer_label()),
                    "answers": pd.DataFrame([], columns=fmt.ANSWER_HEADERS), **stop_enabled(False)}
        label = fmt.answer_label(fmt.partial_label(*outcome.stopped) if outcome.partial is not None else None)
        if outcome.partial is not None and not outcome.partial.plausible:
            label = fmt.implausible_label(*outcome.stopped, stopped=True)
        answers = (pd.DataFrame(fmt.provisional_rows(outcome.partial, fmt.UNJUDGED), columns=fmt.ANSWER_HEADERS)
                   if outcome.partial is not None else gr.skip())  # the best so far: never judged now
        return {"status": status, "download_json": no_download(), "download_csv": no_download(),
                "evidence": gr.update(label=fmt.EVIDENCE_LABEL), "answer": gr.update(label=label),
                "answers": answers, **stop_enabled(False)}
    folder = DOWNLOADS.new()
    readout_path = folder / "longqa-readout.json"
    readout_path.write_text(json.dumps(outcome.readout_json, indent=2, ensure_ascii=False), encoding="utf-8")
    history_path = folder / "longqa-history.csv"
    outcome.history_table.to_csv(history_path, index=False)
    result = outcome.readout.result
    evaluation = result.verdict.evaluation if result.verdict is not None else None
    return {"status": fmt.answer_status(result, doc_url(evaluation),
                                        fmt.ran_on(outcome.readout.model, outcome.readout.profile)),
            "evidence": gr.update(label=fmt.evidence_label(result, outcome.passage_place)),
            "download_json": gr.update(value=str(readout_path), visible=True),
            "download_csv": gr.update(value=str(history_path), visible=True),
            "answer": gr.update(label=fmt.answer_label("none found" if result.verdict is not None
                                                       and result.verdict.found is False else None)),
            "answers": gr.skip(),  # no longer the best so far
            **stop_enabled(False)}
