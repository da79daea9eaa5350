"""The web page: long-document question answering with a hardware-profile switch and memory/latency readouts.

UI only: handlers reach the model through one backend (`longqa.backend.Backend`: the embedded `Session` or Ray
Serve's `RaySession`) that plans a request, answers the plan, takes a training step, loads, and says whether a
profile runs here; they format the typed readouts with `ui_format`, and turn domain errors into `gr.Error` (the only
place that happens). The page is one small builder per panel, each wiring its own events; handlers return their
values by name and the wiring hands them to gradio keyed by component. Each way of asking clears the answer area
first and then says how the answer ended (found or not, an error's message, how far a Stop got), kept per page
session in the context; the page's words for a first visit are `page_help`'s. Imported, it builds `demo` without
loading a model (the model loads on the first page visit or request; under ZeroGPU at import); `python app.py`
builds its one context and page from the command line and loads the model before serving.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import html
import inspect
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from longqa_core.openmp_wait import limit_spin_wait

limit_spin_wait()  # before anything below loads torch, and with it libgomp, which reads its spin count once

import gradio as gr

try:  # Hugging Face Spaces ship `spaces`; imported before torch so that ZeroGPU can patch CUDA first
    import spaces
except ImportError:
    spaces = None

import pandas as pd
from gradio.blocks import Block
from gradio.context import LocalContext
from gradio.exceptions import InvalidPathError
from pydantic import ValidationError
from starlette.middleware import Middleware

import page_help
import ui_format
from compare_panel import PageHooks, build_compare_panel, build_history_panel, history_outputs, recolour_after
from page_events import bind, listen
from plan_panel import build_plan_panel
from longqa.arguments import positive_int
from longqa.backend import Backend
from longqa.models import DEFAULT_MODEL, KNOWN_MODELS, is_offline, needs_download
from longqa.readout import Readout
from longqa.serving import policy
from longqa.serving.lane import MAX_ACTIVE, MAX_QUEUED_WINDOWS, ModelLane
from longqa.serving.ray_replicas import DEFAULT_BATCH_REQUESTS, RaySession
from longqa.serving.uploads import (DEFAULT_KEEP_S, DEFAULT_PER_VISITOR_BYTES, DEFAULT_TOTAL_BYTES, UploadGate,
                                    UploadStore, sweeping)
from longqa.session import NO_MODEL, SAMPLES_DIR, Session, read_request, sample_examples
from longqa_core.documents import SUPPORTED_EXTENSIONS
from longqa_core.errors import Cancelled, DocumentError, InputError, LongQAError, ModelLoadError, ProfileError
from longqa_core.gpu_devices import gpu_snapshot
from longqa_core.html_files import READERS as HTML_READERS
from longqa_core.limits import DEFAULT_MAX_TOTAL_TOKENS, whole_number
from longqa_core.reading import DEFAULT_READING, READING_MODES
from strategies.hardware import Hardware, detect_hardware
from strategies.profiles import (PROFILES, Profile, custom_profile, describe_profiles, device_for, get_profile,
                                 profile_choices)
from strategies.registry import make_strategy, strategy_cards

ZERO_GPU = os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")  # as the `spaces` package reads it
# GPU functions then run in a forked worker: what their forward passes measured comes back in the readout.
RUNS_IN_WORKER = ZERO_GPU and spaces is not None

MODEL_CONCURRENCY = "model"  # model reloads, one at a time
# Requests (answers, training steps) run their reading and checks side by side, then take turns on the model in
# the context's lane: a slow upload delays only its own visitor, and a reload waits for the answer in flight.
REQUEST_CONCURRENCY = "requests"
REQUEST_WORKERS = 32  # threads that read and then wait in the lane, which orders their turns on the model
SPACE_MAX_REQUEST_S = 120.0
SPACE_VISITOR_HEADER = "X-Forwarded-For"
DEFAULT_QUEUE_SIZE = 64
DEFAULT_MAX_FILE_MB = 50.0
MB = 1024 * 1024
DEFAULT_TOP_K = 3
DEFAULT_TRAINING_WINDOW = 512
GPU_REFRESH_S = 2.0
PICK_MODEL = "Pick a model or profile above."  # after a message saying why no model is loaded
MAX_VISITOR_NOTES = 256  # visitors whose last outcome or Stop the page keeps (the oldest go first)
DOWNLOADS_KEEP_S = 3600.0  # a download file is removed after an hour (gradio serves its own copy)
CSS = """
#best-answer textarea { font-size: 1.8rem !important; font-weight: 600; line-height: 1.3; }
#banner { border: 2px solid #f59e0b; border-radius: 8px; padding: 0.25rem 1rem; background: #fffbeb; }
#answer-status h3 { margin: 0 0 0.2rem 0; }
#answer-status, #load-status { min-height: 2.5rem; }
/* a phone: nothing wider than the screen; long words and cells wrap */
.gradio-container { overflow-wrap: anywhere; }
@media (max-width: 640px) { .gradio-container { padding-left: 4px !important; padding-right: 4px !important; } }
"""


@dataclass
class AppContext:
    """What every handler needs: the shared backend, this machine, and the limits set on the command line."""

    session: Backend
    hardware: Hardware
    models: list[str]  # the only models the page may load: the registry plus the command line's --model
    max_file_bytes: int
    max_total_tokens: int
    start: dict = field(default_factory=dict)  # what to load first: profile, model, strategies
    load_error: str | None = None
    lock_profile: bool = False  # a shared deployment: the profile and model cannot be changed from the page or API
    max_request_s: float | None = None  # refuse requests predicted to take longer (None: no limit)
    lane: ModelLane = field(default_factory=ModelLane)  # requests take turns on the model between batches
    uploads: UploadStore = field(default_factory=UploadStore)  # the uploads on disk, bounded and deleted
    visitor_header: str | None = None  # the proxy's header naming the visitor's address (None: a direct connection)
    key: str = field(default_factory=lambda: uuid.uuid4().hex)  # how GPU functions find this context
    # Per page session (gradio's session hash), bounded: how its last request ended, for the answer area (an error's
    # message, a Stop, or the readout), and when it last pressed Stop.
    outcomes: OrderedDict = field(default_factory=OrderedDict)
    stops: OrderedDict = field(default_factory=OrderedDict)

    @property
    def selection(self) -> dict:
        """What the dropdowns show: what the loaded model was asked for (with the model that did load: the demo
        model after a fallback), or before any load, what the page starts with."""
        requested = self.session.requested
        if not requested:
            return self.start
        return {"profile": requested[1], "model": self.session.model_ref,
                "strategies": list(requested[2]) if len(requested) > 2 else []}

    def window_s(self) -> float | None:
        """Seconds a window takes on the loaded model (its one throughput estimate), or None before any ran."""
        measured = self.measured()
        return measured.window_s if measured is not None else None

    def tokens_per_s(self) -> float | None:
        """Window tokens a second on the loaded model (the same estimate), or None before any ran."""
        measured = self.measured()
        return measured.tokens_per_s if measured is not None else None

    def measured(self):
        """The loaded model's record of its forward passes (`BatchState`), or None without a model."""
        loaded = self.session.loaded
        return loaded.batch_state if loaded is not None else None


# The contexts GPU functions reach by key. ZeroGPU pickles a GPU function's arguments to a forked worker, so those
# arguments are the request's own inputs and the key; the worker inherits this module state, model included.
CONTEXTS: dict[str, AppContext] = {}


def gpu_function(duration):
    """`@spaces.GPU(duration=...)` where the `spaces` package is installed (a no-op outside ZeroGPU), else nothing."""
    if spaces is None:
        return lambda fn: fn
    return spaces.GPU(duration=duration)


def make_context(session: Backend | None = None, *, models=None, default_model: str = DEFAULT_MODEL,
                 default_profile: str = "auto", max_file_mb: float = DEFAULT_MAX_FILE_MB,
                 max_total_tokens: int = DEFAULT_MAX_TOTAL_TOKENS,
                 hardware: Hardware | None = None, lock_profile: bool = False, max_request_s: float | None = None,
                 queue_size: int = DEFAULT_QUEUE_SIZE, visitor_header: str | None = None,
                 max_queued_windows: int | None = MAX_QUEUED_WINDOWS, uploads: UploadStore | None = None
                 ) -> AppContext:
    get_profile(default_profile)
    allowed = list(dict.fromkeys([*(models if models is not None else KNOWN_MODELS), default_model]))
    if DEFAULT_MODEL in allowed and "demo" not in allowed:
        allowed.append("demo")  # the default falls back to the demo model offline: the dropdown must show it
    session = session or Session()
    hardware = hardware or session.hardware or detect_hardware()
    session.hardware = hardware  # profiles resolve for the machine the page describes, in the page and the loader
    ctx = AppContext(session=session, hardware=hardware, models=allowed,
                     max_file_bytes=int(max_file_mb * 1024 * 1024), max_total_tokens=max_total_tokens,
                     start={"profile": default_profile, "model": default_model, "strategies": []},
                     lock_profile=lock_profile, max_request_s=max_request_s or None,
                     visitor_header=visitor_header or None, uploads=uploads or UploadStore())
    ctx.lane = ModelLane(max_waiting=queue_size, capacity=session.capacity,
                         max_active=max(MAX_ACTIVE, session.capacity), max_queued_windows=max_queued_windows or None,
                         window_s=ctx.window_s)
    CONTEXTS[ctx.key] = ctx
    return ctx


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
    """Toasts render HTML: file names and document text in messages must stay text."""
    return html.escape(message, quote=False)


