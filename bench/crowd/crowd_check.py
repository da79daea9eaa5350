"""A bounded crowd against a served app, on loopback only: N fresh `gradio_client` clients each send one large or
slow request, then a normal visitor asks a small question; measures the visitor's wait and answer, what happened to
each crowd request (answered, refused and why, cancelled), and the server's memory before, at its peak and after the
crowd is cancelled; and how soon a request cancelled inside one stage of its work (tokenizing, indexing) stops,
in the server's CPU seconds.

It measures and returns numbers; it formats nothing (scripts/measure_crowd.py writes the JSON and the table) and
starts no server (the caller gives the URL and the server's process id).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from concurrent.futures import CancelledError
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psutil
from gradio_client import Client, handle_file

from longqa_core.errors import Cancelled

MAX_CLIENTS = 16  # the crowd stays bounded whatever the caller asks
# The targets a served app is held to (issues 32, 40, 48 and 61). The crowd and attack measurements check them
# (`meets_target`) and report their figures against them in docs/serving.md and docs/crowd-*.md; a test in tests/
# that runs a crowd holds each to TEST_MARGIN times its target, since a busy machine stretches wall and CPU seconds.
VISITOR_WAIT_TARGET_S = 10.0  # the other visitor's wait, from its question to its answer, behind any crowd
CANCEL_CPU_TARGET_S = 1.0  # the server's CPU seconds from a cancel until the request's work stopped and went quiet
CHILD_GONE_TARGET_S = 1.0  # wall seconds from a cancel until the request's reading child is gone
STOP_TARGET_S = 10.0  # wall seconds from SIGTERM until the server has ended, reads in flight or not
TEST_MARGIN = 3.0
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


def children(process: psutil.Process) -> int:
    """How many children a process has now (HTML readers, index builders), theirs included."""
    return len(process.children(recursive=True))


def folder_bytes(folder: Path) -> int:
    """Bytes of the files under `folder`, each file once: gradio renames an upload from a temporary name into its
    own folder, and a walk during the rename could meet it under both names."""
    seen, total = set(), 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                info = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                total += info.st_size
    return total


def process_cpu_s(process: psutil.Process) -> float:
    """The CPU seconds a process has used, all its threads together (its children not)."""
    times = process.cpu_times()
    return times.user + times.system


class MemorySampler:
    """Peaks of a process, sampled every `every_s` in a thread until `stop()` (or until the process ends): its RSS
    with its children's (`peak`), its children at once (`children_peak`) and, given a `folder` (a server's uploads),
    the bytes in it (`folder_peak`)."""

    def __init__(self, pid: int, every_s: float = 0.1, folder: Path | None = None):
        self.process, self.folder = psutil.Process(pid), folder
        self.peak = tree_rss(self.process)
        self.children_peak = 0
        self.folder_peak = folder_bytes(folder) if folder is not None else 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.every_s = every_s
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(self.every_s):
            try:
                self.peak = max(self.peak, tree_rss(self.process))
                self.children_peak = max(self.children_peak, children(self.process))
            except psutil.NoSuchProcess:
                return
            if self.folder is not None:
                self.folder_peak = max(self.folder_peak, folder_bytes(self.folder))

    def stop(self) -> int:
        self._done.set()
        self._thread.join(5)
        return self.peak


class CpuSampler:
    """The CPU seconds a process (all its threads) has used, sampled every `every_s` in a thread until `stop()`."""

    def __init__(self, pid: int, every_s: float = 0.1):
        self.process = psutil.Process(pid)
        self.samples: list[tuple[float, float]] = []  # (monotonic seconds, CPU seconds so far)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.every_s = every_s
        self._thread.start()

    def _run(self) -> None:
        while True:
            self.samples.append((time.monotonic(), process_cpu_s(self.process)))
            if self._done.wait(self.every_s):
                return

    def stop(self) -> "CpuSampler":
        self._done.set()
        self._thread.join(5)
        return self

    def quiet_after(self, since: float, window_s: float = 1.0, busy_share: float = 0.15) -> float | None:
        """Seconds from `since` until the first `window_s` in which the process used less than `busy_share` of one
        core (its idle cost is a few percent): when its work stopped. None if it never went quiet."""
        for i, (began, cpu) in enumerate(self.samples):
            if began < since:
                continue
            for ended, cpu_then in self.samples[i:]:
                if ended - began >= window_s:
                    if cpu_then - cpu < busy_share * (ended - began):
                        return began - since
                    break
        return None


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
    quiet_after_cancel_s: float | None = None  # from the cancels until the server used under 15 % of a core a second

    @property
    def meets_target(self) -> bool:
        """The visitor was answered, rightly, within VISITOR_WAIT_TARGET_S."""
        return visitor_within_target(self.visitor_right, self.visitor_s)


def visitor_within_target(right: bool | None, seconds: float | None) -> bool:
    return bool(right) and seconds is not None and seconds <= VISITOR_WAIT_TARGET_S


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
    """Give `jobs` up to `wait_s` more (less once all have ended), cancel what is left (waiting up to `settle_s` for
    each cancelled one to end): each job's outcome, and when the rest was cancelled."""
    ends_by = time.monotonic() + wait_s
    while not all(job.done() for job in jobs) and time.monotonic() < ends_by:
        time.sleep(0.05)
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
    sampler, cpu = MemorySampler(server_pid), CpuSampler(server_pid)
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
    time.sleep(1.5)
    quiet_after = cpu.stop().quiet_after(cancelled_at)
    return CrowdOutcome(right, seconds, error, queue, rss_idle, rss_peak, tree_rss(server), outcomes, idle_after,
                        quiet_after)


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


