"""The page's context: the shared backend, this machine, the limits set on the command line, and the queue's groups.
Not a handler: every handler takes an `AppContext` first; nothing here knows gradio's components.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import dataclass, field, replace

from longqa.backend import Backend, Selection
from longqa.models import DEFAULT_MODEL, KNOWN_MODELS
from longqa.serving.lane import MAX_ACTIVE, MAX_QUEUED_WINDOWS, ModelLane
from longqa.serving.uploads import UploadStore
from longqa.session import Session, sample_files
from longqa_core.limits import DEFAULT_MAX_TOTAL_TOKENS
from strategies.hardware import Hardware, detect_hardware
from strategies.profiles import get_profile

MB = 1024 * 1024
DEFAULT_QUEUE_SIZE = 64
DEFAULT_MAX_FILE_MB = 50.0
DEFAULT_MAX_COMPARE_S = 10.0  # a comparison holds the model alone: about this long at most, its loads aside
# Every queued event that waits for something shared (answers, previews, training steps, reloads, comparisons,
# plans, a visit) runs in this one group, with many workers: it starts at once, takes its place at the context's
# lane first thing (counted per visitor: refused at once past its share), and waits there, where the lane orders
# the turns on the model. Nothing waits in gradio's queue behind a one-at-a-time group, so one visitor cannot fill
# it; a slow upload delays only its own visitor, and a reload waits for the answer in flight.
REQUEST_CONCURRENCY = "requests"
REQUEST_WORKERS = 32  # threads that read and then wait in the lane, which orders their turns on the model


@dataclass
class AppContext:
    """What every handler needs: the shared backend, this machine, and the limits set on the command line."""

    session: Backend
    hardware: Hardware
    models: list[str]  # the only models the page may load: the registry plus the command line's --model
    max_file_bytes: int
    max_total_tokens: int
    start: Selection = field(default_factory=lambda: Selection(DEFAULT_MODEL, "auto"))  # what to load first
    load_error: str | None = None
    lock_profile: bool = False  # a shared deployment: the profile and model cannot be changed from the page or API
    max_request_s: float | None = None  # refuse requests predicted to take longer (None: no limit)
    allow_compare: bool = False  # under lock_profile, visitors may still compare profiles (each reloads the model)
    allow_training: bool = False  # under lock_profile, visitors may still run the training-step readout
    max_compare_s: float | None = DEFAULT_MAX_COMPARE_S  # a comparison's reads, all profiles together (None: none)
    # guided reads' windows sized to the ranked passage (None: the loaded model's default; 0: whole windows)
    passage_window_tokens: int | None = None
    lane: ModelLane = field(default_factory=ModelLane)  # requests take turns on the model between batches
    uploads: UploadStore = field(default_factory=UploadStore)  # the uploads on disk, bounded and deleted
    visitor_header: str | None = None  # the proxy's header naming the visitor's address (None: a direct connection)
    key: str = field(default_factory=lambda: uuid.uuid4().hex)  # how GPU functions find this context
    # Per page session (gradio's session hash), bounded: how its last request ended, for the answer area (an error's
    # message, a Stop, or the readout), and when it last pressed Stop.
    outcomes: OrderedDict = field(default_factory=OrderedDict)
    stops: OrderedDict = field(default_factory=OrderedDict)

    @property
    def selection(self) -> Selection:
        """What the dropdowns show: what the loaded model was asked for (with the model that did load: the demo
        model after a fallback), or before any load, what the page starts with."""
        selection = self.session.selection
        if selection is None:
            return self.start
        return replace(selection, model=self.session.model_ref)

    def seconds_for_windows(self, windows: int) -> float | None:
        """Forward seconds `windows` windows take on the loaded model (its one throughput estimate), or None before
        any ran."""
        measured = self.measured()
        return measured.seconds_for_windows(windows) if measured is not None else None

    def measured(self):
        """The loaded model's record of its forward passes (`BatchState`), or None without a model."""
        loaded = self.session.loaded
        return loaded.batch_state if loaded is not None else None


# The contexts GPU functions reach by key. ZeroGPU pickles a GPU function's arguments to a forked worker, so those
# arguments are the request's own inputs and the key; the worker inherits this module state, model included.
CONTEXTS: dict[str, AppContext] = {}


def make_context(session: Backend | None = None, *, models=None, default_model: str = DEFAULT_MODEL,
                 default_profile: str = "auto", max_file_mb: float = DEFAULT_MAX_FILE_MB,
                 max_total_tokens: int = DEFAULT_MAX_TOTAL_TOKENS,
                 hardware: Hardware | None = None, lock_profile: bool = False, max_request_s: float | None = None,
                 queue_size: int = DEFAULT_QUEUE_SIZE, visitor_header: str | None = None,
                 max_queued_windows: int | None = MAX_QUEUED_WINDOWS, uploads: UploadStore | None = None,
                 allow_compare: bool = False, allow_training: bool = False,
                 max_compare_s: float | None = DEFAULT_MAX_COMPARE_S,
                 passage_window_tokens: int | None = None) -> AppContext:
    get_profile(default_profile)
    allowed = list(dict.fromkeys([*(models if models is not None else KNOWN_MODELS), default_model]))
    if DEFAULT_MODEL in allowed and "demo" not in allowed:
        allowed.append("demo")  # the default falls back to the demo model offline: the dropdown must show it
    session = session or Session()
    hardware = hardware or session.hardware or detect_hardware()
    session.hardware = hardware  # profiles resolve for the machine the page describes, in the page and the loader
    ctx = AppContext(session=session, hardware=hardware, models=allowed,
                     max_file_bytes=int(max_file_mb * 1024 * 1024), max_total_tokens=max_total_tokens,
                     start=Selection(default_model, default_profile),
                     lock_profile=lock_profile, max_request_s=max_request_s or None,
                     allow_compare=allow_compare, allow_training=allow_training, max_compare_s=max_compare_s or None,
                     visitor_header=visitor_header or None, uploads=uploads or UploadStore(),
                     passage_window_tokens=passage_window_tokens)
    ctx.uploads.keep_copies_of(sample_files())  # the examples' copies: "Try it" must find them however late
    ctx.lane = ModelLane(max_waiting=queue_size, capacity=session.capacity,
                         max_active=max(MAX_ACTIVE, session.capacity), max_queued_windows=max_queued_windows or None,
                         seconds_for_windows=ctx.seconds_for_windows)
    CONTEXTS[ctx.key] = ctx
    return ctx


def requests_group(ctx: AppContext) -> dict:
    """An event's place in the requests group (`REQUEST_CONCURRENCY`). Every event of the group names the same
    limit: gradio lowers a group to its smallest one."""
    return {"concurrency_id": REQUEST_CONCURRENCY, "concurrency_limit": request_workers(ctx)}


def request_workers(ctx: AppContext) -> int:
    """Requests read and checked side by side: at least as many as the model lane lets answer at once. More than
    the lane lets wait (its `max_waiting`) would only wait in the lane; fewer would leave events in gradio's queue
    behind a visitor's requests."""
    return max(REQUEST_WORKERS, ctx.lane.capacity)