class Page(gr.Blocks):
    """gradio's Blocks, telling a caller why a file argument was refused: a crafted call naming a server path that
    was never uploaded is refused by gradio before any handler runs, and with `show_error=False` (which keeps the
    server's paths out of messages) its reply carried no message at all."""

    uploads: UploadStore | None = None  # the page's uploads on disk (build_blocks sets them)
    visitor_header: str | None = None

    def launch(self, *args, app_kwargs: dict | None = None, **kwargs):
        """gradio's launch, with the page's upload route bounded (`UploadGate`) and its uploads swept, however the
        page is launched (`serve`, tests, a Space)."""
        if self.uploads is not None:
            app_kwargs = {**upload_bounds(self), **(app_kwargs or {})}
        return super().launch(*args, app_kwargs=app_kwargs, **kwargs)

    async def preprocess_data(self, *args, **kwargs):
        try:
            return await super().preprocess_data(*args, **kwargs)
        except InvalidPathError:
            raise gr.Error(UNUPLOADED_FILE, print_exception=False) from None
        except ValidationError as exc:  # with show_error=False, gradio's reply would carry no message at all
            raise gr.Error(wrong_shape(args[0] if args else kwargs["block_fn"], args[1] if len(args) > 1
                                       else kwargs["inputs"], exc), print_exception=False) from None

    def validate_inputs(self, block_fn, inputs) -> None:
        if len(inputs) == len(block_fn.inputs) - 1 and getattr(block_fn.inputs[-1], "elem_id", None) == LATER_INPUT:
            inputs.append("")  # a call made before the not-found threshold was added: the model's own rule
        try:
            super().validate_inputs(block_fn, inputs)
        except ValueError:  # gradio's message lists the components' reprs: say what is wrong, not how it is built
            raise gr.Error(f"This call sent {len(inputs)} values; {block_fn.api_name or 'this event'} takes "
                           f"{len(block_fn.inputs)} (gradio_client fills the page's own state values itself).",
                           print_exception=False) from None


# What each kind of input must be, by gradio's data model, for a message when a call sends something else.
EXPECTED_SHAPES = {
    "ListFiles": "a list of files uploaded with the request, or null for none (gradio_client: [handle_file(path), "
                 "...]; the raw API: [{\"path\": ..., \"meta\": {\"_type\": \"gradio.FileData\"}}, ...] with paths "
                 "that /gradio_api/upload returned)",
    "FileData": "a file uploaded with the request (gradio_client: handle_file(path))",
}


def wrong_shape(block_fn, inputs: list, exc: ValidationError) -> str:
    """Which input of the call had the wrong shape, what it got, and what it expects."""
    for component, value in zip(block_fn.inputs, inputs):
        model = getattr(component, "data_model", None)
        if model is not None and model.__name__ == exc.title:
            label = getattr(component, "label", None) or type(component).__name__
            expected = EXPECTED_SHAPES.get(exc.title, f"a value gradio reads as {exc.title}")
            return f"'{label}' must be {expected}; this call sent {shape_of(value)}."
    return f"An input of this call has the wrong shape: {exc.error_count()} problem(s) reading it as {exc.title}."


def shape_of(value) -> str:
    """A value's shape in a few words: 'a dict', 'a list of str'."""
    if isinstance(value, list):
        kinds = sorted({type(item).__name__ for item in value})
        return f"a list of {', '.join(kinds)}" if kinds else "an empty list"
    if value is None:
        return "null"
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


UPLOAD_ROUTE = "/gradio_api/upload"


def upload_bounds(page: Page) -> dict:
    """The FastAPI arguments that bound `page`'s uploads: the gate in front of gradio's upload route (a visitor is
    the proxy header's first hop where the deployment names one; on a direct connection only the total counts) and
    the sweep that deletes old uploads (and tells gradio they are gone)."""
    header = (page.visitor_header or "").lower()

    def visitor_of(headers: dict) -> str | None:
        address = first_hop(headers.get(header)) if header else None
        return f"address:{address}" if address else None

    page.uploads.on_delete = page.upload_file_set.discard
    return {"middleware": [Middleware(UploadGate, store=page.uploads, route=UPLOAD_ROUTE, visitor_of=visitor_of)],
            "lifespan": sweeping(page.uploads)}


LATER_INPUT = "no-answer-below"  # an input added after the API was promised; calls without it get its default
UNUPLOADED_FILE = ("A file named in this request was never uploaded to this server, so it cannot be read: upload the "
                   "file with the request (gradio_client: pass handle_file(path), not the path itself).")


# ------------------------------------------------------------------------------------------------ loading
def check_model_allowed(ctx: AppContext, model_ref: str) -> None:
    if model_ref not in ctx.models:
        raise ModelLoadError(f"This page can only load the listed models ({', '.join(ctx.models)}); "
                             f"{str(model_ref)[:200]!r} is not one of them.")


def falls_back_to_demo(model_ref: str) -> bool:
    """Whether a load of `model_ref` that cannot fetch it from the Hub loads the bundled demo model instead (the
    default model does, so that the page always starts with something that answers; any other is refused)."""
    return model_ref == DEFAULT_MODEL


def check_model_reachable(model_ref: str) -> None:
    """A Hub model that is not in the local cache while downloads are off is refused in plain words before the
    loader tries (the default model still falls back to the demo model there, as the loader decides)."""
    if not falls_back_to_demo(model_ref) and is_offline() and needs_download(model_ref):
        raise ModelLoadError(f"Could not fetch {model_ref!r} from the Hugging Face Hub: it is not in this machine's "
                             "cache, and downloads are off here (HF_HUB_OFFLINE is set). Pick a model not marked "
                             "'cannot load here', such as the bundled demo model.")


def model_note(ref: str) -> str:
    """What the Model dropdown adds to a model's name where it is not on this machine: that its first load downloads
    it, or, offline, that it cannot load here; for a model that falls back to the bundled demo model when it cannot
    be fetched (`falls_back_to_demo`), that the demo model answers instead. Nothing for a model on disk."""
    if not needs_download(ref):
        return ""
    if is_offline():
        if falls_back_to_demo(ref):
            return " (not in the local cache, and downloads are off: the bundled demo model answers instead)"
        return " (cannot load here: not in the local cache, and downloads are off)"
    if falls_back_to_demo(ref):
        return (" (not in the local cache: the first load downloads it from the Hub; if it cannot, the bundled demo "
                "model answers instead)")
    return " (not in the local cache: the first load downloads it from the Hub)"


def current_model(ctx: AppContext) -> str:
    session = ctx.session
    if session.loaded is None:
        return "No model is loaded now."
    return f"Still using {loaded_now(ctx)}."


def loaded_now(ctx: AppContext) -> str:
    """The model loaded now, in words: "demo with profile cpu" (or that none is)."""
    session = ctx.session
    if session.loaded is None:
        return "no model loaded yet"
    return f"{session.model_ref} with profile {session.profile_name}"


def load_selection(ctx: AppContext, profile_name: str, model_ref: str, strategies=(), progress=None) -> None:
    """Load (model, profile) into the session; on failure the previous model stays and the error says so. The
    selection then names the model that did load: the bundled demo model when the default could not be fetched."""
    on_progress = (lambda fraction, message: progress(fraction, desc=message)) if progress else None
    try:
        check_model_allowed(ctx, model_ref)
        check_model_reachable(model_ref)
        profile = ctx.session.runnable_profile(profile_name, strategies)
        ctx.session.load(model_ref, profile, on_progress=on_progress, fallback_to_demo=falls_back_to_demo(model_ref),
                         force=profile.name == "custom",
                         strategies=tuple(strategies or ()) if profile.name == "custom" else ())
    except LongQAError as exc:
        raise type(exc)(f"{exc} {current_model(ctx)}") from exc
    ctx.load_error = None


def ensure_loaded(ctx: AppContext, progress=None) -> None:
    """Load the selected model if none is loaded yet (the first visit or request after start)."""
    if ctx.session.loaded is not None:
        return
    with ctx.session.lock:
        if ctx.session.loaded is not None:
            return
        try:
            load_selection(ctx, ctx.start["profile"], ctx.start["model"], ctx.start["strategies"], progress)
        except LongQAError as exc:
            ctx.load_error = str(exc)
            raise


