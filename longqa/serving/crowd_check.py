"""A bounded crowd against a served app, on loopback only: N fresh `gradio_client` clients each send one large or
slow request, then a normal visitor asks a small question; measures the visitor's wait and answer, what happened to
each crowd request (answered, refused and why, cancelled), and the server's memory before, at its peak and after the
crowd is cancelled.

It measures and returns numbers; it formats nothing (scripts/measure_crowd.py writes the JSON and the table) and
starts no server (the caller gives the URL and the server's process id).
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import CancelledError
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psutil
from gradio_client import Client, handle_file

MAX_CLIENTS = 16  # the crowd stays bounded whatever the caller asks
FILLER = "The harbour was quiet that morning and the boats stayed in, as they had the day before. "


def large_text(n_bytes: int) -> str:
    """About `n_bytes` of plain prose with no fact in it: every window must be read to find nothing."""
    return FILLER * max(1, n_bytes // len(FILLER))


def entity_once_text(n_bytes: int, entity: str = "Harrowgate") -> str:
    """About `n_bytes` of prose that names `entity` once, in the middle, and states nothing about it: a guided
    question about it ranks one window first, finds a weak answer there and falls back to reading everything."""
    half = large_text(n_bytes // 2)
    return f"{half}{entity} was named once in the harbour master's book. {half}"


def fact_text(n_bytes: int, tide: int, entity: str = "Harrowgate") -> str:
    """About `n_bytes` of prose stating `entity`'s tide once, in the middle: guided reading answers it from a window
    or two, so what a crowd of these costs is ranking (the index), not reading."""
    half = large_text(n_bytes // 2)
    return f"{half}The tide of {entity} is {tide}. {half}"


def slow_html(n_bytes: int) -> str:
    """Unterminated tags, quadratic for the standard library's HTMLParser (issue 32): `'<a' * n`."""
    return "<a" * max(1, n_bytes // 2)


def tree_rss(process: psutil.Process) -> int:
    """The resident bytes of a process and its children (an HTML reader's, an index builder's)."""
    total = 0
    for each in (process, *process.children(recursive=True)):
        try:
            total += each.memory_info().rss
        except psutil.Error:  # a child that ended meanwhile
            pass
    return total


class MemorySampler:
    """The peak RSS of a process and its children, sampled every `every_s` in a thread until `stop()`."""

    def __init__(self, pid: int, every_s: float = 0.1):
        self.process = psutil.Process(pid)
        self.peak = tree_rss(self.process)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.every_s = every_s
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(self.every_s):
            self.peak = max(self.peak, tree_rss(self.process))

    def stop(self) -> int:
        self._done.set()
        self._thread.join(5)
        return self.peak


@dataclass
class CrowdOutcome:
    visitor_right: bool | None
    visitor_s: float | None
    visitor_error: str | None
    visitor_queue: dict | None
    rss_idle: int
    rss_peak: int
    rss_after: int
    crowd: list[str] = field(default_factory=list)  # per request: "answered", "refused: …", "cancelled", "lost"
    idle_after_cancel_s: float | None = None  # from the cancels until `idle()` said so (None: no `idle`, or never)


def sample_visitor(url: str, samples_dir: Path) -> Callable[[], tuple[bool, float, dict]]:
    """The normal visitor of a crowd: the first bundled example's question over its sample file, from a fresh
    client each time; returns (right answer, seconds, the readout's queue)."""
    example = json.loads((samples_dir / "examples.json").read_text())[0]

    def ask() -> tuple[bool, float, dict]:
        began = time.monotonic()
        *_, readout = Client(url, verbose=False).predict([handle_file(str(samples_dir / example["file"]))], "",
                                                         example["question"], 1, api_name="/ask")
        return (readout["answers"][0]["text"].strip() == example["answer"], time.monotonic() - began,
                readout["queue"])
    return ask


def ask_job(url: str, path: Path, question: str, reading: str):
    """A fresh client's `/ask` job (submitted, not awaited): a new gradio session per request."""
    return Client(url, verbose=False).submit([handle_file(str(path))], "", question, 1, reading, api_name="/ask")


def outcome_of(job, timeout_s: float) -> str:
    try:
        job.result(timeout=timeout_s)
        return "answered"
    except CancelledError:
        return "cancelled"
    except TimeoutError:
        return "lost (no answer in time)"
    except Exception as exc:  # noqa: BLE001 - a refusal is an outcome to record, with its message
        message = str(exc).strip()
        return f"refused: {message[:300]}" if message else f"no message ({type(exc).__name__})"


def settle(jobs: list, wait_s: float, settle_s: float) -> tuple[list[str], float]:
    """Give `jobs` `wait_s` more, cancel what is left (waiting up to `settle_s` for each cancelled one to end): each
    job's outcome, and when the rest was cancelled."""
    time.sleep(wait_s)
    outcomes = []
    for job in jobs:
        if job.done():
            outcomes.append(outcome_of(job, 1.0))
        else:
            job.cancel()
            outcomes.append(None)
    cancelled_at = time.monotonic()
    deadline = cancelled_at + settle_s
    for i, job in enumerate(jobs):
        if outcomes[i] is None:  # cancelled by us: gradio_client then raises its own errors, not the server's
            ended = outcome_of(job, max(1.0, deadline - time.monotonic()))
            outcomes[i] = "answered" if ended == "answered" else "cancelled"
    return outcomes, cancelled_at


def run_crowd(url: str, server_pid: int, crowd_files: list[Path], visitor: Callable[[], tuple[bool, float, dict]],
              *, question: str = "What is the tide of Harrowgate?", reading: str = "full",
              visitor_after_s: float = 3.0, settle_s: float = 60.0, wait_answers_s: float = 5.0,
              idle: Callable[[], bool] | None = None) -> CrowdOutcome:
    """Send one request per file from a fresh client each, then `visitor()` (returns right, seconds, queue)
    `visitor_after_s` later; then give the crowd `wait_answers_s` more, cancel what is left, and measure memory once
    `idle()` says the server has no request left (or `settle_s` passed)."""
    files = crowd_files[:MAX_CLIENTS]
    server = psutil.Process(server_pid)
    rss_idle = tree_rss(server)
    sampler = MemorySampler(server_pid)
    jobs = [ask_job(url, path, question, reading) for path in files]
    time.sleep(visitor_after_s)
    right = seconds = error = queue = None
    try:
        right, seconds, queue = visitor()
    except Exception as exc:  # noqa: BLE001 - the visitor refused is an outcome
        error = str(exc)[:300]
    outcomes, cancelled_at = settle(jobs, wait_answers_s, settle_s)
    deadline = cancelled_at + settle_s
    while idle is not None and not idle() and time.monotonic() < deadline:
        time.sleep(0.05)
    idle_after = time.monotonic() - cancelled_at if idle is not None and idle() else None
    rss_peak = sampler.stop()
    time.sleep(1.0)
    return CrowdOutcome(right, seconds, error, queue, rss_idle, rss_peak, tree_rss(server), outcomes, idle_after)


@dataclass
class MemoryReturn:
    """What a server's memory did over a run of small requests: idle before, right after, and `settle_s` later."""

    requests: int
    right: int
    seconds: float
    rss_idle: int
    rss_peak: int
    rss_after: int
    rss_settled: int
    settle_s: float


def run_small_requests(server_pid: int, visitor: Callable[[], tuple[bool, float, dict]], n: int = 100,
                       threads: int = 4, settle_s: float = 60.0) -> MemoryReturn:
    """`n` normal visitors' requests (`visitor()`, a fresh client each), `threads` at a time, and the server's
    memory (its children included) before, at its peak, right after and `settle_s` after the last one."""
    server = psutil.Process(server_pid)
    rss_idle = tree_rss(server)
    sampler = MemorySampler(server_pid)
    right = []
    began = time.monotonic()
    todo = iter(range(min(n, 1000)))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if next(todo, None) is None:
                    return
            try:
                right.append(visitor()[0])
            except Exception:  # noqa: BLE001 - a failed request counts as not right
                right.append(False)
    workers = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, min(threads, MAX_CLIENTS)))]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    seconds = time.monotonic() - began
    rss_after = tree_rss(server)
    time.sleep(settle_s)
    return MemoryReturn(len(right), sum(right), seconds, rss_idle, max(sampler.stop(), rss_after), rss_after,
                        tree_rss(server), settle_s)
