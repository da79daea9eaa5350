"""The door in front of a web app's routes, before anything is parsed: routes the app does not use closed (404 with
a message in words), and every request body refused by its declared length (413 over `max_body_bytes`, 411 without a
Content-Length) before a byte of it is kept, except on the routes that bound their bodies themselves (the upload
gate's).

ASGI middleware that knows routes only as path ends and fragments it is given (the page names gradio's); it reads
no body and knows nothing of what a request asks.
"""

from __future__ import annotations

from longqa.serving.uploads import MIB, _discard_body, _plain_response


def body_cap_bytes(max_text_bytes: int) -> int:
    """The largest request body a call may send when its largest value is a text of `max_text_bytes` UTF-8 bytes (a
    pasted document): that text with room for JSON's escapes (a quote, a backslash, a line break or a tab take two
    bytes: an eighth more), and a MiB for the other values (a question, files named by path, settings)."""
    return max_text_bytes + max_text_bytes // 8 + MIB


class RouteGate:
    """ASGI middleware: `closed` maps a path's end to the message a request for it is answered with (404); a POST
    to any other route (none of whose path ends in `own_bounds`) must declare its length, at most `max_body_bytes`."""

    def __init__(self, app, max_body_bytes: int, closed: dict[str, str] | None = None,
                 own_bounds: tuple[str, ...] = ()):
        self.app, self.max_body_bytes, self.own_bounds = app, max_body_bytes, own_bounds
        self.closed = dict(closed or {})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"].rstrip("/")
        closed = next((message for end, message in self.closed.items() if path.endswith(end)), None)
        if closed is not None:
            await _discard_body(receive)
            return await _plain_response(send, 404, closed)
        if scope["method"] != "POST" or path.endswith(self.own_bounds):
            return await self.app(scope, receive, send)
        refusal = self.refusal(*_declared(scope))
        if refusal is None:
            return await self.app(scope, receive, send)
        status, message = refusal
        if status == 413:
            await _discard_body(receive)  # a client still sending would miss a reply sent before it has finished
        await _plain_response(send, status, message)

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


def _declared(scope) -> tuple[int | None, bool]:
    """The request's declared Content-Length (None: none, or not a number) and whether it names a transfer encoding
    (a body sent in chunks)."""
    headers = {key.lower(): value.decode("latin-1").strip() for key, value in scope.get("headers", [])}
    length = headers.get(b"content-length")
    return (int(length) if length is not None and length.isdigit() else None,
            b"transfer-encoding" in headers or (length is not None and not length.isdigit()))