def banner(ctx: AppContext) -> dict:
    """The warning over the page: running on the demo model instead of the chosen one, or nothing loaded."""
    loaded = ctx.session.loaded
    if loaded is None and ctx.load_error:
        text = f"**{NO_MODEL}** {ui_format.escape_markdown(ctx.load_error)} {PICK_MODEL}"
    elif loaded is not None and loaded.readout.fallback_reason:
        wanted = ctx.session.requested[0] if ctx.session.requested else DEFAULT_MODEL
        text = (f"**Running on the bundled demo model**, not {ui_format.escape_markdown(wanted)}. "
                f"{ui_format.escape_markdown(loaded.readout.fallback_reason)} The demo model is tiny: it answers "
                "questions like *What is the frequency of …?* about sentences *The frequency of … is ….*, "
                "as in the examples below.")
    else:
        return gr.update(value="", visible=False)
    return gr.update(value=text, visible=True)


def load_status(ctx: AppContext) -> str:
    """One line over the page: what is loaded now, and how long its load took."""
    loaded = ctx.session.loaded
    if loaded is None:
        return "**No model loaded yet.**"
    readout = loaded.readout
    return (f"Loaded **{ui_format.escape_markdown(ctx.session.model_ref)}** with profile "
            f"**{ui_format.escape_markdown(ctx.session.profile_name)}** in "
            f"{ui_format.format_seconds(readout.load_time_s)}.")


def load_outputs(ctx: AppContext) -> dict:
    """The banner and the load readout (table and JSON) for the model loaded now."""
    loaded = ctx.session.loaded
    rows = [dict(ui_format.load_rows(loaded.readout))] if loaded is not None else []
    return {"banner": banner(ctx), "load_table": pd.DataFrame(rows, columns=ui_format.LOAD_HEADERS),
            "load_json": loaded.readout.to_dict() if loaded is not None else {}}


def auto_profile(ctx: AppContext) -> Profile | None:
    """What `auto` stands for with the model shown, by the loader's own rule (see `Session.auto_profile`)."""
    return ctx.session.auto_profile(ctx.selection["model"])


def shown_selection(ctx: AppContext) -> dict:
    """The dropdowns as they must read now: the profile chosen, with `auto` naming what it picked for the model;
    the model loaded (the demo model after a fallback); the strategies ticked."""
    selection = ctx.selection
    return {"profile": gr.update(choices=profile_choices(ctx.hardware, auto_profile(ctx)), value=selection["profile"]),
            "model": gr.update(value=selection["model"]), "strategies": gr.update(value=selection["strategies"])}


# ------------------------------------------------------------------------------------------------ handlers
def on_page_load(ctx: AppContext, progress=gr.Progress()) -> dict:
    """A new visitor: load the model if none is yet, and show what is selected and loaded now."""
    try:
        ensure_loaded(ctx, progress)
    except LongQAError:
        pass  # the banner shows why; the page stays usable to pick another model
    return {**shown_selection(ctx), "seen": seen_now(ctx), **load_outputs(ctx), "load_status": load_status(ctx)}


def load_profile(ctx: AppContext, profile_name: str, model_ref: str, strategies=None, seen=None,
                 request: gr.Request = None, progress=gr.Progress()) -> dict:
    """Reload with another profile or model, in turn with the answers; a failed load keeps the previous model.
    Refused when locked."""
    with user_errors("Loading"):
        if ctx.lock_profile:
            raise ProfileError(f"This deployment fixes the model and profile: it runs {loaded_now(ctx)}, and "
                               "they cannot be changed from the page or the API.")
        with model_turn(ctx, request, progress, exclusive=True):
            load_selection(ctx, profile_name, model_ref, strategies or [], progress)
    return {"seen": seen_now(ctx), **load_outputs(ctx)}


def start_loading(ctx: AppContext, profile_name: str, model_ref: str) -> dict:
    """The moment a reload is asked for: say what is loading, and disable asking until it ends (`show_loaded`)."""
    wanted = model_ref or ctx.selection["model"]
    return {"load_status": f"**Loading {ui_format.escape_markdown(wanted)} with profile "
                           f"{ui_format.escape_markdown(profile_name)}…** Ask is disabled until it ends.",
            "ask": gr.update(interactive=False), "full": gr.update(interactive=False)}


def start_profile_pick(ctx: AppContext, profile_name: str, model_ref: str, picked: gr.SelectData) -> dict:
    """A profile picked: `start_loading` for the pick, which the dropdown is set to again. The load that follows
    reads the dropdown, and another event's outputs (a visit's `on_page_load`, computed before the pick) may have
    set it back in between: the pick itself is the event's data."""
    return {**start_loading(ctx, picked.value, model_ref), "profile": gr.update(value=picked.value)}


def start_model_pick(ctx: AppContext, profile_name: str, model_ref: str, picked: gr.SelectData) -> dict:
    """A model picked: as `start_profile_pick`, for the model dropdown."""
    return {**start_loading(ctx, profile_name, picked.value), "model": gr.update(value=picked.value)}


def show_loaded(ctx: AppContext) -> dict:
    """After a load, done or refused: the dropdowns, the readouts and the line over the page show what is loaded
    now, and asking is enabled again."""
    return {**shown_selection(ctx), **load_outputs(ctx), "load_status": load_status(ctx),
            "ask": gr.update(interactive=True), "full": gr.update(interactive=True)}


def seen_now(ctx: AppContext) -> dict:
    """What a visitor has seen loaded (kept per browser tab): the session's load generation and its names."""
    return {"generation": ctx.session.generation, "model": ctx.session.model_ref,
            "profile": ctx.session.profile_name}


def changed_since(ctx: AppContext, seen) -> str | None:
    """A notice when another visitor switched the model or profile since this visitor's last answer or load."""
    if not seen or seen.get("generation") in (None, ctx.session.generation):
        return None
    return (f"The model or profile was changed by another visitor since your last answer: now {ctx.session.model_ref} "
            f"with profile {ctx.session.profile_name} (was {seen.get('model')} with {seen.get('profile')}).")


def show_custom_controls(profile_name: str) -> dict:
    custom = profile_name == "custom"
    return {"strategies": gr.update(visible=custom), "apply": gr.update(visible=custom)}


def preview_documents(ctx: AppContext, files, pasted_text, question, request: gr.Request = None) -> pd.DataFrame:
    """Characters, tokens and windows of each document before asking (windows depend on the question's length),
    with every limit checked; counted without the model, so a preview never waits for an answer in flight. It
    counts toward the visitor's requests, as an answer does."""
    if not files and not (pasted_text or "").strip():
        return pd.DataFrame([], columns=ui_format.DOCUMENT_HEADERS)
    with user_errors("Reading the documents"):
        with read_at_door(ctx, files, pasted_text, None, request) as (documents, _, _):
            if ctx.session.loaded is None:
                rows = [[d.name, d.n_chars, None, None] for d in documents]
            else:
                plan = ctx.session.plan(documents, (question or "").strip() or "?", "full",
                                        max_total_tokens=ctx.max_total_tokens)
                rows = ui_format.document_rows(plan.stats)
    return pd.DataFrame(rows, columns=ui_format.DOCUMENT_HEADERS)


def read_uploads(ctx: AppContext, files, pasted_text, question, progress=None):
    """`read_request` for the page: the uploads kept on disk while they are read (a deleted one named as such), a
    wait for an HTML reader shown as progress, and the read stopped when the request is abandoned."""
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
def read_at_door(ctx: AppContext, files, pasted_text, question, request: gr.Request | None, progress=None):
    """A request's place at the lane's door (counted toward the visitor's share and the queue: LaneBusyError past
    either, before anything is read) and its documents read there (`read_uploads`), held while the body plans it:
    yields (documents, seconds reading them, the place). What an answer, a preview and a comparison all read by."""
    with ctx.lane.door(visitor_keys(ctx, request)) as place:
        if progress is not None:
            progress(0.0, desc="Reading the documents")
        documents, extract_s = read_uploads(ctx, files, pasted_text, question, progress)
        yield documents, extract_s, place


def read_before_turn(ctx: AppContext, files, pasted_text, question, request: gr.Request | None, progress=None):
    """A request's documents and the seconds reading them (`read_at_door`), its place at the door left once they
    are read: for a comparison, whose exclusive turn on the model waits for every request in line before it, its
    own place included."""
    with read_at_door(ctx, files, pasted_text, question, request, progress) as (documents, extract_s, _):
        return documents, extract_s


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


def reader_wait_shown(progress) -> Callable[[int], None]:
    """The HTML readers' `on_wait`: how many pages are read or wait ahead, shown as progress."""
    def on_wait(ahead: int) -> None:
        if progress is not None:
            progress(0.0, desc=f"Waiting for an HTML reader: {ahead} page{'s' if ahead != 1 else ''} ahead")
    return on_wait


def abandonment_check() -> Callable[[], bool]:
    """Whether the gradio event running this handler was abandoned: Stop pressed (gradio cancels the event), the
    tab closed or the client vanished (gradio marks it dead), or nobody reads its stream (`policy.UnreadStall`: a
    queue call that was posted and never listened to leaves its progress messages piling up; a listening client
    reads them, if late). A direct call, outside gradio's queue, never is."""
    blocks, event_id = LocalContext.blocks.get(None), LocalContext.event_id.get(None)
    queue = getattr(blocks, "_queue", None)
    if queue is None or event_id is None:
        return lambda: False
    stall = policy.UnreadStall()

    def is_abandoned() -> bool:
        for job in list(queue.active_jobs):
            for event in job or ():
                if event._id == event_id:
                    unread = queue.pending_messages_per_session.get(event.session_hash)
                    return not event.alive or stall.is_unread(None if unread is None else unread.qsize())
        return True  # no longer among the running events: cancelled, or its client is gone

    return is_abandoned


