"""Gradio hardening, the one place that goes around gradio, and how handlers tell errors: domain errors become
`gr.Error` with their message (`user_errors`, the only place that happens; messages shown as toasts stay text), the
upload route's bounds, a call's inputs of the wrong shape or count told in words (a value it echoes cut short), any
failure of a raw call told in words and answered 400 rather than 500 on gradio's direct routes, a count sent as text,
whether a running event was abandoned, and the door's bounds on routes, request bodies, joins and sessions. Not
where errors are made: the engine raises them.

Not a subclass of `gr.Blocks`: `harden` wraps one page's `launch` and `process_api`. What is not gradio's public
API, and why it is needed (each pinned by tests/test_hardening.py against gradio 6.31):
- `Blocks.process_api`, the one method every call goes through (the queue's and gradio's direct route,
  `/gradio_api/run/predict`, which takes any event, private ones too), and the two refusals it raises from
  gradio's reading of the values (`gradio.exceptions.InvalidPathError`, pydantic's `ValidationError`): gradio
  refuses a file that was never uploaded, a value of the wrong shape and too few values before any handler runs,
  and with `show_error=False` (which keeps the server's paths out of messages) its reply carries no message at
  all, nor does an unexpected failure's (a raw call whose select event carries no data); a component's own
  refusal echoes the value sent. An API call made before the not-found threshold was added sends one value less.
  No event option runs before gradio reads the values (a `validator=` receives what it produced). The wrap reads
  the call's `iterator=` (gradio passes it by keyword: a generator's later steps send no values), the event's
  `inputs`, `batch` and `api_name`. The two refusals above come only from the call's values: an output gradio
  cannot send fails as its `ComponentProcessingError`.
- `gradio.context.LocalContext`, `Blocks._queue`, its `active_jobs` and `pending_messages_per_session`, and an
  event's `_id` and `alive`: a sync handler's thread cannot be killed, so a long read asks between batches whether
  its event is still wanted; gradio offers no public way to ask.
- `Queue.pending_messages_per_session` and `pending_event_ids_session` (`spare_busy_sessions`): gradio keeps the
  message queues of its last 2,000 sessions and drops the oldest whatever it is doing, so a crowd of fresh sessions
  would drop a running read's stream (no message, and gradio's progress task dies on the KeyError). The page's cache
  drops the oldest session with no event pending.
- `gradio.state_holder.StateHolder` and `SessionState` (`light_sessions`): gradio's state for a new session copies
  every block's config at once (about 250 KB and 33 ms of the event loop for this page), only for its deep links,
  which this page does not offer (their route is closed). The page's sessions start without that copy; gradio fills
  it for the blocks an event changes, as it does anyway. docs/serving.md measures both.
- `FileData` values before gradio reads them (`remote_file`, in `checked_values`): gradio fetches a file named by
  a web address into its cache with no size limit, outside the upload gate; the page reads only files uploaded to it.
- `Blocks.upload_file_set`: the uploads gradio will read; the sweep tells it which are deleted, or it grows forever.

What gradio cannot do and public ASGI middleware can (FastAPI's `app_kwargs` at launch) is not here but in
`longqa.serving.route_gate` and `longqa.serving.uploads`: closed routes, bodies bounded, the join budgets, the upload
gate. `ToldErrors` below is such middleware too.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import html
import ipaddress
import json
import os
import traceback
from collections import OrderedDict
from typing import Callable

import gradio as gr
from gradio.context import LocalContext
from gradio.exceptions import InvalidPathError
from gradio.state_holder import SessionState, StateHolder
from gradio.utils import LRUCache
from gradio_client.utils import is_http_url_like
from pydantic import ValidationError
from starlette.middleware import Middleware

from longqa.serving import policy
from longqa.serving.route_gate import JoinBudget, NewSessionBudget, RouteGate, SessionsHeard, body_cap_bytes
from longqa.serving.uploads import UploadGate, UploadStore, sweeping
from longqa_core.documents import DEFAULT_MAX_FILE_BYTES
from longqa_core.errors import InputError, LongQAError

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


# What each kind of input must be, by gradio's data model, for a message when a call sends something else.
EXPECTED_SHAPES = {
    "ListFiles": "a list of files uploaded with the request, or null for none (gradio_client: [handle_file(path), "
                 "...]; the raw API: [{\"path\": ..., \"meta\": {\"_type\": \"gradio.FileData\"}}, ...] with paths "
                 "that /gradio_api/upload returned)",
    "FileData": "a file uploaded with the request (gradio_client: handle_file(path))",
}
MAX_TOLD_CHARS = 400  # a component's own refusal, as told: it may echo what was sent
LATER_INPUT = "no-answer-below"  # an input added after the API was promised; calls without it get its default
UNUPLOADED_FILE = ("A file named in this request was never uploaded to this server, so it cannot be read: upload the "
                   "file with the request (gradio_client: pass handle_file(path), not the path itself).")
UPLOAD_ROUTE = "/gradio_api/upload"
DIRECT_ROUTE = "/gradio_api/run/"  # gradio's direct routes: `predict` (any event by its index) and each endpoint
# Routes gradio serves that this page never uses, closed with these words (the monitoring pages are switched off at
# launch: `enable_monitoring=False`).
CLOSED_ROUTES = {"/gradio_api/process_recording": "This page records no audio or video: this route is closed.",
                 "/gradio_api/deep_link": "This page makes no deep links: this route is closed."}
REMOTE_FILE = ("'{label}' names a file by a web address; this server reads only files uploaded to it (gradio_client: "
               "handle_file(path) of a file on your machine, or download it first).")
# Sessions whose page state (the page's own values: its history and what it has seen loaded; gradio's copy of every
# block's config is left out, `light_sessions`) the server keeps; the oldest past this are dropped, and a dropped
# tab's next event starts from the page's defaults.
SESSION_CAPACITY = 1000
MESSAGE_QUEUES = 2000  # sessions whose message queues gradio keeps (its own number), none with an event pending
# Where the proxy names visitors: the joins one address may send to gradio's queue, before they take its places
# (fresh sessions are new visitors to the lane, but not to this). A page's ask is a few joins, and on a GPU the
# gauge's tick one every 2 s; an office behind one address sends twenty open pages' worth.
JOIN_ROUTES = ("/gradio_api/queue/join", "/gradio_api/call/")
JOINS_BURST = 60
JOINS_PER_S = 10.0
# On a direct connection (no proxy names the visitor), every loopback client, and an office or a school behind one
# address, shares the socket's address: there only joins of sessions the server has neither seen nor heard on
# gradio's heartbeat (which a page and gradio_client open as they first join) count, the same budget of them for
# each address. A page already open, or a client already connected, joins as often as the lane lets it; a flood of
# raw joins, each naming a new session and none opening its heartbeat, is refused past the budget before it takes
# a place in gradio's queue (docs/serving.md measures it).
NEW_SESSIONS_BURST = JOINS_BURST
NEW_SESSIONS_PER_S = JOINS_PER_S
HEARTBEAT_ROUTE = "/gradio_api/heartbeat/"


def harden(demo: gr.Blocks, uploads: UploadStore, visitor_header: str | None, *, css: str = "",
           js: str | None = None, public: tuple[str, ...] | list[str] = (),
           max_text_bytes: int = DEFAULT_MAX_FILE_BYTES) -> gr.Blocks:
    """`demo`, telling a caller why its call was refused before any handler ran (a file argument naming a server path
    that was never uploaded, an input of the wrong shape, too few values) and padding a call made before the
    not-found threshold was added; launched however it is (`serve`, tests, a Space), its upload route bounded
    (`UploadGate`) and its uploads swept, with the page's stylesheet and script. The stylesheet goes in the head as
    it is: gradio's `launch(css=...)` scopes each rule of a media query to its main column, which kept every phone
    rule off the notices. The files in `public` (the write-ups the page links to) are served as they are. Every
    request body is bounded by its declared length (`RouteGate`: a pasted text of `max_text_bytes` and the rest),
    the routes the page does not use are closed, gradio keeps `SESSION_CAPACITY` sessions' state and never drops
    the message queue of a session whose event is pending, and on a direct connection each address's joins of new
    sessions are budgeted (`NewSessionBudget`). Wraps this one page's methods (see the module's docstring)."""
    launch, process_api = demo.launch, demo.process_api

    @functools.wraps(launch)
    def bounded_launch(*args, app_kwargs: dict | None = None, **kwargs):
        app_kwargs = {**upload_bounds(demo, uploads, visitor_header, max_text_bytes), **(app_kwargs or {})}
        looks = {"head": f"<style>{css}</style>" if css else None, "js": js}
        allowed = {"allowed_paths": [*(kwargs.pop("allowed_paths", None) or []), *public]}
        sessions = {"state_session_capacity": SESSION_CAPACITY, "enable_monitoring": False}
        spare_busy_sessions(demo._queue)
        launched = launch(*args, app_kwargs=app_kwargs, **{**looks, **sessions, **kwargs, **allowed})
        light_sessions(demo.server_app.state_holder)
        return launched

    @functools.wraps(process_api)
    async def telling_process_api(block_fn, inputs, *args, **kwargs):
        if kwargs.get("iterator") is None:  # a call's values, as sent (a generator's later steps send none)
            inputs = checked_values(block_fn, inputs)
        try:
            return await process_api(block_fn, inputs, *args, **kwargs)
        except InvalidPathError:  # gradio's refusal of a file path it never received
            raise gr.Error(UNUPLOADED_FILE, print_exception=False) from None
        except ValidationError as exc:  # a value gradio's data model cannot read; with show_error=False, no message
            raise gr.Error(wrong_shape(block_fn, inputs, exc), print_exception=False) from None
        except gr.Error as exc:
            if not exc.print_exception:  # the page's own: every one is raised with print_exception=False
                raise
            # gradio's own, a component's refusal ("Value: ... is not in the list of choices"): it echoes the value
            raise gr.Error(cut(exc.message, MAX_TOLD_CHARS), duration=exc.duration, visible=exc.visible,
                           title=exc.title, print_exception=False) from None
        except Exception as exc:  # noqa: BLE001 - e.g. a select event called raw, without its event data
            raise gr.Error(unreadable(block_fn, exc), print_exception=False) from exc

    demo.launch, demo.process_api = bounded_launch, telling_process_api
    return demo


def checked_values(block_fn, inputs: list) -> list:
    """A call's values before gradio reads them: a file named by a web address refused (`remote_file`; in a batch
    call, each value of each input); one short of the event's inputs, padded with the later input's default (a
    call made before the not-found threshold was added); fewer told in words (gradio's own message lists the
    components' reprs)."""
    for component, value in zip(block_fn.inputs, inputs):
        if remote_file(value):
            raise gr.Error(REMOTE_FILE.format(label=cut(label_of(component), 80)), print_exception=False)
    if getattr(block_fn, "batch", False):  # one list per input: gradio checks the lengths itself
        return inputs
    inputs = list(inputs)
    if len(inputs) == len(block_fn.inputs) - 1 and getattr(block_fn.inputs[-1], "elem_id", None) == LATER_INPUT:
        inputs.append("")  # the model's own rule
    if len(inputs) < len(block_fn.inputs):
        raise gr.Error(f"This call sent {len(inputs)} values; {block_fn.api_name or 'this event'} takes "
                       f"{len(block_fn.inputs)} (gradio_client fills the page's own state values itself).",
                       print_exception=False)
    return inputs


def unreadable(block_fn, exc: Exception) -> str:
    """A call that failed before or around its handler, in one line: the event, and what went wrong (its kind)."""
    name = block_fn.api_name or getattr(block_fn.fn, "__name__", None) or "this event"
    return (f"This call to {cut(name, 80)} could not be taken ({type(exc).__name__}): it takes the values the page "
            "sends (see the API page); a select event takes its event data.")


def wrong_shape(block_fn, inputs: list, exc: ValidationError) -> str:
    """Which input of the call had the wrong shape, what it got, and what it expects."""
    for component, value in zip(block_fn.inputs, inputs):
        model = getattr(component, "data_model", None)
        if model is not None and model.__name__ == exc.title:
            expected = EXPECTED_SHAPES.get(exc.title, f"a value gradio reads as {exc.title}")
            return f"'{label_of(component)}' must be {expected}; this call sent {shape_of(value)}."
    return f"An input of this call has the wrong shape: {exc.error_count()} problem(s) reading it as {exc.title}."


def label_of(component) -> str:
    """How a message names an input: its label, else its kind ('File')."""
    return getattr(component, "label", None) or type(component).__name__


def shape_of(value) -> str:
    """A value's shape in a few words: 'a dict', 'a list of str'."""
    if isinstance(value, list):
        kinds = sorted({type(item).__name__ for item in value})
        return f"a list of {', '.join(kinds)}" if kinds else "an empty list"
    if value is None:
        return "null"
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def upload_bounds(demo: gr.Blocks, uploads: UploadStore, visitor_header: str | None,
                  max_text_bytes: int = DEFAULT_MAX_FILE_BYTES, heard: SessionsHeard | None = None) -> dict:
    """The FastAPI arguments that bound `demo`'s requests: the route gate first (closed routes; every body but an
    upload's bounded by its declared length, for a pasted text of `max_text_bytes`; where the deployment names the
    proxy's header, each address's joins to the queue, `JoinBudget`; on a direct connection, each socket address's
    joins of new sessions, `NewSessionBudget`, which knows the sessions whose heartbeat opens, noted in `heard`), the
    gate in front of gradio's upload route (a visitor is the address the proxy gives, `proxy_address`, where the
    deployment names its header; on a direct connection only the total counts) and the sweep that deletes old uploads
    (and tells gradio they are gone)."""
    header = (visitor_header or "").lower()

    def visitor_of(headers: dict) -> str | None:
        address = proxy_address(headers.get(header)) if header else None
        return f"address:{address}" if address else None

    uploads.on_delete = demo.upload_file_set.discard
    heard = heard if heard is not None else SessionsHeard()
    joins = JoinBudget(JOINS_PER_S, JOINS_BURST) if header else None
    sessions = None if header else NewSessionBudget(JoinBudget(NEW_SESSIONS_PER_S, NEW_SESSIONS_BURST), heard)
    return {"middleware": [Middleware(RouteGate, max_body_bytes=body_cap_bytes(max_text_bytes),
                                      closed=CLOSED_ROUTES, own_bounds=(UPLOAD_ROUTE,), budgeted=JOIN_ROUTES,
                                      budget=joins, address_of=lambda headers: proxy_address(headers.get(header)),
                                      heard=heard, heard_route=HEARTBEAT_ROUTE, sessions=sessions),
                           Middleware(UploadGate, store=uploads, route=UPLOAD_ROUTE, visitor_of=visitor_of),
                           Middleware(ToldErrors, route=DIRECT_ROUTE)],
            "lifespan": sweeping(uploads)}


class SparingSessions(LRUCache):
    """gradio's cache of message queues by session, which, when full, drops the oldest session with no event
    pending (`is_busy(session)` false) rather than the oldest whatever it is doing; when every session has an event
    pending it grows (the queue's own size bounds those)."""

    def __init__(self, max_size: int, is_busy):
        super().__init__(max_size)
        self.is_busy = is_busy

    def __setitem__(self, key, value) -> None:
        if key in self:
            self.move_to_end(key)
        elif len(self) >= self.max_size:
            idle = next((session for session in self if not self.is_busy(session)), None)
            if idle is not None:
                del self[idle]
        OrderedDict.__setitem__(self, key, value)


class LightSessionState(SessionState):
    """gradio's state of one session without the copy of every block's config it makes at once for deep links
    (`config_values`, kept empty until an event changes a block). The rest as gradio's `SessionState.__init__`
    sets it (pinned by tests/test_hardening.py)."""

    def __init__(self, blocks: gr.Blocks):  # gradio's own __init__ not called: it makes the copy
        self.blocks_config = copy.copy(blocks.default_config)
        self.config_values = {}
        self.state_data = {}
        self._state_ttl = {}
        self.is_closed = False
        self.STATE_TTL_WHEN_CLOSED = 1 if os.getenv("GRADIO_IS_E2E_TEST", None) else 3600


class LightStateHolder(StateHolder):
    """gradio's state holder, whose new sessions are `LightSessionState`s."""

    def __getitem__(self, session_id: str) -> SessionState:
        if session_id not in self.session_data:
            self.session_data[session_id] = LightSessionState(self.blocks)
        return super().__getitem__(session_id)


def light_sessions(holder: StateHolder) -> None:
    """`holder` (a launched page's) makes light sessions from now on."""
    holder.__class__ = LightStateHolder


def spare_busy_sessions(queue) -> None:
    """`queue`'s message queues by session kept in a `SparingSessions` (what it held kept)."""
    pending = queue.pending_event_ids_session
    sparing = SparingSessions(MESSAGE_QUEUES, lambda session: bool(pending.get(session)))
    for session, messages in list(queue.pending_messages_per_session.items()):
        sparing[session] = messages
    queue.pending_messages_per_session = sparing


def remote_file(value) -> bool:
    """Whether a call's value names a file by a web address (a `FileData`, alone or in a list, whose path is a URL),
    which gradio would fetch into its cache, unbounded."""
    if isinstance(value, list):
        return any(remote_file(item) for item in value)
    return isinstance(value, dict) and isinstance(value.get("path"), str) and is_http_url_like(value["path"])


class ToldErrors:
    """gradio's direct routes (`/gradio_api/run/predict`, and `/gradio_api/run/NAME` for each named endpoint) answer
    every failed call 500, a refusal told in words (`gr.Error`, whose reply carries its message) as well as a crash:
    a told refusal is the caller's to mend, so it is answered 400. Other routes and replies pass as they are."""

    def __init__(self, app, route: str):
        self.app, self.route = app, route

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or self.route not in scope["path"]:
            return await self.app(scope, receive, send)
        held = None

        async def telling_send(message):
            nonlocal held
            if message["type"] == "http.response.start" and message["status"] == 500:
                held = message  # sent with the body, once it says whether the error was told
                return
            if held is not None and message["type"] == "http.response.body":
                await send({**held, "status": 400 if told_error(message.get("body", b"")) else 500})
                held = None
            await send(message)

        await self.app(scope, receive, telling_send)


def told_error(body: bytes) -> bool:
    """Whether a failed call's reply tells its error in words (gradio's JSON with an "error" message)."""
    try:
        reply = json.loads(body)
    except ValueError:
        return False
    return isinstance(reply, dict) and bool(reply.get("error"))


def proxy_address(header: str | None) -> str | None:
    """The visitor's address in a forwarding header as the trusted proxy gives it, or None: the rightmost address
    that is not private (`X-Forwarded-For: what the client sent, ..., the client's address as the proxy saw it,
    the proxies' own hops inside the host's network`), or the rightmost where all are private. A proxy appends the
    address it saw to whatever the client sent, so the hops left of it are the client's to make up; one that
    replaces the header leaves the address alone. docs/serving.md says which header to name behind which proxy."""
    hops = [hop.strip() for hop in (header or "").split(",") if hop.strip()]
    public = [hop for hop in hops if not is_private(hop)]
    address = (public or hops or [""])[-1]
    return address[:100] or None


def is_private(hop: str) -> bool:
    """Whether a forwarding hop is an address inside a network (private, loopback, link-local: a proxy's own), not
    a visitor's on the internet. Anything that is not an address (a made-up or obfuscated hop) counts as public."""
    try:
        address = ipaddress.ip_address(hop.strip("[]").rsplit("%", 1)[0])
    except ValueError:
        return False
    return address.is_private or address.is_loopback or address.is_link_local


KIND_WORDS = {str: "text", int: "a number", float: "a number", bool: "true or false", list: "a list"}


def expect(field: str, value, *kinds: type, optional: bool = True, max_chars: int = MAX_SHOWN_CHARS):
    """`value` when it is one of `kinds` (or None, where `optional`), text no longer than `max_chars`; else
    InputError in one line naming `field` and what the call sent (never the text itself). A bool is no number here,
    though Python counts it as one."""
    if value is None and optional:
        return value
    if isinstance(value, str) and str in kinds and len(value) > max_chars:
        raise InputError(f"'{field}' is {len(value):,} characters long; this call takes at most {max_chars:,}.")
    if isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds):
        return value
    wanted = " or ".join(dict.fromkeys(KIND_WORDS.get(kind, kind.__name__) for kind in kinds))
    raise InputError(f"'{field}' must be {wanted}{' or null' if optional else ''}; this call sent {shape_of(value)}.")


