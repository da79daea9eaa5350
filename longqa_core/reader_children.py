"""The child processes that read documents (HTML with resiliparse, PDF with PDFium): one pool for both (`READERS`: so
many children at once, one memory budget for all, a bounded wait in line), and `read_in_child`, which runs one
reader's code in a child under an address-space cap, killed at once when its request is stopped or its time is up.

It knows no document format: each reader hands it its code, the bytes to read and their cap, and decodes what comes
back (`html_files`, `pdf_files`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
from typing import Iterator

from longqa_core.documents import ReadLimits
from longqa_core.errors import DocumentError
from longqa_core.waiting import wait_until

MIB = 2**20
# Parsers of untrusted documents hold the interpreter lock for seconds (lexbor, PDFium's content streams), are
# quadratic on some inputs, and need many times a file's size in memory (docs/html-readers.md, docs/serving.md).
# So they run in children: the time limit and a cancel stop them, their memory is capped and handed back when they
# end, and the server's interpreter waits on a pipe. `READERS` bounds how many run at once and their memory.
DEFAULT_READERS = os.cpu_count() or 1  # children at once: one per core
DEFAULT_MEMORY_BYTES = 1536 * MIB  # all children's caps together (a 50 MB ordinary HTML page peaks at 1.1 GB)
DEFAULT_WAITING = 8  # reads that may wait for a child; more are refused (each holds one of the page's workers)
MIN_CAP_BYTES = 64 * MIB  # the least a child is given: the interpreter and a parser
_POLL_S = 0.1  # how often a read that waits or runs a child checks for a cancel
OUT_OF_MEMORY_EXIT = 3  # what a reader's code exits with when its parser runs out of its address space
# The start of every child: its address space capped, its arguments (`args`), the server's own import path (the
# child runs without site-packages set up, -S, to start fast); then the reader's code, which reads stdin.
_PRELUDE = """
import resource, sys
max_memory_bytes, n_args = int(sys.argv[1]), int(sys.argv[2])
args, sys.path[:] = sys.argv[3:3 + n_args], sys.argv[3 + n_args:]
resource.setrlimit(resource.RLIMIT_AS, (max_memory_bytes, max_memory_bytes))
"""


class ReaderChildren:
    """The reading children of this process: at most `readers` at once, whose memory caps add up to no more than
    `memory_bytes`. Further reads wait their turn in arrival order (at most `max_waiting` of them; more are
    refused at once), hearing how many are ahead, and leave when their request is cancelled or its time is up."""

    def __init__(self, readers: int = DEFAULT_READERS, memory_bytes: int = DEFAULT_MEMORY_BYTES,
                 max_waiting: int = DEFAULT_WAITING):
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
            self.memory_bytes = max(MIN_CAP_BYTES, int(memory_bytes))
        if max_waiting is not None:
            self.max_waiting = max(0, int(max_waiting))

    def memory_cap(self, base_bytes: int, per_byte: int, n_bytes: int) -> int:
        """The address space a child reading `n_bytes` may have: `base_bytes` and `per_byte` for each, at most all."""
        return min(self.memory_bytes, base_bytes + per_byte * n_bytes)

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
                documents = f"{self._running} document{' is' if self._running == 1 else 's are'}"
                raise DocumentError(f"'{name}' cannot be read now: {documents} being read and {len(self._waiting)} "
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
                raise limits.time_error(name, "waiting for a document reader")
            now_ahead = self._waiting.index(token) + self._running
            if limits.on_wait is not None and now_ahead != ahead:
                limits.on_wait(now_ahead)
            ahead = now_ahead
            self._condition.wait(_POLL_S)

        wait_until(lambda _: self._may_run(token, cap_bytes), limits.should_stop,
                   limits.stopped_message(name, "waiting to read"), _POLL_S, between=report_and_wait)


READERS = ReaderChildren()


def read_in_child(readers: ReaderChildren, code: str, data: bytes, cap_bytes: int, name: str, limits: ReadLimits,
                  doing: str, *, kind: str, unit: str, args: tuple[str, ...] = (), grace_s: float = 0.0) -> bytes:
    """Run the `kind` reader (`"PDF"`, `"HTML"`) `code` on `data` (its stdin: a `unit` such as "file" or "page") in
    a child under `cap_bytes` of address space, in a turn of `readers`; its code finds `args` (strings) in `args`.
    Killed at once (and waited for) when the request is stopped, or `grace_s` after its time is up (the time error
    then says it was `doing` `name`). Returns its stdout; DocumentError when the child ran out of its memory or was
    stopped by a signal, RuntimeError (with its stderr) when it failed otherwise."""
    with readers.slot(cap_bytes, name, limits):
        command = [sys.executable, "-I", "-S", "-c", _PRELUDE + code, str(cap_bytes), str(len(args)), *args,
                   *sys.path]
        # The input goes in as a file: Popen.communicate, called again after a timeout, would not write more of it.
        with _input_file(data) as stdin:
            child = subprocess.Popen(command, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            stdout, stderr = _communicate(child, name, limits, doing, grace_s)
        finally:
            if child.poll() is None:
                child.kill()
                child.communicate()  # reaps it and closes the pipes
    returncode = child.returncode
    # Python exits with OUT_OF_MEMORY_EXIT on a MemoryError; PDFium, in C, aborts when an allocation past the cap fails
    if returncode in (OUT_OF_MEMORY_EXIT, -signal.SIGABRT):
        raise DocumentError(f"'{name}' could not be read: its {kind} needs more than the {cap_bytes / 2**30:.2g} GB "
                            f"of memory that reading a {unit} of {len(data) / 2**20:.1f} MB may use.")
    if returncode < 0:
        raise DocumentError(f"'{name}' could not be read: the {kind} reader stopped on it (signal {-returncode}).")
    if returncode:
        raise RuntimeError(f"the {kind} reader failed: {stderr.decode('utf-8', errors='replace').strip()}")
    return stdout


def _input_file(data: bytes):
    """An unnamed file holding `data`, at its start: in memory where Linux offers it, else on disk."""
    if hasattr(os, "memfd_create"):
        input_file = os.fdopen(os.memfd_create("reader-input"), "w+b")
    else:
        input_file = tempfile.TemporaryFile()
    input_file.write(data)
    input_file.seek(0)
    return input_file


def _communicate(child: subprocess.Popen, name: str, limits: ReadLimits, doing: str,
                 grace_s: float) -> tuple[bytes, bytes]:
    """The child's output once it exits, polling for a cancel and the time limit (and `grace_s`) meanwhile."""
    output: list[tuple[bytes, bytes]] = []

    def remaining_s() -> float | None:
        if limits.max_read_s is None:
            return None
        return max(0.0, limits.max_read_s + grace_s - limits.elapsed_s())

    def exited(poll_s: float) -> bool:
        remaining = remaining_s()
        try:
            output.append(child.communicate(timeout=poll_s if remaining is None else min(poll_s, remaining)))
            return True
        except subprocess.TimeoutExpired:  # no output is lost: the next call goes on collecting it
            return False

    def within_time() -> None:
        if remaining_s() == 0.0:
            raise limits.time_error(name, doing)

    wait_until(exited, limits.should_stop, limits.stopped_message(name, "reading"), _POLL_S, between=within_time)
    return output[0]