@contextlib.contextmanager
def model_turn(ctx: AppContext, request: gr.Request | None, progress=None, *, exclusive: bool = False):
    """This request's turn on the model (`policy.model_turn`), with the wait shown as progress; yields the key of
    its abandonment check."""
    with policy.model_turn(ctx.lane, visitor_keys(ctx, request), abandonment_check(), waiting_shown(progress),
                           exclusive=exclusive) as stop_key:
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


def noting_outcome(ctx: AppContext, handler: Callable, outputs) -> Callable:
    """`handler` (an answer through the page) keeping how it ended for the answer area (`show_outcome`): an error's
    message, raised on as before; a Stop of this page session, after which every output is left as it was; the
    handler notes its readout itself. Same signature and hints."""
    signature = inspect.signature(handler)

    @functools.wraps(handler)
    def noted(*args, **kwargs):
        key = page_session(signature.bind_partial(*args, **kwargs).arguments.get("request"))
        if key is not None:
            ctx.stops.pop(key, None)  # a Stop pressed before this answer began is not for it
        try:
            return handler(*args, **kwargs)
        except gr.Error as exc:
            cause = exc.__cause__
            if key is not None and key in ctx.stops and isinstance(cause, Cancelled):
                remember(ctx.outcomes, key, Outcome(stopped=(cause.windows_done, cause.windows_total)))
                return {name: gr.skip() for name in outputs}
            # the toast's message is HTML-escaped (`escape`); the answer area escapes the plain text itself
            remember(ctx.outcomes, key, Outcome(message=html.unescape(str(exc.message))))
            raise
        finally:
            if key is not None:
                ctx.stops.pop(key, None)

    return noted


@dataclass
class Outcome:
    """How a page session's last request ended, for the answer area: its readout (with the JSON and the history
    table the answer showed), or the message it ended with (an error's), or how far it got before Stop."""

    readout: Readout | None = None
    message: str | None = None
    stopped: tuple[int, int] | None = None  # (windows read, windows planned)
    # what the answer showed, built once, for the downloads: the readout's JSON and the history's table
    readout_json: dict | None = None
    history_table: pd.DataFrame | None = None


def waiting_shown(progress) -> Callable[[int], None]:
    """The lane's `on_wait`: how many requests are ahead, shown as progress (when there is a progress bar)."""
    def on_wait(ahead: int) -> None:
        if progress is not None:
            progress(0.0, desc=f"Waiting for the model: {ahead} request{'s' if ahead != 1 else ''} ahead")
    return on_wait


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


def first_hop(header: str | None) -> str | None:
    """The first address of a forwarding header (`X-Forwarded-For: client, proxy1, proxy2`), or None."""
    first = (header or "").split(",")[0].strip()
    return first[:100] or None


def number_or_none(value, what: str):
    """A number from the page or the API: None or empty text gives None, a numeric string its number; InputError
    for other text."""
    if not isinstance(value, str):
        return value
    value = value.strip()
    try:
        return float(value) if value else None
    except ValueError:
        raise InputError(f"{what} must be a whole number, got {value!r}.") from None


def count_or_default(value, what: str, default: int) -> int:
    """A count from the page or the API (None or an empty field: `default`; a numeric string: its number), refused
    unless whole, before any work."""
    value = number_or_none(value, what)
    return default if value is None else whole_number(what, value)


def accept_counts_as_text(slider: gr.Slider) -> gr.Slider:
    """`slider`, whose API value may also be None (the handler's default) or a numeric string (its number), as the
    API's documentation says, with gradio's own bounds check kept; other text is a clear error, not gradio's bare
    exception. The instance's preprocess is wrapped rather than the class subclassed: gradio writes a .pyi stub
    beside every module that defines a component class, at each import."""
    check = slider.preprocess

    def preprocess(payload):
        try:
            value = number_or_none(payload, slider.label)
        except InputError as exc:
            raise gr.Error(str(exc), print_exception=False) from None
        return None if value is None else check(value)

    slider.preprocess = preprocess
    return slider


def answer_duration(context_key: str, plan, extract_s: float = 0.0, progress=None, stop_key=None) -> float:
    """Seconds of GPU to ask ZeroGPU for (`policy.answer_gpu_seconds`): the windows the plan expects to read (what
    the ranking picked, or every window) at the loaded model's measured throughput."""
    return policy.answer_gpu_seconds(plan, CONTEXTS[context_key].tokens_per_s())


@gpu_function(duration=answer_duration)
def answer_on_gpu(context_key: str, plan, extract_s: float = 0.0, progress=None,
                  stop_key: str | None = None) -> Readout:
    """The model work of one planned request, and nothing else: its arguments and its readout pickle (ZeroGPU runs
    it in a forked worker), and it reaches the loaded model through the module's contexts. Ends between batches
    when the request is abandoned; under ZeroGPU the plan's time budget is no more than the GPU time it asked for
    (a guided read whose answer stays weak then keeps what it read)."""
    ctx = CONTEXTS[context_key]
    on_window_progress = None
    if progress is not None:
        def on_window_progress(state):
            left = f", about {ui_format.format_seconds(state.eta_s)} left" if state.eta_s is not None else ""
            progress((state.windows_done, state.windows_total),
                     desc=f"{state.windows_done:,} windows done, {state.windows_left:,} to go{left}",
                     unit="windows")
    if spaces is not None:  # ZeroGPU ends the function at the duration it asked for: read no further than that
        granted_s = answer_duration(context_key, plan)
        budget_s = plan.settings.max_request_s or granted_s
        plan = plan.with_budget(min(budget_s, max(1.0, granted_s - policy.GPU_DURATION_BASE_S)))
    with user_errors("Answering"):  # inside: ZeroGPU passes only gr.Error through from its worker
        if ctx.session.loaded is None:
            raise ModelLoadError(f"{NO_MODEL} {PICK_MODEL}")
        return ctx.session.ask(plan, extract_s=extract_s, gate=policy.gate(stop_key),
                               should_stop=policy.stop_check(stop_key), on_window_progress=on_window_progress)


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
                progress(0.0, desc="Reading windows")
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
    passage = (ui_format.evidence(documents[best.document_index].text, best.start_char, best.end_char)
               if best is not None and best.document_index >= 0 else [])
    runs = history_outputs(history, [readout])  # the history, its table and the plots' data: one bar per run
    readout_json = readout.to_json()
    # for the page's answer area, which offers both as downloads
    remember(ctx.outcomes, page_session(request), Outcome(readout=readout, readout_json=readout_json,
                                                          history_table=runs["history_table"]))
    return {
        "documents": pd.DataFrame(ui_format.document_rows(result.documents),
                                  columns=ui_format.DOCUMENT_HEADERS),
        "answer": ui_format.best_answer(result),
        "answers": pd.DataFrame(ui_format.answer_rows(result.answers), columns=ui_format.ANSWER_HEADERS),
        "evidence": passage,
        "latency": pd.DataFrame(ui_format.latency_rows(result.latency_s, result.tokens_per_s),
                                columns=ui_format.LATENCY_HEADERS),
        "memory": pd.DataFrame(ui_format.memory_rows(result.memory), columns=ui_format.MEMORY_HEADERS),
        "run": pd.DataFrame(ui_format.run_rows(readout), columns=ui_format.RUN_HEADERS),
        **runs,
        "seen": seen_now(ctx),
        "readout": readout_json,
    }


def ask_in_full(ctx: AppContext, files, pasted_text, question, top_k, history, seen=None, no_answer_below="",
                request: gr.Request = None, progress=gr.Progress()) -> dict:
    """The same question read in full ("Read the whole document"): every window, whatever the ranking says."""
    return ask(ctx, files, pasted_text, question, top_k, "full", history, seen, no_answer_below, request, progress)


NO_DOWNLOAD = gr.update(value=None, visible=False)
CLEARED = {"answer": "", "evidence": None, "readout": None, "download_json": NO_DOWNLOAD, "download_csv": NO_DOWNLOAD}
CLEARED_TABLES = {"answers": ui_format.ANSWER_HEADERS, "latency": ui_format.LATENCY_HEADERS,
                  "memory": ui_format.MEMORY_HEADERS, "run": ui_format.RUN_HEADERS}


def clear_answer(status: str) -> dict:
    """What a new question or new documents do to the answer area before anything runs: no previous answer, its
    evidence, readouts or downloads left showing; `status` says why."""
    tables = {name: pd.DataFrame([], columns=headers) for name, headers in CLEARED_TABLES.items()}
    return {"status": status, **CLEARED, **tables}


