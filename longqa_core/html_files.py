"""HTML pages (.html, .htm): their title and visible text, extracted by resiliparse in a child process that the
time limit and a cancel stop, whose memory is capped in proportion to the page, taking turns with the other HTML
reads of this process (`READERS`: so many children at once, one memory budget for all).

It decodes a page by its `<meta charset>` (through `text_files`) and cleans the text; it does not render HTML,
keep links or tables, or pick readers by extension (`documents`).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import threading
from typing import Iterator

from longqa_core.document_limits import ReadLimits
from longqa_core.errors import DocumentError
from longqa_core.text_files import clean_text, decode_non_binary
from longqa_core.waiting import wait_until


def read_html_file(data: bytes, name: str, limits: ReadLimits) -> str:
    """The page's title, then its visible text: block elements on their own lines, paragraphs and headings
    followed by a blank line, whitespace collapsed as a browser does outside `<pre>`."""
    source = decode_non_binary(data, name, declared_encoding=_declared_charset(data))
    title, body = _extract_html_text(source, name, limits)
    text = "\n\n".join(part for part in (title, body) if part)
    # Per line, not with a regular expression: " +\n" would rescan a long run of spaces from each of its starts.
    text = "\n".join(line.rstrip(" ") for line in text.split("\n"))
    return clean_text(_BLANK_LINES.sub("\n\n", text).strip("\n"))


_BLANK_LINES = re.compile(r"\n{3,}")

# resiliparse's HTML engine (lexbor) reads in linear time the pages that made the standard library's HTMLParser
# quadratic, but it holds the interpreter lock, is itself quadratic on misnested formatting tags, and needs about
# 20 bytes of memory per byte of an ordinary page, 200 of dense markup (docs/html-readers.md). So it runs in a
# child process: the time limit and a cancel stop it, its memory is capped, and the server's interpreter waits on a
# pipe. `READERS` bounds how many children run at once and how much memory they may have together.
MIB = 2**20
# A child's address space may hold the interpreter and resiliparse (about 21 MB measured) and this many bytes per
# byte of its page: dense markup (`'<p><b><i><u><s>x</p>'` repeated) measured 190, ordinary pages about 25.
HTML_BASE_MEMORY_BYTES = 64 * MIB
HTML_MEMORY_PER_BYTE = 256
DEFAULT_HTML_READERS = os.cpu_count() or 1  # parse children at once: one per core
DEFAULT_HTML_MEMORY_BYTES = 1536 * MIB  # all children's caps together (a 50 MB ordinary page peaks at 1.1 GB)
DEFAULT_HTML_WAITING = 8  # reads that may wait for a child; more are refused (each holds one of the page's workers)
_POLL_S = 0.1  # how often a read that waits or runs a child checks for a cancel
_HTML_OUT_OF_MEMORY_EXIT = 3
_HTML_WORKER = f"""
import resource, sys
max_memory_bytes = int(sys.argv[1])
sys.path[:] = sys.argv[2:]  # the server's own: the child runs without site-packages set up (-S), to start fast
resource.setrlimit(resource.RLIMIT_AS, (max_memory_bytes, max_memory_bytes))
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLParserException, HTMLTree
try:
    tree = HTMLTree.parse(sys.stdin.buffer.read().decode("utf-8"))
    body = extract_plain_text(tree, list_bullets=False, alt_texts=False)
    sys.stdout.buffer.write(((tree.title or "") + "\\0" + body).encode("utf-8"))
except (HTMLParserException, MemoryError):  # lexbor reports a failed allocation as a parser error
    sys.exit({_HTML_OUT_OF_MEMORY_EXIT})
