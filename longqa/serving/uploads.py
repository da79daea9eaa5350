"""Uploads on this server's disk, bounded: the bytes each visitor and all visitors together may hold (refused at the
door, before anything is written, with a message that says so), the files being read now (never deleted), and each
upload deleted a short time (`keep_s`) after it came and after the last page that holds it in its documents let it
go, or sooner, oldest first, when a new upload needs the room and the old one is not being read. A copy of a bundled
example is never deleted: an upload of the same bytes lands on the same path as the example's copy.

Pages claim the files their documents hold (`claim`, by page session): gradio names an upload by its bytes, so two
visitors with the same file share one path, and one's clean-up must not take it from the other. A claim lasts until
its page drops the file from its documents or closes (`release`); claimed files are touched at each sweep, so that
gradio's own cache clean-up, which goes by a file's age, leaves them too.

It admits, records and deletes files by path; it knows nothing of gradio's routes (the page's middleware asks it
before an upload is written and tells it which files were written) nor of what a file holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import filecmp
import itertools
import json
import os
import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from starlette.responses import PlainTextResponse

from longqa_core.errors import InputError

MIB = 2**20
DEFAULT_TOTAL_BYTES = 2048 * MIB  # every upload held on this server together
DEFAULT_PER_VISITOR_BYTES = 200 * MIB  # one visitor's uploads held (four files at the default 50 MB file limit)
DEFAULT_KEEP_S = 600.0  # an upload is deleted this long after it came, unless it is being read
EVICT_AFTER_S = 5.0  # uploads older than this that nothing reads make room for a new one when the total is reached
SWEEP_EVERY_S = 30.0
MIN_FILE_BYTES = 4096  # a file holds at least one block of disk, however small
MAX_DELETED_NAMED = 4096  # deleted uploads whose paths the store remembers, to tell them from never-uploaded ones


class UploadRefused(InputError):
    """An upload that would pass a visitor's bytes or the server's total."""


@dataclass
class Upload:
    path: str
    n_bytes: int
    visitor: str | None
    at_s: float


class UploadStore:
    """The uploads held by this server, by path, and the bytes reserved by uploads being written. A visitor key of
    None (a direct connection, where visitors cannot be told apart) is counted only in the total."""

    def __init__(self, total_bytes: int = DEFAULT_TOTAL_BYTES, per_visitor_bytes: int = DEFAULT_PER_VISITOR_BYTES,
                 keep_s: float = DEFAULT_KEEP_S, *, evict_after_s: float = EVICT_AFTER_S,
                 clock: Callable[[], float] = time.monotonic,
                 on_delete: Callable[[str], None] = lambda path: None):
        self.total_bytes = total_bytes
        self.per_visitor_bytes = per_visitor_bytes
        self.keep_s = keep_s
        self.evict_after_s = evict_after_s
        self.clock = clock
        self.on_delete = on_delete  # tells the web framework that a file is gone
        self._uploads: dict[str, Upload] = {}
        self._pending: dict[int, tuple[int, str | None]] = {}  # reservations of uploads being written
        self._reading: Counter[str] = Counter()  # paths being read now, by how many requests
        self._deleted: OrderedDict[str, None] = OrderedDict()  # the last MAX_DELETED_NAMED paths deleted
        self._claims: dict[str, set[str]] = {}  # path -> the page sessions holding it in their documents
        self._bundled: dict[int, list[Path]] = {}  # the bundled examples by size: their copies are never deleted
        self._ids = itertools.count()
        self._lock = threading.Lock()

    # ---------------------------------------------------------------------------------------------- questions
    def held_bytes(self, visitor: str | None = None) -> int:
        """Bytes held and reserved: by `visitor`, or by everybody (None)."""
        with self._lock:
            return self._held(visitor)

    def is_known(self, path: str) -> bool:
        with self._lock:
            return str(path) in self._uploads

    def was_deleted(self, path: str) -> bool:
        """Whether this store deleted `path` (one of its last MAX_DELETED_NAMED deletions): an upload asked about
        after its time, not a path that was never uploaded."""
        with self._lock:
            return str(path) in self._deleted

    def _held(self, visitor: str | None) -> int:
        held = sum(u.n_bytes for u in self._uploads.values() if visitor is None or u.visitor == visitor)
        return held + sum(n for n, v in self._pending.values() if visitor is None or v == visitor)

    # ---------------------------------------------------------------------------------------------- uploads
    @contextlib.contextmanager
    def admit(self, n_bytes: int, visitor: str | None = None) -> Iterator[None]:
        """Room for an upload of `n_bytes` (the request's whole body) while it is written: UploadRefused at once
        when it would pass the visitor's bytes, or the total after unread uploads older than `evict_after_s` were
        deleted, oldest first. The reservation ends with the `with` body (`record` then holds the files)."""
        n_bytes = max(MIN_FILE_BYTES, int(n_bytes))
        with self._lock:
            self._check_visitor(n_bytes, visitor)
            self._make_room(n_bytes)
            reservation = next(self._ids)
            self._pending[reservation] = (n_bytes, visitor)
        try:
            yield
        finally:
            with self._lock:
                del self._pending[reservation]

    def record(self, paths: Iterable[str], visitor: str | None = None) -> None:
        """Files written by an upload of `visitor`: held from now, deleted after `keep_s` unless being read or
        claimed. A copy of a bundled example is not recorded: it is never deleted."""
        now = self.clock()
        paths = [path for path in map(str, paths) if not self.is_bundled_copy(path)]
        with self._lock:
            for path in paths:
                self._uploads[path] = Upload(path, _disk_bytes(path), visitor, now)

    def keep_copies_of(self, examples: Iterable[str | Path]) -> None:
        """The bundled `examples`: a file with the same bytes as one of them is never recorded, so never deleted."""
        for size, paths in _by_size(examples).items():
            self._bundled.setdefault(size, []).extend(paths)

    def is_bundled_copy(self, path: str) -> bool:
        """Whether the file at `path` holds the same bytes as a bundled example (an upload of the example, or gradio's
        copy of it: the same path, as gradio names a file by its bytes)."""
        try:
            size = os.stat(path).st_size
            return any(filecmp.cmp(path, example, shallow=False) for example in self._bundled.get(size, ()))
        except OSError:
            return False

    def claim(self, holder: str | None, paths: Iterable[str]) -> None:
        """Page session `holder` holds exactly `paths` in its documents now: each is kept while any page claims it,
        and the files it held before and not now lose its claim (never anyone else's). None (a direct call, not a
        page) claims nothing."""
        if holder is None:
            return
        paths = {str(p) for p in paths or ()}
        with self._lock:
            self._drop_claims(holder, keep=paths)
            for path in paths:
                self._claims.setdefault(path, set()).add(holder)

    def release(self, holder: str | None) -> None:
        """Page session `holder` closed: its claims end (an upload no other page claims goes at the next sweep
        after its time)."""
        if holder is not None:
            with self._lock:
                self._drop_claims(holder, keep=set())

    def holders(self, path: str) -> int:
        """How many pages hold `path` in their documents now."""
        with self._lock:
            return len(self._claims.get(str(path), ()))

    def is_claimed(self, path: str) -> bool:
        return self.holders(path) > 0

    def _drop_claims(self, holder: str, keep: set[str]) -> None:
        for path in [p for p, holders in self._claims.items() if holder in holders and p not in keep]:
            self._claims[path].discard(holder)
            if not self._claims[path]:
                del self._claims[path]

    @contextlib.contextmanager
    def reading(self, paths: Iterable[str]) -> Iterator[None]:
        """The `with` body reads `paths`: none of them is deleted meanwhile."""
        paths = [str(p) for p in paths]
        with self._lock:
            self._reading.update(paths)
        try:
            yield
        finally:
            with self._lock:
                self._reading.subtract(paths)
                self._reading += Counter()  # drops the paths no request reads any more

    def sweep(self) -> int:
        """Delete the uploads older than `keep_s` that nothing reads and no page claims; returns the bytes freed.
        The claimed files are touched: gradio's cache clean-up deletes its files by their change time."""
        now = self.clock()
        with self._lock:
            for path in self._claims:
                with contextlib.suppress(OSError):
                    os.utime(path)
            old = [u for u in self._uploads.values() if now - u.at_s > self.keep_s and u.path not in self._reading
                   and u.path not in self._claims]
            return sum(self._delete(u) for u in old)

    def delete_all(self) -> None:
        """Every upload that nothing reads (the server is stopping)."""
        with self._lock:
            for upload in [u for u in self._uploads.values() if u.path not in self._reading]:
                self._delete(upload)

    # ---------------------------------------------------------------------------------------------- rules
    def _check_visitor(self, n_bytes: int, visitor: str | None) -> None:
        if visitor is None:
            return
        held = self._held(visitor)
        if held + n_bytes > self.per_visitor_bytes:
            raise UploadRefused(
                f"This upload ({_mb(n_bytes)}) would bring your uploads on this server to {_mb(held + n_bytes)}, "
                f"over the {_mb(self.per_visitor_bytes)} one visitor may hold. Uploads are deleted "
                f"{self.keep_s / 60:g} minutes after they came, once no page holds them: remove some from your "
                "documents, or upload less.")

    def _make_room(self, n_bytes: int) -> None:
        """Delete unread uploads older than `evict_after_s`, those no page claims first, then oldest first, until
        `n_bytes` fit in the total; else UploadRefused."""
        now = self.clock()
        evictable = sorted((u for u in self._uploads.values()
                            if now - u.at_s > self.evict_after_s and u.path not in self._reading),
                           key=lambda u: (u.path in self._claims, u.at_s))
        held = self._held(None)
        for upload in evictable:
            if held + n_bytes <= self.total_bytes:
                break
            held -= self._delete(upload)
        if held + n_bytes > self.total_bytes:
            raise UploadRefused(
                f"This server holds {_mb(held)} of uploads, and this one ({_mb(n_bytes)}) would pass the "
                f"{_mb(self.total_bytes)} it keeps for all visitors. Please try again in a minute.")

    def _delete(self, upload: Upload) -> int:
        """Remove the file (and its folder, when empty) and forget it; the bytes it held."""
        self._uploads.pop(upload.path, None)
        self._deleted[upload.path] = None
        while len(self._deleted) > MAX_DELETED_NAMED:
            self._deleted.popitem(last=False)
        path = Path(upload.path)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        with contextlib.suppress(OSError):
            path.parent.rmdir()  # gradio keeps each upload in a folder named by its hash
        self.on_delete(upload.path)
        return upload.n_bytes


def _disk_bytes(path: str) -> int:
    try:
        return max(MIN_FILE_BYTES, os.stat(path).st_size)
    except OSError:
        return MIN_FILE_BYTES


def _by_size(paths: Iterable[str | Path]) -> dict[int, list[Path]]:
    by_size: dict[int, list[Path]] = {}
    for path in map(Path, paths):
        with contextlib.suppress(OSError):
            by_size.setdefault(path.stat().st_size, []).append(path)
    return by_size


def _mb(n_bytes: int) -> str:
    return f"{n_bytes / MIB:,.1f} MB"


class UploadGate:
    """ASGI middleware in front of an upload route (`route`: the path's end, such as gradio's "/gradio_api/upload"):
    asks `store` for room by the request's Content-Length before a byte is written (413 with the store's message
    when refused; 411 without a length), then records the files the route answered with (a JSON list of paths)
    under the visitor named by `visitor_of(headers)` (None: counted only in the total)."""

    def __init__(self, app, store: UploadStore, route: str, visitor_of: Callable[[dict], str | None]):
        self.app, self.store, self.route, self.visitor_of = app, store, route, visitor_of

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or not scope["path"].endswith(self.route):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        length = headers.get("content-length", "")
        if not length.isdigit():
            return await PlainTextResponse("An upload must say its size (a Content-Length header).", 411)(
                scope, receive, send)
        visitor = self.visitor_of(headers)
        try:
            reservation = self.store.admit(int(length), visitor)
            reservation.__enter__()
        except UploadRefused as exc:
            await discard_body(receive)  # a client still sending would miss a reply sent before it has finished
            return await PlainTextResponse(str(exc), 413)(scope, receive, send)
        answer = {"status": None, "body": []}

        async def send_and_keep(message):
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
            elif message["type"] == "http.response.body":
                answer["body"].append(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, send_and_keep)  # background tasks (gradio moves the files) run inside
        finally:
            reservation.__exit__(None, None, None)
        if answer["status"] == 200:
            self.store.record(_paths_in(b"".join(answer["body"])), visitor)


def _paths_in(body: bytes) -> list[str]:
    try:
        paths = json.loads(body)
    except ValueError:
        return []
    return [p for p in paths if isinstance(p, str)] if isinstance(paths, list) else []


async def discard_body(receive) -> None:
    """Read the request's body to its end, keeping none of it."""
    while True:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return


def sweeping(store: UploadStore, every_s: float = SWEEP_EVERY_S):
    """An ASGI lifespan (FastAPI's `lifespan=`) that sweeps `store` every `every_s` while the server runs and
    deletes what is left when it stops."""

    @contextlib.asynccontextmanager
    async def lifespan(app):
        async def sweep_forever():
            while True:
                await asyncio.sleep(every_s)
                await asyncio.to_thread(store.sweep)

        task = asyncio.create_task(sweep_forever())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            store.delete_all()

    return lifespan