def show_outcome(ctx: AppContext, request: gr.Request = None) -> dict:
    """After an answer through the page: over the answer, whether it was found (or the error's message, or how far
    a Stop got), and the readout and history the answer showed, to download."""
    outcome = ctx.outcomes.pop(page_session(request), None)
    if outcome is None:
        return {"status": gr.skip(), "download_json": gr.skip(), "download_csv": gr.skip()}
    if outcome.readout is None:
        status = (ui_format.stopped_status(*outcome.stopped) if outcome.stopped is not None
                  else ui_format.failed_status(outcome.message or "The request failed."))
        return {"status": status, "download_json": NO_DOWNLOAD, "download_csv": NO_DOWNLOAD}
    folder = DOWNLOADS.new()
    readout_path = folder / "longqa-readout.json"
    readout_path.write_text(json.dumps(outcome.readout_json, indent=2, ensure_ascii=False), encoding="utf-8")
    history_path = folder / "longqa-history.csv"
    outcome.history_table.to_csv(history_path, index=False)
    return {"status": ui_format.answer_status(outcome.readout.result),
            "download_json": gr.update(value=str(readout_path), visible=True),
            "download_csv": gr.update(value=str(history_path), visible=True)}


class DownloadFolders:
    """The answers' download folders under `root` (gradio serves its own copy of each file): a new folder per answer,
    and those older than `keep_s` removed as new ones come. `root` is listed at the first answer and then once every
    `keep_s`, for the folders an earlier run of the page or another process sharing `root` left; between listings
    the folders made here are known, in the order made, so an answer lists nothing."""

    def __init__(self, root: Path, keep_s: float, clock: Callable[[], float] = time.time):
        self.root, self.keep_s, self.clock = root, keep_s, clock
        self._made: deque[tuple[float, Path]] | None = None  # (made at, folder), oldest first
        self._listed_at = 0.0
        self._lock = threading.Lock()  # answers end on several threads at once

    def new(self) -> Path:
        """A new, empty folder for one answer's downloads, after removing those past their time."""
        with self._lock:
            self.root.mkdir(parents=True, exist_ok=True)
            now = self.clock()
            if self._made is None or now - self._listed_at > self.keep_s:
                self._made, self._listed_at = deque(sorted(self._left_before())), now
            while self._made and now - self._made[0][0] > self.keep_s:
                shutil.rmtree(self._made.popleft()[1], ignore_errors=True)
            folder = Path(tempfile.mkdtemp(dir=self.root))
            self._made.append((now, folder))
            return folder

    def _left_before(self) -> list[tuple[float, Path]]:
        """The folders already in `root`, with the time each was last changed."""
        found = []
        for folder in self.root.iterdir():
            with contextlib.suppress(OSError):
                found.append((folder.stat().st_mtime, folder))
        return found


DOWNLOADS = DownloadFolders(Path(tempfile.gettempdir()) / "longqa-downloads", DOWNLOADS_KEEP_S)


def reading_or_default(value) -> str:
    """A reading mode from the page or the API (empty: the default), refused unless it is one of the modes."""
    if value is None or value == "":
        return DEFAULT_READING
    if value not in READING_MODES:
        raise InputError(f"Reading must be one of {', '.join(READING_MODES)}, got {value!r}.")
    return value


def refresh_gpu_gauge():
    return ui_format.gpu_gauge(gpu_snapshot())


def training_duration(context_key: str, window_tokens: int) -> float:
    """Two forward+backward steps of one window (`policy.training_gpu_seconds`) at the loaded model's measured
    throughput."""
    return policy.training_gpu_seconds(window_tokens, CONTEXTS[context_key].tokens_per_s())


@gpu_function(duration=training_duration)
def training_step_on_gpu(context_key: str, window_tokens: int):
    """One forward+backward step with and without gradient checkpointing on the loaded model (picklable in and
    out, like `answer_on_gpu`): the readout and the window's length in tokens."""
    ctx = CONTEXTS[context_key]
    with user_errors("The training step"):
        if ctx.session.loaded is None:
            raise ModelLoadError(f"{NO_MODEL} {PICK_MODEL}")
        return ctx.session.training_step(window_tokens)


def run_training_step(ctx: AppContext, window_tokens, request: gr.Request = None, progress=gr.Progress()) -> dict:
    """The training-step readout: both peaks and times, and what checkpointing saved."""
    with user_errors("The training step"):
        window_tokens = count_or_default(window_tokens, "The window", DEFAULT_TRAINING_WINDOW)
        with model_turn(ctx, request, progress, exclusive=True):
            ensure_loaded(ctx, progress)
            progress(0.1, desc="Forward+backward without, then with checkpointing")
            readout, window = training_step_on_gpu(ctx.key, window_tokens)
    return {"table": pd.DataFrame(ui_format.training_rows(readout), columns=ui_format.TRAINING_HEADERS),
            "summary": ui_format.training_summary(readout, window)}


# ------------------------------------------------------------------------------------------------ page
def example_rows(per_file: int = 2) -> list[list]:
    rows, seen = [], {}
    for example in sample_examples():
        seen[example["file"]] = seen.get(example["file"], 0) + 1
        if seen[example["file"]] <= per_file:
            rows.append([[str(SAMPLES_DIR / example["file"])], "", example["question"], DEFAULT_TOP_K])
    return rows


def model_choices(ctx: AppContext) -> list[tuple[str, str]]:
    """The models the page may load, each with what it is and, where it is not on this machine, whether it can
    load here (`model_note`)."""
    return [(f"{ref}: {KNOWN_MODELS.get(ref, 'given with --model')}{model_note(ref)}", ref) for ref in ctx.models]


def profiles_frame(hardware: Hardware, auto: Profile | None = None) -> pd.DataFrame:
    rows = [[row["name"], row["targets"], ", ".join(row["strategies_here"] or row["strategies"]) or "none",
             row["batch_size"], row["device"], "yes" if row["available"] else f"no: {row['reason']}"]
            for row in describe_profiles(hardware, auto)]
    return pd.DataFrame(rows, columns=["profile", "targets", "strategies", "batch size", "device", "runs here"])


def strategies_frame() -> pd.DataFrame:
    """The registry's cards as they come (name, order of composition, saves, costs, requires), one row each."""
    cards = strategy_cards()
    columns = [key for key in (cards[0] if cards else {}) if key != "description"]
    return pd.DataFrame([[card.get(key) for key in columns] for card in cards], columns=columns)


def strategy_choices(hardware: Hardware) -> list[tuple[str, str]]:
    """The custom strategies as the checkbox group shows them: each with what it does, and, where this machine
    cannot run it (a GPU-only strategy on a CPU, a kernel this torch build lacks), why."""
    choices = []
    for card in strategy_cards():
        device = device_for(custom_profile([card["name"]]), hardware)  # where `custom` would put the model here
        reason = make_strategy(card["name"], hardware, device).unavailable_reason(hardware)
        why_not = f" (cannot run here: {reason})" if reason else ""
        choices.append((f"{card['name']}: {card['description']}{why_not}", card["name"]))
    return choices


def first_example() -> dict:
    """The bundled example the introduction offers to try: its document and question."""
    return sample_examples()[0]


def fill_first_example() -> dict:
    """The introduction's example clicked: its bundled document and question in the inputs, pasted text cleared."""
    example = first_example()
    return {"files": [str(SAMPLES_DIR / example["file"])], "pasted": "", "question": example["question"]}


def build_intro() -> dict[str, Block]:
    """What the page does, what the demo model answers (with one example to click) and what a profile is; the
    glossary of every term of art the page shows."""
    gr.Markdown(f"{page_help.TITLE}\n{page_help.INTRO}", elem_id="intro")
    with gr.Row():
        try_btn = gr.Button(page_help.TRY_LABEL.format(question=first_example()["question"]), size="sm",
                            elem_id="try-example", min_width=300)
        with gr.Column(min_width=300):
            with gr.Accordion("Glossary: the terms on this page", open=False, elem_id="glossary"):
                gr.Markdown(page_help.glossary_markdown())
    return {"try": try_btn}


def build_model_panel(ctx: AppContext) -> dict[str, Block]:
    """The notice, the profile and model pickers, the line saying what is loaded (or loading), and the custom
    strategies. The load readout (table and JSON) is made here and placed lower on the page (`render`)."""
    banner_box = gr.Markdown(visible=False, elem_id="banner", label="Notice")
    with gr.Row():
        locked = " Fixed on this deployment." if ctx.lock_profile else ""
        profile_dd = gr.Dropdown(profile_choices(ctx.hardware, auto_profile(ctx)), value=ctx.selection["profile"],
                                 label="Hardware profile",
                                 info=f"{page_help.PROFILE_INFO} Detected: {ctx.hardware.describe()}.{locked}",
                                 interactive=not ctx.lock_profile, scale=2, min_width=300)
        model_dd = gr.Dropdown(model_choices(ctx), value=ctx.selection["model"], label="Model",
                               info=page_help.MODEL_INFO, interactive=not ctx.lock_profile, scale=2, min_width=300)
    status = gr.Markdown(load_status(ctx), elem_id="load-status")
    with gr.Row():
        strategies_cb = gr.CheckboxGroup(strategy_choices(ctx.hardware), label="Custom strategies",
                                         info=page_help.STRATEGIES_INFO, visible=False, scale=4, min_width=300)
        apply_btn = gr.Button("Load custom profile", visible=False, scale=1, min_width=160)
    load_table = gr.Dataframe(headers=ui_format.LOAD_HEADERS, label="Load readout", interactive=False, wrap=True,
                              render=False, column_widths=LOAD_COLUMN_WIDTHS)
    load_json = gr.JSON(label="Load readout (JSON)", render=False, elem_id="load-json")
    return {"banner": banner_box, "profile": profile_dd, "model": model_dd, "load_status": status,
            "strategies": strategies_cb, "apply": apply_btn, "load_table": load_table, "load_json": load_json}


