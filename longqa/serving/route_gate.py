"""The door in front of a web app's routes, before anything is parsed: routes the app does not use closed (404 with
a message in words), every request body refused by its declared length (413 over `max_body_bytes`, 411 without a
Content-Length) before a byte of it is kept, except on the routes that bound their bodies themselves (the upload
gate's), and where the caller is known by an address, the requests it may send to the routes that start work
(`JoinBudget`: 429 past it), or where it is known only by the socket's address (a direct connection), the new
sessions it may open there (`NewSessionBudget`).

ASGI middleware that knows routes only as path ends and fragments it is given (the page names gradio's); of bodies
it reads only a join's on a direct connection, for the session it names.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections import OrderedDict
from typing import Callable

from starlette.responses import JSONResponse, PlainTextResponse

from longqa.serving.uploads import MIB, discard_body

MAX_ADDRESSES = 10_000  # addresses whose budgets are kept (the longest idle go first: a full budget is no loss)
MAX_SESSIONS_HEARD = 10_000  # session names heard on the heartbeat route that are kept (the oldest go first)
MAX_SESSION_CHARS = 100  # a session name as kept: gradio's are 11 to 36 characters
HEARD_GRACE_S = 0.5  # how long a join past its address's budget waits for its own session to be heard of
HEARD_POLL_S = 0.02
SESSION_KEY = re.compile(rb'"session_hash"\s*:\s*"([^"\\]{1,%d})"' % MAX_SESSION_CHARS)


def body_cap_bytes(max_text_bytes: int) -> int:
    """The largest request body a call may send when its largest value is a text of `max_text_bytes` UTF-8 bytes (a
    pasted document): that text with room for JSON's escapes (a quote, a backslash, a line break or a tab take two
    bytes: an eighth more), and a MiB for the other values (a question, files named by path, settings)."""
    return max_text_bytes + max_text_bytes // 8 + MIB


class JoinBudget:
    """How many requests each address may send to the routes that start work: `burst` at once, then `per_s` a
    second (a token bucket per address, bounded to MAX_ADDRESSES addresses)."""

    def __init__(self, per_s: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self.per_s, self.burst, self.clock = per_s, burst, clock
        self._left: OrderedDict[str, tuple[float, float]] = OrderedDict()  # address: (requests left, when)
        self._lock = threading.Lock()

    def take(self, address: str) -> bool:
        """Whether `address` may send one more now (and count it)."""
        now = self.clock()
        with self._lock:
            left, then = self._left.pop(address, (float(self.burst), now))
            left = min(float(self.burst), left + (now - then) * self.per_s)
            self._left[address] = (left - 1.0 if left >= 1.0 else left, now)
            while len(self._left) > MAX_ADDRESSES:
                self._left.popitem(last=False)
            return left >= 1.0


class SessionsHeard:
    """Sessions heard of on a route that names them in its path (gradio's heartbeat, `/gradio_api/heartbeat/NAME`,
    which a page opens as it sends its first event and gradio_client as it connects): the last MAX_SESSIONS_HEARD.
    Only the event loop that serves the routes notes and reads them."""

    def __init__(self, capacity: int = MAX_SESSIONS_HEARD):
        self.capacity = capacity
        self._heard: OrderedDict[str, None] = OrderedDict()

    def note(self, session: str) -> None:
        self._heard[session[:MAX_SESSION_CHARS]] = None
        self._heard.move_to_end(session[:MAX_SESSION_CHARS])
        while len(self._heard) > self.capacity:
            self._heard.popitem(last=False)

    def __contains__(self, session: str | None) -> bool:
        return bool(session) and session[:MAX_SESSION_CHARS] in self._heard

    async def heard_within(self, session: str | None, seconds: float) -> bool:
        """Whether `session` is heard of within `seconds` from now: a page's heartbeat and its first join leave
        together, and the join may arrive first."""
        deadline = time.monotonic() + seconds
        while session not in self:
            if not session or time.monotonic() >= deadline:
                return False
            await asyncio.sleep(HEARD_POLL_S)
        return True


class NewSessionBudget:
    """Which joins to the queue may come in where the caller's address is the socket's (a direct connection, where
    an office, a school or every test on loopback share one): every join of a session the server knows (it was
    admitted before, the last MAX_SESSIONS_HEARD such, or `is_known` says so) or has heard of (`heard`); of the
    others (a session nobody has heard of, a join that names no session), `budget`'s from each address, and past
    that only one whose session is heard of within `grace_s`. A client that never opens its session's heartbeat, as
    a flood of raw joins does not, is refused past the budget; a page or a client on the same address still joins.
    Only the event loop that serves the routes asks it."""

    def __init__(self, budget: JoinBudget, heard: SessionsHeard, is_known: Callable[[str], bool] = lambda s: False,
                 grace_s: float = HEARD_GRACE_S):
        self.budget, self.heard, self.is_known, self.grace_s = budget, heard, is_known, grace_s
        self.admitted = SessionsHeard()

    def is_new(self, session: str | None) -> bool:
        """Whether `session` is one the server neither knows nor has heard of (a join without one always is)."""
        return not session or not (session in self.heard or session in self.admitted or self.is_known(session))

    async def admits(self, address: str | None, session: str | None) -> bool:
        """Whether a join of `session` from `address` may come in now (a new session's counted in the address's
        budget; an admitted session is known from then on). A caller with no address is not counted."""
        admitted = (not self.is_new(session) or address is None or self.budget.take(address)
                    or (bool(session) and await self.heard.heard_within(session, self.grace_s)))
        if admitted and session:
            self.admitted.note(session)
        return admitted

    def refusal(self) -> str:
        return (f"Your address has opened more than {self.budget.burst} new sessions in a few seconds; this server "
                f"takes about {self.budget.per_s:g} new sessions a second from one address (a page already open "
                "is not counted). Please wait a few seconds.")


class RouteGate:
    """ASGI middleware: `closed` maps a path's end to the message a request for it is answered with (404); a POST
    to any other route (none of whose path ends in `own_bounds`) must declare its length, at most `max_body_bytes`;
    a POST to a route whose path holds one of `budgeted` takes one from its address's `budget` (the address
    `address_of(headers)` names; None: not counted), 429 when none is left. With `sessions` (a direct connection),
    such a POST is read first for the session it names (its JSON body's `session_hash`), and one `sessions` does not
    admit from the socket's address is refused 429, in FastAPI's JSON (`{"detail": ...}`). A request to a route
    whose path holds `heard_route` names a session at its path's end, noted in `heard`."""

    def __init__(self, app, max_body_bytes: int, closed: dict[str, str] | None = None,
                 own_bounds: tuple[str, ...] = (), budgeted: tuple[str, ...] = (), budget: JoinBudget | None = None,
                 address_of: Callable[[dict], str | None] = lambda headers: None,
                 heard: SessionsHeard | None = None, heard_route: str | None = None,
                 sessions: NewSessionBudget | None = None):
        self.app, self.max_body_bytes, self.own_bounds = app, max_body_bytes, own_bounds
        self.closed = dict(closed or {})
        self.budgeted, self.budget, self.address_of = budgeted, budget, address_of
        self.heard, self.heard_route, self.sessions = heard, heard_route, sessions

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"].rstrip("/")
        closed = next((message for end, message in self.closed.items() if path.endswith(end)), None)
        if closed is not None:
            await discard_body(receive)
            return await PlainTextResponse(closed, 404)(scope, receive, send)
        if self.heard is not None and self.heard_route and self.heard_route in path:
            self.heard.note(path.rsplit("/", 1)[-1])
        if scope["method"] != "POST" or path.endswith(self.own_bounds):
            return await self.app(scope, receive, send)
        refusal = self.refusal(*_declared(scope)) or self.over_budget(scope, path)
        if refusal is None and self.sessions is not None and any(route in path for route in self.budgeted):
            return await self.join_of_a_session(scope, receive, send)
        if refusal is None:
            return await self.app(scope, receive, send)
        status, message = refusal
        if status in (413, 429):
            await discard_body(receive)  # a client still sending would miss a reply sent before it has finished
        await PlainTextResponse(message, status)(scope, receive, send)

    def refusal(self, length: int | None, streamed: bool = False) -> tuple[int, str] | None:
        """(status, message) for a body of declared `length` (None: not declared; `streamed`: sent in chunks of
        undeclared total), or None when it may come in. A request with neither has no body."""
        if length is None and streamed:
            return 411, "A request with a body must say its size (a Content-Length header)."
        if length is not None and length > self.max_body_bytes:
            return 413, (f"This request is {length / MIB:,.1f} MB; this server takes requests of at most "
                         f"{self.max_body_bytes / MIB:,.1f} MB (a pasted text within the file size limit, a question "
                         "of a few sentences). Upload a long document as a file.")
        return None

    async def join_of_a_session(self, scope, receive, send):
        """A join on a direct connection: its body read (bounded by its declared length, checked before) for the
        session it names, refused past the socket address's budget of new sessions, else passed on whole."""
        chunks, message = [], {"more_body": True}
        while message.get("more_body", False):
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left before it had sent its join
            chunks.append(message.get("body", b""))
        body = b"".join(chunks)
        del chunks  # a pasted text's join may be tens of MB: held once
        client = scope.get("client")
        if not await self.sessions.admits(client[0] if client else None, session_named(body)):
            return await JSONResponse({"detail": self.sessions.refusal()}, 429)(scope, receive, send)
        replayed = False

        async def receive_again():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, receive_again, send)

    def over_budget(self, scope, path: str) -> tuple[int, str] | None:
        """(429, message) when the request starts work and its address has no budget left; else None."""
        if self.budget is None or not any(route in path for route in self.budgeted):
            return None
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        address = self.address_of(headers)
        if address is None or self.budget.take(address):
            return None
        return 429, (f"Your address has sent more than {self.budget.burst} requests in a few seconds; this server "
                     f"takes about {self.budget.per_s:g} a second from one address. Please wait a few seconds.")


def session_named(body: bytes) -> str | None:
    """The session a join's JSON body names, or None, found by its key without parsing a body of maybe tens of MB
    (inside a JSON string every quote is escaped, so only a key matches; a caller may name any session anyway)."""
    found = SESSION_KEY.search(body)
    return found.group(1).decode("utf-8", "replace") if found else None


def _declared(scope) -> tuple[int | None, bool]:
    """The request's declared Content-Length (None: none, or not a number) and whether it names a transfer encoding
    (a body sent in chunks)."""
    headers = {key.lower(): value.decode("latin-1").strip() for key, value in scope.get("headers", [])}
    length = headers.get(b"content-length")
    return (int(length) if length is not None and length.isdigit() else None,
            b"transfer-encoding" in headers or (length is not None and not length.isdigit()))