"""


class HtmlReaders:
    """The HTML children of this process: at most `readers` at once, whose memory caps add up to no more than
    `memory_bytes`. Further reads wait their turn in arrival order (at most `max_waiting` of them; more are
    refused at once), hearing how many are ahead, and leave when their request is cancelled or its time is up."""

    def __init__(self, readers: int = DEFAULT_HTML_READERS, memory_bytes: int = DEFAULT_HTML_MEMORY_BYTES,
                 max_waiting: int = DEFAULT_HTML_WAITING):
        self.configure(readers, memory_bytes, max_waiting)
        self._condition = threading.Condition()
        self._waiting: list[object] = []  # one token per read waiting, in arrival order
        self._running = 0
        self._reserved_bytes = 0

    def configure(self, readers: int | None = None, memory_bytes: int | None = None,
                  max_waiting: int | None = None) -> None:
        """Change the bounds (a deployment's settings); reads in progress keep what they have."""
        if readers is not None:
            self.readers = max(1, int(readers))
        if memory_bytes is not None:
            self.memory_bytes = max(HTML_BASE_MEMORY_BYTES, int(memory_bytes))
        if max_waiting is not None:
            self.max_waiting = max(0, int(max_waiting))

    def memory_cap(self, n_bytes: int) -> int:
        """The address space a child reading `n_bytes` of page may have: in proportion to the page, at most all."""
        return min(self.memory_bytes, HTML_BASE_MEMORY_BYTES + HTML_MEMORY_PER_BYTE * n_bytes)

    def running(self) -> int:
        with self._condition:
            return self._running

    def waiting(self) -> int:
        with self._condition:
            return len(self._waiting)

    @contextlib.contextmanager
    def slot(self, cap_bytes: int, name: str, limits: ReadLimits) -> Iterator[None]:
        """A turn to run one child that may use `cap_bytes`: DocumentError at once when too many reads wait, then
        a wait in line (Cancelled when the request is stopped, the time error when its time is up)."""
        token = object()
        with self._condition:
            if len(self._waiting) >= self.max_waiting and not self._may_run(None, cap_bytes):
                pages = f"{self._running} HTML page{' is' if self._running == 1 else 's are'}"
                raise DocumentError(f"'{name}' cannot be read now: {pages} being read and {len(self._waiting)} "
                                    "wait, the most this server takes. Please try again in a minute.")
            self._waiting.append(token)
            try:
                self._wait(token, cap_bytes, name, limits)
            finally:
                self._waiting.remove(token)
                self._condition.notify_all()
            self._running += 1
            self._reserved_bytes += cap_bytes
        try:
            yield
        finally:
            with self._condition:
                self._running -= 1
                self._reserved_bytes -= cap_bytes
                self._condition.notify_all()

    def _may_run(self, token, cap_bytes: int) -> bool:
        first = not self._waiting or self._waiting[0] is token
        return (first and self._running < self.readers
                and self._reserved_bytes + cap_bytes <= self.memory_bytes)

    def _wait(self, token, cap_bytes: int, name: str, limits: ReadLimits) -> None:
        ahead = None

        def report_and_wait() -> None:
            nonlocal ahead
            if limits.is_over_time():
                raise limits.time_error(name, "waiting for an HTML reader")
            now_ahead = self._waiting.index(token) + self._running
            if limits.on_wait is not None and now_ahead != ahead:
                limits.on_wait(now_ahead)
            ahead = now_ahead
            self._condition.wait(_POLL_S)

        wait_until(lambda _: self._may_run(token, cap_bytes), limits.should_stop,
                   limits.stopped_message(name, "waiting to read"), _POLL_S, between=report_and_wait)


READERS = HtmlReaders()


def _extract_html_text(source: str, name: str, limits: ReadLimits) -> tuple[str, str]:
    """The page's title and its visible text (no script, style, head, template, noscript or form controls),
    extracted by `_HTML_WORKER` within the time left of `limits`, in a turn of `READERS`."""
    if limits.is_over_time():
        raise limits.time_error(name, "after decoding it")
    # "replace": a lone surrogate, which none of our decoders produces, would become "?" rather than an error.
    page = source.encode("utf-8", errors="replace")
    cap_bytes = READERS.memory_cap(len(page))
    with READERS.slot(cap_bytes, name, limits):
        returncode, stdout, stderr = _run_child(page, cap_bytes, len(source), name, limits)
    if returncode == _HTML_OUT_OF_MEMORY_EXIT:
        raise DocumentError(f"'{name}' could not be read: its HTML needs more than the {cap_bytes / 2**30:.2g} GB "
                            f"of memory that reading a page of {len(page) / MIB:.1f} MB may use.")
    if returncode < 0:
        raise DocumentError(f"'{name}' could not be read: the HTML reader stopped on it (signal {-returncode}).")
    if returncode:
        raise RuntimeError(f"the HTML reader failed: {stderr.decode('utf-8', errors='replace').strip()}")
    title, _, body = stdout.decode("utf-8").partition("\0")
    return title, body


def _run_child(page: bytes, cap_bytes: int, n_chars: int, name: str, limits: ReadLimits) -> tuple[int, bytes, bytes]:
    """Run `_HTML_WORKER` on `page` under `cap_bytes` of address space; killed at once (and waited for) when the
    request is stopped or its time is up. Returns its exit code, stdout and stderr."""
    command = [sys.executable, "-I", "-S", "-c", _HTML_WORKER, str(cap_bytes), *sys.path]
    # The page goes in as a file: Popen.communicate, called again after a timeout, would not write more of it.
    with _page_file(page) as stdin:
        child = subprocess.Popen(command, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        stdout, stderr = _communicate(child, n_chars, name, limits)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()  # reaps it and closes the pipes
    return child.returncode, stdout, stderr


def _page_file(page: bytes):
    """An unnamed file holding `page`, at its start: in memory where Linux offers it, else on disk."""
    if hasattr(os, "memfd_create"):
        page_file = os.fdopen(os.memfd_create("html-page"), "w+b")
    else:
        page_file = tempfile.TemporaryFile()
    page_file.write(page)
    page_file.seek(0)
    return page_file


def _communicate(child: subprocess.Popen, n_chars: int, name: str, limits: ReadLimits) -> tuple[bytes, bytes]:
    """The child's output once it exits, polling for a cancel and the time limit meanwhile."""
    output: list[tuple[bytes, bytes]] = []

    def exited(poll_s: float) -> bool:
        remaining_s = limits.remaining_s()
        try:
            output.append(child.communicate(timeout=poll_s if remaining_s is None else min(poll_s, remaining_s)))
            return True
        except subprocess.TimeoutExpired:  # no output is lost: the next call goes on collecting it
            return False

    def within_time() -> None:
        if limits.is_over_time():
            raise limits.time_error(name, f"parsing {n_chars:,} characters of HTML")

    wait_until(exited, limits.should_stop, limits.stopped_message(name, "reading"), _POLL_S, between=within_time)
    return output[0]


_META_CHARSET = re.compile(rb"""<meta\b[^>]*?\bcharset\s*=\s*["']?\s*([A-Za-z0-9_.:+-]+)""", re.IGNORECASE)
# The HTML standard's prescan reads the first 1,024 bytes; pages with a long head before the meta tag exist.
_CHARSET_PRESCAN_BYTES = 8192


def _declared_charset(data: bytes) -> str | None:
    """The charset label of a `<meta charset>` or `<meta http-equiv="Content-Type" content="...; charset=">`."""
    match = _META_CHARSET.search(data[:_CHARSET_PRESCAN_BYTES])
    return match.group(1).decode("ascii") if match else None