def loaded_outputs(model: dict[str, Block], question: dict[str, Block]) -> dict[str, Block]:
    """What `show_loaded` fills: the dropdowns, the load readouts, the line over the page and the ask buttons."""
    return {**{name: model[name] for name in ("profile", "model", "strategies", "banner", "load_table", "load_json",
                                              "load_status")},
            "ask": question["ask"], "full": question["full"]}


def show_loaded_after(ctx: AppContext, event, model: dict[str, Block], question: dict[str, Block]) -> None:
    """After `event` (a reload, or a comparison: it reloads the model for each profile and loads back the one used
    before), done or refused or stopped, the page shows what is loaded: its dropdowns, load readouts and the line
    over it, and Ask is enabled."""
    for outcome in (event.success, event.failure):  # `then` alone would not run after an error
        listen(outcome, bind(show_loaded, ctx), outputs=loaded_outputs(model, question), api_visibility="private")


def wire_model_panel(ctx: AppContext, demo: gr.Blocks, seen: gr.State, model: dict[str, Block],
                     question: dict[str, Block]) -> None:
    """Load on a visit and on each pick: while a reload runs, the line over the page says what is loading (its
    progress shows the elapsed time) and Ask is disabled. A pick loads what the select event says was picked, and a
    visit's outputs reach the page in turn with the reloads, so that neither undoes the other."""
    readouts = {name: model[name] for name in ("banner", "load_table", "load_json")}
    selection = {name: model[name] for name in ("profile", "model", "strategies")}
    # In the reloads' group (one at a time, in order): a visit's outputs, what was loaded when it ran, then reach the
    # page before those of a reload asked for after it, and never undo the reload's `show_loaded`.
    listen(demo.load, bind(on_page_load, ctx),
           outputs={**selection, "seen": seen, **readouts, "load_status": model["load_status"]},
           concurrency_id=MODEL_CONCURRENCY, api_visibility="private", show_progress_on=[model["load_status"]])
    listen(model["profile"].change, show_custom_controls, inputs=model["profile"],
           outputs={"strategies": model["strategies"], "apply": model["apply"]}, queue=False,
           api_visibility="private")
    # `select`, not `input`: a dropdown fires `input` twice per pick in gradio 6.31 (two loads, two errors).
    for trigger, start, api_name in ((model["profile"].select, start_profile_pick, "load_profile"),
                                     (model["model"].select, start_model_pick, None),
                                     (model["apply"].click, start_loading, None)):
        starting = listen(trigger, bind(start, ctx), inputs=[model["profile"], model["model"]],
                          outputs={"load_status": model["load_status"], "ask": question["ask"],
                                   "full": question["full"], "profile": model["profile"], "model": model["model"]},
                          queue=False, api_visibility="private", show_progress="hidden")
        loading = listen(starting.then, bind(load_profile, ctx),
                         inputs=[model["profile"], model["model"], model["strategies"], seen],
                         outputs={"seen": seen, **readouts}, concurrency_id=MODEL_CONCURRENCY, api_name=api_name,
                         show_progress_on=[model["load_status"]], api_visibility="public" if api_name else "private")
        # done or refused, the dropdowns then show what is loaded: the demo model after a fallback, the previous
        # choice after a refusal, and what `auto` picked
        show_loaded_after(ctx, loading, model, question)


def build_question_panel(ctx: AppContext) -> dict[str, Block]:
    """Side by side (one above the other on a phone): the documents, the question, Ask and Stop, and the reading
    options; and the answer area right beside them, on the first screen: whether the answer was found, the answer
    with a copy button, its passage with the answer highlighted, the downloads, and the documents' preview
    (updated as they change). The answer panel wires Ask and Stop."""
    with gr.Row(elem_id="ask-row"):
        with gr.Column(min_width=320):
            files = gr.File(file_count="multiple", file_types=list(SUPPORTED_EXTENSIONS), type="filepath",
                            label="Documents", elem_id="documents", height=140)
            pasted = gr.Textbox(label="Or paste text", lines=3, max_lines=8, placeholder="Paste a document here")
            question = gr.Textbox(label="Question",  # no `info`: it would join the label, which tests select by
                                  placeholder="What is the frequency of Chiomklian Oustklaeth? (Enter asks)")
            with gr.Row():
                ask_btn = gr.Button("Ask", variant="primary", min_width=90)
                full_btn = gr.Button("Read the whole document", min_width=90)
                stop_btn = gr.Button("Stop", variant="stop", min_width=90)
            with gr.Accordion("Reading options", open=False):
                top_k = accept_counts_as_text(gr.Slider(1, 10, value=DEFAULT_TOP_K, step=1, label="Top-k answers",
                                                        info=page_help.TOP_K_INFO))
                reading = gr.Radio(list(READING_MODES), value=DEFAULT_READING, label="Reading",
                                   info="auto: guided past a few windows; guided: read where the question's words "
                                        "point, more while the answer is weak; full: every window")
                no_answer_below = gr.Textbox("", label="Not-found threshold (optional)", placeholder="e.g. 0.001",
                                             elem_id=LATER_INPUT,
                                             info="say 'not found' when the best answer scores under this (between "
                                                  "0 and 1); empty: the model's own rule, where it has one")
        with gr.Column(min_width=320):
            status = gr.Markdown(ui_format.NO_ANSWER_YET, elem_id="answer-status")
            answer_box = gr.Textbox(label="Answer", interactive=False, elem_id="best-answer", buttons=["copy"])
            evidence_box = gr.HighlightedText(label="Evidence: the answer in its passage", elem_id="evidence",
                                              color_map={"answer": "yellow"}, show_legend=False,
                                              show_inline_category=False)
            with gr.Row():
                download_json = gr.DownloadButton("Readout (JSON)", visible=False, size="sm", min_width=140,
                                                  elem_id="download-readout")
                download_csv = gr.DownloadButton("History (CSV)", visible=False, size="sm", min_width=140,
                                                 elem_id="download-history")
            doc_table = gr.Dataframe(headers=ui_format.DOCUMENT_HEADERS, label="Documents read", interactive=False,
                                     wrap=True, column_widths=["43%", "19%", "19%", "19%"])
    rows = example_rows()
    examples = gr.Examples(rows, inputs=[files, pasted, question, top_k], label=page_help.EXAMPLES_LABEL,
                           example_labels=[row[2] for row in rows],  # the questions: a list that fits a phone
                           api_visibility="private")

    for trigger in (files.change, pasted.blur):
        trigger(bind(preview_documents, ctx), inputs=[files, pasted, question], outputs=doc_table,
                api_visibility="private")
    return {"files": files, "pasted": pasted, "question": question, "top_k": top_k, "reading": reading,
            "no_answer_below": no_answer_below, "ask": ask_btn, "full": full_btn, "stop": stop_btn,
            "documents": doc_table, "examples": examples, "status": status, "answer": answer_box,
            "evidence": evidence_box, "download_json": download_json, "download_csv": download_csv}