class StageWatch:
    """What `watched` saw of calls to one function: when one entered it, when one left it, and whether that one
    left it Cancelled."""

    def __init__(self):
        self.entered, self.left = threading.Event(), threading.Event()
        self.cancelled = False


@contextlib.contextmanager
def watched(owner, name: str):
    """`owner.name` (a module's function that a request calls, e.g. `longqa_core.reading.build_index`) wrapped for
    the block, to tell when a request is inside it: for an in-process server only."""
    original, watch = getattr(owner, name), StageWatch()

    def wrapper(*args, **kwargs):
        watch.entered.set()
        try:
            return original(*args, **kwargs)
        except Cancelled:
            watch.cancelled = True
            raise
        finally:
            watch.left.set()
    setattr(owner, name, wrapper)
    try:
        yield watch
    finally:
        setattr(owner, name, original)


@dataclass
class CancelOutcome:
    entered: bool  # the request reached the watched stage
    stopped_inside: bool  # it left that stage Cancelled (else it finished the stage first)
    stop_s: float | None  # wall seconds from the cancel until it left the stage (a loaded machine stretches these)
    cpu_to_stop_s: float | None  # the server process's CPU seconds (all its threads) over those seconds
    quiet_s: float | None  # wall seconds from the cancel until the server, out of the stage, went quiet
    # (`CpuSampler.quiet_after`: the first second in which it used under 15 % of a core)
    cpu_to_quiet_s: float | None  # its CPU seconds until then: the request's work and its clean-up after the cancel
    outcome: str

    @property
    def meets_target(self) -> bool:
        """The request was cancelled and the server went quiet within CANCEL_CPU_TARGET_S of CPU seconds."""
        return self.outcome == "cancelled" and self.cpu_to_quiet_s is not None \
            and max(self.cpu_to_stop_s, self.cpu_to_quiet_s) <= CANCEL_CPU_TARGET_S


def cancel_inside(url: str, server_pid: int, path: Path, watch: StageWatch, *, reading: str,
                  question: str = "What is the tide of Harrowgate?", after_s: float = 0.0,
                  timeout_s: float = 120.0) -> CancelOutcome:
    """One fresh client's question over `path`, cancelled `after_s` after the request enters the stage `watch`
    watches: how long, in wall and in the server's CPU seconds, until it left that stage, and until the server went
    quiet (its clean-up included: the heap handed back). CPU seconds are the server's own work wherever other
    processes load the machine."""
    server = psutil.Process(server_pid)
    job = ask_job(url, path, question, reading)
    deadline = time.monotonic() + timeout_s
    while not watch.entered.wait(0.05) and not job.done() and time.monotonic() < deadline:
        pass
    if not watch.entered.is_set():  # refused or answered before it got there, or never got there
        job.cancel()
        return CancelOutcome(False, False, None, None, None, None, outcome_of(job, 10.0))
    time.sleep(after_s)
    cpu = CpuSampler(server_pid, every_s=0.05)
    cpu_at_cancel, cancelled_at = process_cpu_s(server), time.monotonic()
    job.cancel()
    left = watch.left.wait(timeout_s)
    stop_s, cpu_at_stop = time.monotonic() - cancelled_at, process_cpu_s(server)
    while cpu.quiet_after(cancelled_at + stop_s) is None and time.monotonic() < deadline:
        time.sleep(0.25)
    quiet_after_stop = cpu.stop().quiet_after(cancelled_at + stop_s)
    quiet_s = cpu_to_quiet = None
    if quiet_after_stop is not None:
        quiet_s = stop_s + quiet_after_stop
        cpu_to_quiet = min(c for t, c in cpu.samples if t >= cancelled_at + quiet_s) - cpu_at_cancel
    ended = outcome_of(job, 10.0)
    return CancelOutcome(True, left and watch.cancelled, stop_s, cpu_at_stop - cpu_at_cancel, quiet_s, cpu_to_quiet,
                         "answered" if ended == "answered" else "cancelled")


def emoji_text(n_bytes: int, unit: str = "😀🎉🧪 ") -> str:
    """About `n_bytes` (UTF-8) of emoji and punctuation with no letter or digit (issue 40 item 2): nothing in it can
    be an answer, so every window's spans are looked at and rejected unless decoding skips them."""
    return unit * max(1, n_bytes // len(unit.encode()))


@dataclass
class Asked:
    """One question's end as a visitor saw it: wall seconds until the answer or refusal, and what it said."""

    seconds: float
    outcome: str  # "answered" or "refused: …" (outcome_of)
    answers: list[str]  # the answers' texts (answered only)
    latency_s: dict  # the readout's seconds by stage (answered only)


def ask_timed(url: str, path: Path, question: str, reading: str, timeout_s: float = 600.0) -> Asked:
    """A fresh client's question over `path`, awaited: how long until it was answered or refused, and how."""
    began = time.monotonic()
    job = ask_job(url, path, question, reading)
    outcome = outcome_of(job, timeout_s)
    seconds = time.monotonic() - began
    if outcome != "answered":
        return Asked(seconds, outcome, [], {})
    readout = job.result()[-1]
    return Asked(seconds, outcome, [a["text"] for a in readout.get("answers") or []],
                 dict(readout.get("latency_s") or {}))