def expect_texts(field: str, value) -> list[str]:
    """A list of texts (None: an empty list); else InputError naming `field`."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise InputError(f"'{field}' must be a list of text or null; this call sent {shape_of(value)}.")
    return value


def number_or_none(value, what: str):
    """A number from the page or the API: None or empty text gives None, a numeric string its number; InputError
    for other text."""
    if not isinstance(value, str):
        return value
    value = value.strip()
    try:
        return float(value) if value else None
    except ValueError:
        raise InputError(f"{what} must be a whole number, got {cut(repr(value))}.") from None


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
    reads them, if late), or the server is stopping (`policy.stop_serving`). A direct call, outside gradio's queue,
    is abandoned only when the server stops."""
    blocks, event_id = LocalContext.blocks.get(None), LocalContext.event_id.get(None)
    queue = getattr(blocks, "_queue", None)
    if queue is None or event_id is None:
        return policy.STOPPING.is_set
    stall = policy.UnreadStall()

    def is_abandoned() -> bool:
        if policy.STOPPING.is_set():  # the event's own method: the check enters no module of ours on its way
            return True
        for job in list(queue.active_jobs):
            for event in job or ():
                if event._id == event_id:
                    unread = queue.pending_messages_per_session.get(event.session_hash)
                    return not event.alive or stall.is_unread(None if unread is None else unread.qsize())
        return True  # no longer among the running events: cancelled, or its client is gone

    return is_abandoned
