"""Gradio hardening, the one place that goes around gradio: the upload route's bounds, a call's inputs of the wrong
shape or count told in words, a count sent as text, and whether a running event was abandoned.

Not a subclass of `gr.Blocks`: `harden` wraps one page's `launch`, `preprocess_data` and `validate_inputs`. What is
not gradio's public API, and why it is needed (each pinned by tests/test_hardening.py against gradio 6.31):
- `Blocks.preprocess_data` and `Blocks.validate_inputs`: gradio refuses a file that was never uploaded and a value
  of the wrong shape before any handler runs, and with `show_error=False` (which keeps the server's paths out of
  messages) its reply carries no message at all; an API call made before the not-found threshold was added sends
  one value less. No event option runs before them (a `validator=` receives the values they produced).
- `gradio.context.LocalContext`, `Blocks._queue`, its `active_jobs` and `pending_messages_per_session`, and an
  event's `_id` and `alive`: a sync handler's thread cannot be killed, so a long read asks between batches whether
  its event is still wanted; gradio offers no public way to ask.
"""

from __future__ import annotations

import functools
from typing import Callable

import gradio as gr
from gradio.context import LocalContext
from gradio.exceptions import InvalidPathError
from pydantic import ValidationError
from starlette.middleware import Middleware

from longqa.serving import policy
from longqa.serving.uploads import UploadGate, UploadStore, sweeping
from longqa_core.errors import InputError

# What each kind of input must be, by gradio's data model, for a message when a call sends something else.
EXPECTED_SHAPES = {
    "ListFiles": "a list of files uploaded with the request, or null for none (gradio_client: [handle_file(path), "
                 "...]; the raw API: [{\"path\": ..., \"meta\": {\"_type\": \"gradio.FileData\"}}, ...] with paths "
                 "that /gradio_api/upload returned)",
    "FileData": "a file uploaded with the request (gradio_client: handle_file(path))",
}
LATER_INPUT = "no-answer-below"  # an input added after the API was promised; calls without it get its default
UNUPLOADED_FILE = ("A file named in this request was never uploaded to this server, so it cannot be read: upload the "
                   "file with the request (gradio_client: pass handle_file(path), not the path itself).")
UPLOAD_ROUTE = "/gradio_api/upload"


def harden(demo: gr.Blocks, uploads: UploadStore, visitor_header: str | None, *, css: str = "",
           js: str | None = None, public: tuple[str, ...] | list[str] = ()) -> gr.Blocks:
    """`demo`, telling a caller why its call was refused before any handler ran (a file argument naming a server path
    that was never uploaded, an input of the wrong shape, too few values) and padding a call made before the
    not-found threshold was added; launched however it is (`serve`, tests, a Space), its upload route bounded
    (`UploadGate`) and its uploads swept, with the page's stylesheet and script. The stylesheet goes in the head as
    it is: gradio's `launch(css=...)` scopes each rule of a media query to its main column, which kept every phone
    rule off the notices. The files in `public` (the write-ups the page links to) are served as they are. Wraps this
    one page's methods (see the module's docstring)."""
    launch, preprocess_data, validate_inputs = demo.launch, demo.preprocess_data, demo.validate_inputs

    @functools.wraps(launch)
    def bounded_launch(*args, app_kwargs: dict | None = None, **kwargs):
        app_kwargs = {**upload_bounds(demo, uploads, visitor_header), **(app_kwargs or {})}
        looks = {"head": f"<style>{css}</style>" if css else None, "js": js}
        allowed = {"allowed_paths": [*(kwargs.pop("allowed_paths", None) or []), *public]}
        return launch(*args, app_kwargs=app_kwargs, **{**looks, **kwargs, **allowed})

    @functools.wraps(preprocess_data)
    async def telling_preprocess_data(block_fn, inputs, *args, **kwargs):
        try:
            return await preprocess_data(block_fn, inputs, *args, **kwargs)
        except InvalidPathError:
            raise gr.Error(UNUPLOADED_FILE, print_exception=False) from None
        except ValidationError as exc:  # with show_error=False, gradio's reply would carry no message at all
            raise gr.Error(wrong_shape(block_fn, inputs, exc), print_exception=False) from None

    @functools.wraps(validate_inputs)
    def padding_validate_inputs(block_fn, inputs) -> None:
        if len(inputs) == len(block_fn.inputs) - 1 and getattr(block_fn.inputs[-1], "elem_id", None) == LATER_INPUT:
            inputs.append("")  # a call made before the not-found threshold was added: the model's own rule
        try:
            validate_inputs(block_fn, inputs)
        except ValueError:  # gradio's message lists the components' reprs: say what is wrong, not how it is built
            raise gr.Error(f"This call sent {len(inputs)} values; {block_fn.api_name or 'this event'} takes "
                           f"{len(block_fn.inputs)} (gradio_client fills the page's own state values itself).",
                           print_exception=False) from None

    demo.launch, demo.preprocess_data, demo.validate_inputs = (bounded_launch, telling_preprocess_data,
                                                               padding_validate_inputs)
    return demo


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


def upload_bounds(demo: gr.Blocks, uploads: UploadStore, visitor_header: str | None) -> dict:
    """The FastAPI arguments that bound `demo`'s uploads: the gate in front of gradio's upload route (a visitor is
    the proxy header's first hop where the deployment names one; on a direct connection only the total counts) and
    the sweep that deletes old uploads (and tells gradio they are gone)."""
    header = (visitor_header or "").lower()

    def visitor_of(headers: dict) -> str | None:
        address = first_hop(headers.get(header)) if header else None
        return f"address:{address}" if address else None

    uploads.on_delete = demo.upload_file_set.discard
    return {"middleware": [Middleware(UploadGate, store=uploads, route=UPLOAD_ROUTE, visitor_of=visitor_of)],
            "lifespan": sweeping(uploads)}


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