def build_answer_panel(ctx: AppContext, question: dict[str, Block], seen: gr.State,
                       intro: dict[str, Block]) -> dict[str, Block]:
    """The top answers, latency, memory and run readouts, the live GPU gauge, the run history, and the full readout:
    all that one answer updates with the answer area, so Ask, Stop, the examples and the introduction's example
    are wired here. Each way of asking first clears the previous answer, and after it the answer area says how it
    ended. Returns the history's components (the compare panel adds runs to it)."""
    has_gpu = bool(ctx.hardware.usable_gpus)
    with gr.Row():
        answers_table = gr.Dataframe(headers=ui_format.ANSWER_HEADERS, label="Top answers", interactive=False,
                                     wrap=True, min_width=320, scale=3, column_widths=ANSWER_COLUMN_WIDTHS)
        run_table = gr.Dataframe(headers=ui_format.RUN_HEADERS, label="Run", interactive=False, wrap=True,
                                 min_width=320, scale=2, column_widths=["30%", "70%"])
    with gr.Row():
        latency_table = gr.Dataframe(headers=ui_format.LATENCY_HEADERS, label="Latency by stage", interactive=False,
                                     wrap=True, min_width=320, scale=2)
        memory_table = gr.Dataframe(headers=ui_format.MEMORY_HEADERS, label="Memory", interactive=False, wrap=True,
                                    min_width=320, scale=3, column_widths=["24%", "22%", "22%", "16%", "16%"])
    gauge = gr.Label(label="Live GPU memory (NVML)", visible=has_gpu)
    timer = gr.Timer(GPU_REFRESH_S, active=has_gpu)
    history = build_history_panel()
    readout_json = gr.JSON(label="Full readout (JSON)", elem_id="readout")

    timer.tick(refresh_gpu_gauge, outputs=gauge, concurrency_limit=None, show_progress="hidden",
               api_visibility="private")
    # The not-found threshold comes last: a call made before it was added sends one value less (Page pads it).
    inputs = [question["files"], question["pasted"], question["question"], question["top_k"], question["reading"],
              history["history"], seen, question["no_answer_below"]]
    in_full = [question["files"], question["pasted"], question["question"], question["top_k"], history["history"],
               seen, question["no_answer_below"]]
    outputs = {"documents": question["documents"], "answer": question["answer"], "answers": answers_table,
               "evidence": question["evidence"], "latency": latency_table, "memory": memory_table, "run": run_table,
               **history, "seen": seen,
               "readout": readout_json}  # last: API clients take the readout as `*_, readout = predict(...)`
    cleared = {"status": question["status"], "answer": question["answer"], "evidence": question["evidence"],
               "answers": answers_table, "latency": latency_table, "memory": memory_table, "run": run_table,
               "readout": readout_json, "download_json": question["download_json"],
               "download_csv": question["download_csv"]}
    ended = {name: question[name] for name in ("status", "download_json", "download_csv")}
    # Every event of the requests group names the same limit: gradio lowers a group to its smallest one.
    request = dict(concurrency_id=REQUEST_CONCURRENCY, concurrency_limit=request_workers(ctx),
                   show_progress_on=[question["answer"]])

    def asks_after(trigger, handler, handler_inputs, **event):
        """`trigger` clears the answer area, then asks with `handler`, then says how it ended."""
        clearing = listen(trigger, lambda: clear_answer(ui_format.ASKING_STATUS), outputs=cleared, queue=False,
                          show_progress="hidden", api_visibility="private")
        asking = listen(clearing.then, noting_outcome(ctx, bind(handler, ctx), outputs), inputs=handler_inputs,
                        outputs=outputs, **request, **event)
        for outcome in (asking.success, asking.failure):  # `then` alone would not run after an error
            listen(outcome, bind(show_outcome, ctx), outputs=ended, queue=False, show_progress="hidden",
                   api_visibility="private")
        return asking

    asked = [asks_after(question["ask"].click, ask, inputs, api_name="ask"),
             asks_after(question["question"].submit, ask, inputs, api_visibility="private"),
             asks_after(question["full"].click, ask_in_full, in_full, api_visibility="private"),
             asks_after(question["examples"].load_input_event.then, ask, inputs, api_visibility="private")]
    filling = listen(intro["try"].click, fill_first_example, outputs={name: question[name] for name in
                                                                      ("files", "pasted", "question")},
                     queue=False, api_visibility="private")
    asked.append(asks_after(filling.then, ask, inputs, api_visibility="private"))
    recolour_after(history, *asked)
    question["stop"].click(bind(press_stop, ctx), queue=False, api_visibility="private")
    # New documents: the answer to the old ones goes (the examples and the introduction set them, and ask, above).
    for trigger in (question["files"].upload, question["files"].clear, question["files"].delete,
                    question["pasted"].input):
        listen(trigger, lambda: clear_answer(ui_format.NEW_DOCUMENTS_STATUS), outputs=cleared, queue=False,
               show_progress="hidden", api_visibility="private")
    return history


def page_hooks(ctx: AppContext) -> PageHooks:
    """What the compare panel borrows from the page: errors, the cleaning of a request's settings and the reading
    of its documents (an answer's), an exclusive turn on the model, the first load."""
    return PageHooks(errors=user_errors,
                     settings=functools.partial(request_settings, ctx),
                     read_documents=functools.partial(read_before_turn, ctx),
                     model_turn=lambda request, progress: model_turn(ctx, request, progress, exclusive=True),
                     stop_pressed=lambda request: stop_pressed_from_now(ctx, request),
                     ensure_loaded=lambda progress: ensure_loaded(ctx, progress),
                     loaded_now=lambda: loaded_now(ctx), seen_now=lambda: seen_now(ctx))


def build_training_panel(ctx: AppContext) -> None:
    """One training step with and without gradient checkpointing: where that strategy saves memory."""
    with gr.Accordion("Training-step memory: gradient checkpointing", open=False):
        gr.Markdown("One forward+backward step on a window of a bundled sample, with and without gradient "
                    "checkpointing. This is where that strategy saves memory; at inference it saves nothing.")
        window_slider = gr.Slider(128, 4096, value=DEFAULT_TRAINING_WINDOW, step=64, label="Window (tokens)")
        train_btn = gr.Button("Run one training step")
        training_table = gr.Dataframe(headers=ui_format.TRAINING_HEADERS, label="Training step", interactive=False)
        training_text = gr.Markdown()
    listen(train_btn.click, bind(run_training_step, ctx), inputs=window_slider,
           outputs={"table": training_table, "summary": training_text}, concurrency_id=REQUEST_CONCURRENCY,
           concurrency_limit=request_workers(ctx), api_name="training_step")


def request_workers(ctx: AppContext) -> int:
    """Requests read and checked side by side: at least as many as the model lane lets answer at once."""
    return max(REQUEST_WORKERS, ctx.lane.capacity)


# Column widths of the wide tables, so that at 1400 px every column shows and long cells wrap (in the order of
# ui_format's headers).
ANSWER_COLUMN_WIDTHS = ["7%", "22%", "12%", "13%", "26%", "20%"]
LOAD_COLUMN_WIDTHS = ["11%", "7%", "14%", "7%", "6%", "9%", "11%", "9%", "10%", "16%"]
PROFILE_COLUMN_WIDTHS = ["12%", "20%", "28%", "7%", "7%", "26%"]  # profile ... runs here
STRATEGY_COLUMN_WIDTHS = ["12%", "8%", "27%", "27%", "26%"]  # name, phase, saves, costs, requires: wrapped


def build_reference_panel(ctx: AppContext) -> None:
    """What each profile and strategy is, and which profiles run on this machine."""
    with gr.Accordion("Profiles and strategies", open=False):
        gr.Dataframe(profiles_frame(ctx.hardware, auto_profile(ctx)), label="Profiles on this machine",
                     interactive=False, wrap=True, column_widths=PROFILE_COLUMN_WIDTHS)
        gr.Dataframe(strategies_frame(), label="Strategies", interactive=False, wrap=True,
                     column_widths=STRATEGY_COLUMN_WIDTHS)


def build_blocks(ctx: AppContext, queue_size: int = DEFAULT_QUEUE_SIZE) -> gr.Blocks:
    ctx.lane.max_waiting = queue_size  # the page's queue bound is the model lane's
    with Page(title="Long-document QA with Longformer", analytics_enabled=False,
              delete_cache=(3600, 3600)) as demo:  # what gradio itself writes; uploads are swept sooner
        demo.uploads, demo.visitor_header = ctx.uploads, ctx.visitor_header
        intro = build_intro()
        seen = gr.State({})  # what this tab has seen loaded, to tell it when another visitor switched
        model = build_model_panel(ctx)
        question = build_question_panel(ctx)
        wire_model_panel(ctx, demo, seen, model, question)
        history = build_answer_panel(ctx, question, seen, intro)
        compared = build_compare_panel(ctx, question, history, seen, page_hooks(ctx))
        show_loaded_after(ctx, compared["event"], model, question)
        with gr.Accordion("Loaded model", open=True):
            model["load_table"].render()
            with gr.Accordion("Load readout (JSON)", open=False):
                model["load_json"].render()
        build_training_panel(ctx)
        build_plan_panel(ctx.models, ctx.selection["model"])
        build_reference_panel(ctx)
    demo.queue(default_concurrency_limit=1, max_size=queue_size)
    return demo


# ------------------------------------------------------------------------------------------------ serving
def serve(demo: gr.Blocks, *, host: str = "127.0.0.1", port: int = 7860, share: bool = False,
          max_file_mb: float = DEFAULT_MAX_FILE_MB, block: bool = True) -> tuple[str, str | None]:
    """Launch; a share link that cannot be made (offline) leaves the app serving locally. Returns both URLs."""
    if share:
        print("note: --share makes a PUBLIC link: anyone who has it can use this app on this machine.", flush=True)
    # show_error=False: our own errors are gr.Error and always reach the visitor; what gradio raises before a
    # handler runs (a crafted call naming a server path) would otherwise echo the server's absolute paths.
    launch = dict(server_name=host, server_port=port, max_file_size=int(max_file_mb * 1024 * 1024), css=CSS,
                  prevent_thread_lock=True, show_error=False)
    try:
        _, local_url, share_url = demo.launch(share=share, **launch)
    except Exception as exc:  # gradio catches tunnel failures itself; this covers any it lets through
        if not share:
            raise
        print(f"warning: --share failed ({type(exc).__name__}: {exc}); serving locally only.", flush=True)
        demo.close()
        _, local_url, share_url = demo.launch(share=False, **launch)
    if share and not share_url:
        print(f"warning: --share: the public link could not be created (offline?); serving locally only at "
              f"{local_url}", flush=True)
    elif share_url:
        print(f"Public link (anyone who has it can use this app): {share_url}", flush=True)
    if block:
        demo.block_thread()
    return local_url, share_url


def default_max_request_s() -> float:
    """A shared Space bounds each request's time so that one visitor cannot hold the model for minutes; a laptop
    runs whatever its owner asks."""
    return SPACE_MAX_REQUEST_S if os.environ.get("SPACE_ID") else 0.0


def default_visitor_header() -> str | None:
    """On a Space, the proxy names the visitor in X-Forwarded-For; a direct connection has no such header."""
    return SPACE_VISITOR_HEADER if os.environ.get("SPACE_ID") else None


def default_lock_profile() -> bool:
    """Locked on a Space (Spaces set SPACE_ID), where any visitor could otherwise reload the model for all."""
    setting = os.environ.get("LONGQA_LOCK_PROFILE", "").strip().lower()
    if setting:
        return setting in ("1", "true", "yes", "on")
    return bool(os.environ.get("SPACE_ID"))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Serve the long-document QA page.")
    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help="model to start with; also the only model besides the registry the page may load "
                             "(the default falls back to the bundled demo model when it cannot be fetched)")
    parser.add_argument("--profile", default="auto", choices=list(PROFILES), help="hardware profile to start with")
    # Spaces set GRADIO_SERVER_NAME=0.0.0.0: an explicit server_name would override it and hide the app.
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
    parser.add_argument("--share", action="store_true", help="also serve through a PUBLIC Gradio share link")
    parser.add_argument("--max-file-mb", type=float, default=DEFAULT_MAX_FILE_MB, help="upload size limit per file")
    parser.add_argument("--max-tokens", type=positive_int, default=DEFAULT_MAX_TOTAL_TOKENS,
                        help="refuse requests whose documents have more tokens than this")
    parser.add_argument("--queue-size", type=positive_int, default=DEFAULT_QUEUE_SIZE,
                        help="requests that may wait; more are refused with 'queue is full'")
    parser.add_argument("--max-request-s", type=float, default=default_max_request_s(),
                        help="refuse a request predicted (from this deployment's measured tokens per second) to take "
                             "longer than this many seconds; 0: no limit (default: "
                             f"{SPACE_MAX_REQUEST_S:.0f} in a Hugging Face Space, no limit elsewhere)")
    parser.add_argument("--lock-profile", action=argparse.BooleanOptionalAction, default=default_lock_profile(),
                        help="shared deployments: the model and profile stay as started; the page and the API "
                             "cannot change them (default: on in a Hugging Face Space, off elsewhere; "
                             "LONGQA_LOCK_PROFILE=1/0 overrides; always on under ZeroGPU)")
    parser.add_argument("--visitor-header", default=default_visitor_header(),
                        help="behind a proxy: the header naming the visitor's address (its first hop), so that "
                             "per-visitor limits count the address as well as the page session (default: "
                             f"{SPACE_VISITOR_HEADER} in a Hugging Face Space, none elsewhere: on a direct connection "
                             "many visitors may share one address); 'none' turns it off")
    parser.add_argument("--max-queued-windows", type=int, default=MAX_QUEUED_WINDOWS,
                        help="refuse a new request larger than a few batches when the windows queued for the model "
                             "(its own included) would pass this; 0: no bound")
    bounds = parser.add_argument_group("uploads and HTML reading (per process)")
    bounds.add_argument("--uploads-total-mb", type=float, default=DEFAULT_TOTAL_BYTES / MB,
                        help="uploads this server holds on disk, all visitors together; an upload past it is refused "
                             "once older unread uploads made what room they could")
    bounds.add_argument("--uploads-per-visitor-mb", type=float, default=DEFAULT_PER_VISITOR_BYTES / MB,
                        help="uploads one visitor may hold (counted where --visitor-header names visitors)")
    bounds.add_argument("--uploads-keep-min", type=float, default=DEFAULT_KEEP_S / 60,
                        help="minutes an upload is kept (unless it is being read) before it is deleted")
    bounds.add_argument("--html-readers", type=positive_int, default=HTML_READERS.readers,
                        help="HTML pages parsed at once, each in its own child process (default: one per core); "
                             "more wait their turn, their place shown")
    bounds.add_argument("--html-memory-mb", type=float, default=HTML_READERS.memory_bytes / MB,
                        help="memory all HTML children may use together; each may use 64 MB + 256 bytes per byte "
                             "of its page, within this")
    scale = parser.add_argument_group("past one machine (Ray Serve; pip install -r requirements-ray.txt)")
    scale.add_argument("--engine", choices=["embedded", "ray"], default="embedded",
                       help="embedded: the model in this process (default); ray: in Ray Serve replicas")
    scale.add_argument("--ray-address", default=None,
                       help="a running Ray cluster: 'auto' or HOST:PORT (default: start a local Ray instance and "
                            "stop it on exit)")
    scale.add_argument("--replicas", type=positive_int, default=1,
                       help="Ray Serve replicas, each with its own copy of the model (one GPU each where the cluster "
                            "has GPUs)")
    scale.add_argument("--ray-batch", type=positive_int, default=DEFAULT_BATCH_REQUESTS,
                       help="concurrent requests whose windows may share one forward pass in a replica (1: none)")
    scale.add_argument("--ray-cpus-per-replica", type=float, default=None,
                       help="CPUs each replica reserves (default: the cluster's CPUs split between the replicas, or 1 "
                            "beside each GPU)")
    return parser


def make_session(args) -> Backend:
    """The embedded session, or one whose model lives in Ray Serve replicas (`--engine ray`)."""
    if args.engine == "ray":
        return RaySession(replicas=args.replicas, address=args.ray_address, batch_requests=args.ray_batch,
                          cpus_per_replica=args.ray_cpus_per_replica)
    return Session()


def main(argv: list[str] | None = None) -> int:
    """`python app.py`: one backend, one context and one page, from the command line; the model loads before
    serving."""
    args = build_parser().parse_args(argv)
    policy.tune_allocator()  # before the model and the request threads allocate
    try:
        session = make_session(args)
    except LongQAError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # A stop signal ends the process through `finally`, so replicas and a Ray instance of ours are stopped and the
    # uploads deleted too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    ctx = None
    try:
        ctx = context_from(args, session)
        if not load_before_serving(ctx, args):
            return 2
        serve(build_blocks(ctx, args.queue_size), host=args.host, port=args.port, share=args.share,
              max_file_mb=args.max_file_mb)
        return 0
    finally:
        session.close()
        if ctx is not None:
            ctx.uploads.delete_all()


def context_from(args, session: Backend) -> AppContext:
    """The page's context as the command line sets it (always locked under ZeroGPU), with the HTML readers'
    bounds set for this process."""
    HTML_READERS.configure(readers=args.html_readers, memory_bytes=int(args.html_memory_mb * MB))
    uploads = UploadStore(total_bytes=int(args.uploads_total_mb * MB),
                          per_visitor_bytes=int(args.uploads_per_visitor_mb * MB), keep_s=args.uploads_keep_min * 60)
    return make_context(session, default_model=args.model, default_profile=args.profile,
                        max_file_mb=args.max_file_mb, max_total_tokens=args.max_tokens,
                        lock_profile=args.lock_profile or ZERO_GPU, max_request_s=args.max_request_s,
                        queue_size=args.queue_size,
                        visitor_header=None if str(args.visitor_header).lower() == "none" else args.visitor_header,
                        max_queued_windows=args.max_queued_windows, uploads=uploads)


def load_before_serving(ctx: AppContext, args) -> bool:
    """Load the starting model, saying so on the console; False (after saying why) when the profile cannot run
    here. A model that fails to load leaves the page to start without one."""
    try:
        ctx.session.runnable_profile(args.profile)
    except ProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return False
    print(f"Loading {args.model} with profile {args.profile} ({ctx.hardware.describe()}) ...", flush=True)
    try:
        ensure_loaded(ctx)
        readout = ctx.session.loaded.readout
        if readout.fallback_reason:
            print(f"note: {readout.fallback_reason}", flush=True)
        print(f"Loaded {readout.model_ref} ({readout.profile}) in {ui_format.format_seconds(readout.load_time_s)}.",
              flush=True)
    except LongQAError as exc:
        print(f"warning: no model loaded: {exc} The page still starts; pick a model there.", flush=True)
    return True


if __name__ == "__main__":
    sys.exit(main())
# Imported (a Space's `demo`, gradio's reload mode, the tests): one context and page with the defaults.
context = make_context(lock_profile=ZERO_GPU, visitor_header=default_visitor_header())
demo = build_blocks(context)
if ZERO_GPU:
    # ZeroGPU forks its GPU workers from this process: the model must be loaded (onto the patched CUDA) before,
    # at import, with the profile fixed. `python app.py` does the same in main() before serving.
    with contextlib.suppress(LongQAError):  # the banner says why; the page still starts
        ensure_loaded(context)
