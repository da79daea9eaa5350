"""Issue 40's attacks on HTML reading and uploads, and issue 48's on PDF reading and on the endpoints that wait for
a one-at-a-time resource, against a real server (`python app.py --model demo`) on loopback: a crowd of fresh clients
each sending dense HTML, one client sending many HTML pages at once, a cancel during a slow HTML read, a flood of
uploads that never ask, six clients sending a PDF page that inflates to 70 MB of text, a cancel during its read, raw
`queue/join` floods from one session (`/plan`, `/load_profile`), compares and training steps at once (issue 61's ways
around the door: `door_attacks`). Each returns numbers: the normal visitor's wait and answer, the server's memory with its children, the reading children
seen at once, the upload folder's bytes, the CPU seconds after a cancel, and whether the targets (`crowd_check`'s)
were met.

It measures; it formats nothing (scripts/measure_crowd.py writes the JSON and the table, tests/test_crowd_uploads.py
holds the targets with a margin) and bounds every crowd in count and time.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psutil
from gradio_client import Client, handle_file
from pypdf import PdfWriter
from pypdf.generic import DictionaryObject, NameObject, StreamObject

from bench.crowd.crowd_check import (CHILD_GONE_TARGET_S, MAX_CLIENTS, MemorySampler, ask_job, children,
                                        outcome_of, settle, tree_rss, visitor_within_target)
from bench.crowd.load_check import start_server, stop_server

MIB = 2**20
UPLOAD_ROUTE = "gradio_api/upload"


def dense_html(n_bytes: int) -> str:
    """Dense formatting markup: about 190 bytes of parser memory per byte (docs/html-readers.md)."""
    unit = "<p><b><i><u><s>x</p>"
    return unit * max(1, n_bytes // len(unit))


def misnested_html(n_bytes: int) -> str:
    """Misnested formatting tags: quadratic for lexbor (2 MB take about 13 s)."""
    unit = "<b><i>x</b>"
    return unit * max(1, n_bytes // len(unit))


def inflating_pdf(text_bytes: int = 70_000_000) -> bytes:
    """One page whose Flate stream (about 200 KB for 70 MB) inflates to `text_bytes` of text operators (issue 48):
    pypdf parses the whole stream before any of its text callbacks run, in about 0.45 GB for 70 MB."""
    line = b"(all work and no play makes a dull reader ) Tj T* "
    stream = StreamObject()
    stream.set_data(zlib.compress(b"BT /F1 12 Tf 14 TL 72 720 Td " + line * (text_bytes // len(line)) + b"ET", 9))
    stream[NameObject("/Filter")] = NameObject("/FlateDecode")
    writer = PdfWriter()
    page = writer.add_blank_page(612, 792)
    font = writer._add_object(DictionaryObject({NameObject("/Type"): NameObject("/Font"),
                                                NameObject("/Subtype"): NameObject("/Type1"),
                                                NameObject("/BaseFont"): NameObject("/Helvetica")}))
    fonts = DictionaryObject({NameObject("/F1"): font})
    page[NameObject("/Resources")] = DictionaryObject({NameObject("/Font"): fonts})
    page[NameObject("/Contents")] = writer._add_object(stream)
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def start_demo_server(temp_dir: Path, *app_args: str) -> tuple[subprocess.Popen, str]:
    """`python app.py --model demo` with default settings but `app_args`, on a free loopback port, its uploads in
    `temp_dir`, once it answers: (process, url); `load_check.stop_server` stops it (it deletes its uploads)."""
    env = {**os.environ, "GRADIO_TEMP_DIR": str(temp_dir), "GRADIO_ANALYTICS_ENABLED": "False"}
    return start_server(["--model", "demo", "--profile", "cpu", *app_args], env=env)


@dataclass
class AttackOutcome:
    visitor_right: bool | None = None
    visitor_s: float | None = None
    visitor_error: str | None = None
    rss_idle: int = 0
    rss_peak: int = 0
    rss_after: int = 0
    children_peak: int = 0
    folder_peak: int = 0
    crowd: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    @property
    def meets_target(self) -> bool:
        """The visitor (where one asked) was answered rightly within the crowd's target, and a cancelled read's
        child (where one was cancelled) was gone within CHILD_GONE_TARGET_S."""
        gone_s = self.extra.get("child_gone_after_cancel_s")
        visited = self.visitor_right is not None or self.visitor_error is not None
        return (not visited or visitor_within_target(self.visitor_right, self.visitor_s)) and \
            (gone_s is None or (gone_s <= CHILD_GONE_TARGET_S and self.extra.get("children_left") == 0))


def visit(outcome: AttackOutcome, visitor: Callable[[], tuple[bool, float, dict]]) -> None:
    try:
        outcome.visitor_right, outcome.visitor_s, _ = visitor()
    except Exception as exc:  # noqa: BLE001 - a refused visitor is an outcome
        outcome.visitor_error = str(exc)[:300]


def html_crowd(url: str, pid: int, files: list[Path], visitor, *, visitor_after_s: float = 2.0,
               wait_s: float = 2.0, settle_s: float = 60.0) -> AttackOutcome:
    """One fresh client per HTML file (at most MAX_CLIENTS), then the visitor; the crowd is cancelled after it."""
    server = psutil.Process(pid)
    outcome = AttackOutcome(rss_idle=tree_rss(server))
    sampler = MemorySampler(pid)
    jobs = [ask_job(url, path, "What is the tide of Harrowgate?", "auto") for path in files[:MAX_CLIENTS]]
    time.sleep(visitor_after_s)
    visit(outcome, visitor)
    outcome.crowd, _ = settle(jobs, wait_s, settle_s)
    outcome.rss_peak, outcome.children_peak = sampler.stop(), sampler.children_peak
    time.sleep(2.0)
    outcome.rss_after = tree_rss(server)
    return outcome


def one_client_many_html(url: str, pid: int, path: Path, visitor, *, requests: int = 34,
                         visitor_after_s: float = 2.0, settle_s: float = 60.0) -> AttackOutcome:
    """One client (one gradio session) submits `requests` slow HTML questions at once, then the visitor asks."""
    server = psutil.Process(pid)
    outcome = AttackOutcome(rss_idle=tree_rss(server))
    sampler = MemorySampler(pid)
    greedy = Client(url, verbose=False)
    jobs = [greedy.submit([handle_file(str(path))], "", "What is the tide of Harrowgate?", 1, "auto",
                          api_name="/ask") for _ in range(requests)]
    time.sleep(visitor_after_s)
    visit(outcome, visitor)
    outcome.crowd, _ = settle(jobs, 1.0, settle_s)
    outcome.rss_peak, outcome.children_peak = sampler.stop(), sampler.children_peak
    outcome.rss_after = tree_rss(server)
    return outcome


def cancel_during_html(url: str, pid: int, path: Path, *, cancel_after_s: float = 2.0) -> AttackOutcome:
    """A slow HTML question, cancelled once its child runs: seconds until the server has no child left."""
    server = psutil.Process(pid)
    outcome = AttackOutcome(rss_idle=tree_rss(server))
    sampler = MemorySampler(pid)
    job = ask_job(url, path, "What is the tide of Harrowgate?", "auto")
    deadline = time.monotonic() + 30
    while children(server) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    outcome.children_peak = children(server)
    time.sleep(cancel_after_s)
    job.cancel()
    cancelled = time.monotonic()
    while children(server) and time.monotonic() - cancelled < 30:
        time.sleep(0.02)
    outcome.extra = {"child_gone_after_cancel_s": round(time.monotonic() - cancelled, 2),
                     "children_left": children(server)}
    outcome.rss_peak, outcome.rss_after = sampler.stop(), tree_rss(server)
    ended = outcome_of(job, 5.0)
    outcome.crowd = ["answered" if ended == "answered" else "cancelled"]  # cancelled by us: the client's own error
    return outcome


def post_upload(url: str, name: str, data: bytes, timeout_s: float = 60.0, route: str = UPLOAD_ROUTE) -> tuple[int, str]:
    """POST one file to gradio's upload route (or another that takes files, `route`), as a client that never asks
    about it: (status, body)."""
    boundary = "crowd-attack-boundary"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"{name}\"\r\n\r\n".encode()
            + data + f"\r\n--{boundary}--\r\n".encode())
    request = urllib.request.Request(url + route, data=body,
                                     headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            return answer.status, answer.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as exc:  # the connection closed before the reply
        return 0, f"no reply ({exc})"


def upload_flood(url: str, pid: int, folder: Path, visitor, *, uploaders: int = 4, file_mb: float = 50.0,
                 seconds: float = 20.0, visitor_after_s: float = 8.0) -> AttackOutcome:
    """`uploaders` threads post distinct `file_mb` files to the upload route for `seconds`, never asking; the
    visitor asks `visitor_after_s` in. The upload folder's peak bytes, what was accepted and refused."""
    server = psutil.Process(pid)
    outcome = AttackOutcome(rss_idle=tree_rss(server))
    sampler = MemorySampler(pid, every_s=0.2, folder=folder)
    counts = {"accepted": 0, "refused": 0, "accepted_bytes": 0, "refusal": ""}
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds
    payload = os.urandom(int(file_mb * MIB))

    def flood(worker: int) -> None:
        i = 0
        while time.monotonic() < stop_at:
            i += 1
            data = payload[:-16] + f"{worker:08d}{i:08d}".encode()  # distinct: gradio stores uploads by hash
            status, body = post_upload(url, f"flood{worker}-{i}.txt", data)
            with lock:
                if status == 200:
                    counts["accepted"] += 1
                    counts["accepted_bytes"] += len(data)
                else:
                    counts["refused"] += 1
                    counts["refusal"] = f"{status}: {body[:200]}"

    threads = [threading.Thread(target=flood, args=(w,)) for w in range(uploaders)]
    for thread in threads:
        thread.start()
    time.sleep(visitor_after_s)
    visit(outcome, visitor)
    for thread in threads:
        thread.join(seconds + 120)
    outcome.rss_peak, outcome.folder_peak = sampler.stop(), sampler.folder_peak
    outcome.rss_after = tree_rss(server)
    outcome.extra = counts
    return outcome


# ------------------------------------------------------------------------------------------------ issue 48
def join_raw(url: str, fn_index: int, data: list, session_hash: str, timeout_s: float = 30.0,
             headers: dict | None = None) -> str:
    """One raw `queue/join` for `session_hash`, as a hostile client posts it, never reading its stream: "joined",
    or the refusal gradio answered with."""
    body = json.dumps({"data": data, "fn_index": fn_index, "session_hash": session_hash, "event_data": None,
                       "trigger_id": None}).encode()
    request = urllib.request.Request(f"{url}gradio_api/queue/join", data=body,
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as reply:
            answer = json.loads(reply.read() or b"{}")
            return "joined" if answer.get("event_id") else f"refused: {str(answer)[:160]}"
    except urllib.error.HTTPError as exc:
        return f"refused: {exc.code} {exc.read()[:160].decode(errors='replace')}"
    except (urllib.error.URLError, OSError) as exc:
        return f"no reply: {exc}"


def session_outcomes(url: str, session_hash: str, until: threading.Event, into: list[str]) -> threading.Thread:
    """Reads `session_hash`'s stream until `until` is set (and a second after), keeping each event's end: "done",
    or "refused: <message>"."""
    def read() -> None:
        stop_at = None
        while stop_at is None or time.monotonic() < stop_at:
            try:
                with urllib.request.urlopen(f"{url}gradio_api/queue/data?session_hash={session_hash}",
                                            timeout=5) as stream:
                    for raw in stream:
                        line = raw.decode(errors="replace").strip()
                        if line.startswith("data:"):
                            message = json.loads(line[5:])
                            if message.get("msg") == "process_completed":
                                error = (message.get("output") or {}).get("error")
                                into.append("done" if message.get("success") else f"refused: {str(error)[:160]}")
                        if until.is_set() and stop_at is None:
                            stop_at = time.monotonic() + 1.0
                        if stop_at is not None and time.monotonic() > stop_at:
                            return
            except (urllib.error.URLError, OSError, ValueError):
                time.sleep(0.2)
            if until.is_set() and stop_at is None:
                stop_at = time.monotonic() + 1.0

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def fn_index_of(url: str, api_name: str) -> int:
    with urllib.request.urlopen(f"{url}config", timeout=30) as reply:
        config = json.loads(reply.read())
    return next(d["id"] for d in config["dependencies"] if d.get("api_name") == api_name)


def visits_during(outcome: AttackOutcome, visitor, until: threading.Event, after_s: float) -> threading.Thread:
    """The visitor asks `after_s` in, then again after each answer until `until` is set: its longest wait, and
    every refusal it met (a full queue among them), in the outcome."""
    waits: list[float] = []
    refusals: list[str] = []

    def keep_asking() -> None:
        time.sleep(after_s)
        while not until.is_set() or not waits and not refusals:
            try:
                right, seconds, seen = visitor()
                waits.append(seconds)
                if "progress" in seen:  # a long read's visitor counts the progress updates it saw
                    outcome.extra.setdefault("visitor_progress", []).append(seen["progress"])
                outcome.visitor_right = right if outcome.visitor_right is None else outcome.visitor_right and right
            except Exception as exc:  # noqa: BLE001 - a refused visitor is an outcome
                refusals.append(str(exc)[:300])
        outcome.visitor_s = max(waits) if waits else None
        outcome.visitor_error = refusals[0] if refusals else None
        outcome.extra.update(visitor_asks=len(waits) + len(refusals), visitor_refused=len(refusals),
                             visitor_median_s=round(sorted(waits)[len(waits) // 2], 2) if waits else None)

    thread = threading.Thread(target=keep_asking, daemon=True)
    thread.start()
    return thread


def endpoint_flood(url: str, pid: int, api_name: str, data: list, visitor, *, threads: int = 3,
                   seconds: float = 30.0, visitor_after_s: float = 2.0, vary=None) -> AttackOutcome:
    """`threads` threads posting `api_name` to `queue/join` with one session hash for `seconds` (issue 48's probe:
    `/plan`, `/load_profile`), never reading their own stream (another thread reads it, to count how each event
    ended), while the visitor keeps asking. `vary(i, data)`: the i-th call's values (e.g. alternating profiles)."""
    server = psutil.Process(pid)
    outcome = AttackOutcome(rss_idle=tree_rss(server))
    sampler = MemorySampler(pid)
    fn_index, session = fn_index_of(url, api_name), f"flood-{api_name}-{time.monotonic_ns()}"
    joins, ends, done = [], [], threading.Event()
    reader = session_outcomes(url, session, done, ends)
    asking = visits_during(outcome, visitor, done, visitor_after_s)
    stop_at = time.monotonic() + seconds

    def flood() -> None:
        while time.monotonic() < stop_at:
            values = vary(len(joins), data) if vary else data
            joins.append(join_raw(url, fn_index, values, session))

    workers = [threading.Thread(target=flood, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(seconds + 60)
    done.set()
    asking.join(600)
    reader.join(30)
    outcome.rss_peak = sampler.stop()
    time.sleep(2.0)
    outcome.rss_after = tree_rss(server)
    outcome.crowd = ends
    outcome.extra.update(joins=len(joins), joins_refused=sum(j != "joined" for j in joins),
                         join_refusal=next((j for j in joins if j != "joined"), None))
    return outcome


def many_calls(url: str, pid: int, api_name: str, args: tuple, visitor, *, calls: int, one_client: bool,
               visitor_after_s: float = 2.0, settle_s: float = 300.0) -> AttackOutcome:
    """`calls` calls of `api_name` at once, from one client (one session) or each from a fresh client (issue 48:
    six compares from one session, twelve visitors' training steps), while the visitor keeps asking until they
    have all ended."""
    server = psutil.Process(pid)
    outcome = AttackOutcome(rss_idle=tree_rss(server))
    sampler = MemorySampler(pid)
    shared = Client(url, verbose=False) if one_client else None
    jobs = [(shared or Client(url, verbose=False)).submit(*args, api_name=api_name) for _ in range(calls)]
    done = threading.Event()
    asking = visits_during(outcome, visitor, done, visitor_after_s)
    began = time.monotonic()
    outcome.crowd = [outcome_of(job, max(1.0, began + settle_s - time.monotonic())) for job in jobs]
    outcome.extra["crowd_s"] = round(time.monotonic() - began, 1)
    done.set()
    asking.join(600)
    outcome.rss_peak = sampler.stop()
    time.sleep(2.0)
    outcome.rss_after = tree_rss(server)
    return outcome


class TreeCpu:
    """The CPU seconds a process and its children (reading children included, while they live) use, sampled every
    `every_s` in a thread until `stop()`: each process's growth counted, so a child that is killed keeps what it
    used before."""

    def __init__(self, pid: int, every_s: float = 0.05):
        self.process = psutil.Process(pid)
        self.samples: list[tuple[float, float]] = []  # (monotonic seconds, CPU seconds used since the start)
        self._last: dict[int, float] = {}
        self._used = 0.0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.every_s = every_s
        self._thread.start()

    def _sample(self) -> None:
        for each in (self.process, *self.process.children(recursive=True)):
            try:
                times = each.cpu_times()
            except psutil.Error:  # ended meanwhile
                continue
            cpu = times.user + times.system
            if each.pid in self._last:
                self._used += max(0.0, cpu - self._last[each.pid])
            self._last[each.pid] = cpu
        self.samples.append((time.monotonic(), self._used))

    def _run(self) -> None:
        while True:
            try:
                self._sample()
            except psutil.NoSuchProcess:
                return
            if self._done.wait(self.every_s):
                return

    def stop(self) -> "TreeCpu":
        self._done.set()
        self._thread.join(5)
        return self

    def used_between(self, began: float, ended: float) -> float:
        """CPU seconds used from the last sample at or before `began` to the first at or after `ended`."""
        before = max((c for t, c in self.samples if t <= began), default=0.0)
        after = min((c for t, c in self.samples if t >= ended), default=self.samples[-1][1])
        return after - before


def pdf_crowd(url: str, pid: int, path: Path, visitor, *, clients: int = 6, visitor_after_s: float = 2.0,
              end_s: float = 120.0) -> AttackOutcome:
    """`clients` fresh clients ask over the same hostile PDF at once (issue 48), the visitor `visitor_after_s` in;
    every crowd request is left to end by itself (within `end_s`): how long each took, in `extra`."""
    server = psutil.Process(pid)
    outcome = AttackOutcome(rss_idle=tree_rss(server))
    sampler = MemorySampler(pid)
    began = time.monotonic()
    jobs = [ask_job(url, path, "What is the tide of Harrowgate?", "auto") for _ in range(min(clients, MAX_CLIENTS))]
    ended = [None] * len(jobs)

    def watch() -> None:
        while time.monotonic() - began < end_s and None in ended:
            for i, job in enumerate(jobs):
                if ended[i] is None and job.done():
                    ended[i] = time.monotonic() - began
            time.sleep(0.05)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    time.sleep(visitor_after_s)
    visit(outcome, visitor)
    watcher.join(end_s)
    outcome.crowd = [outcome_of(job, 1.0) for job in jobs]
    outcome.rss_peak, outcome.children_peak = sampler.stop(), sampler.children_peak
    time.sleep(2.0)
    outcome.rss_after = tree_rss(server)
    outcome.extra = {"crowd_ended_s": [None if s is None else round(s, 1) for s in ended]}
    return outcome


def cancel_during_pdf(url: str, pid: int, path: Path, *, cancel_after_s: float = 5.0,
                      quiet_window_s: float = 5.0) -> AttackOutcome:
    """A question over the hostile PDF, cancelled `cancel_after_s` after it was sent: the CPU seconds the server and
    its children used in the `quiet_window_s` after the cancel, and how soon no child was left."""
    server = psutil.Process(pid)
    outcome = AttackOutcome(rss_idle=tree_rss(server))
    sampler, cpu = MemorySampler(pid), TreeCpu(pid)
    job = ask_job(url, path, "What is the tide of Harrowgate?", "auto")
    time.sleep(cancel_after_s)
    outcome.children_peak = max(sampler.children_peak, children(server))
    cancelled = time.monotonic()
    job.cancel()
    gone_s = None
    while time.monotonic() - cancelled < quiet_window_s:
        if gone_s is None and children(server) == 0:
            gone_s = time.monotonic() - cancelled
        time.sleep(0.02)
    time.sleep(0.2)
    cpu.stop()
    outcome.rss_peak, outcome.rss_after = sampler.stop(), tree_rss(server)
    outcome.extra = {"cpu_s_after_cancel": round(cpu.used_between(cancelled, cancelled + quiet_window_s), 2),
                     "child_gone_after_cancel_s": None if gone_s is None else round(gone_s, 2),
                     "children_left": children(server)}
    ended = outcome_of(job, 5.0)
    outcome.crowd = ["answered" if ended == "answered" else "cancelled"]
    return outcome


def pdf_attacks(work: Path, visitor_for, *, app: Path | None = None) -> dict:
    """Issue 48 item 2 against a fresh `python app.py --model demo` (`app`: another checkout's, for a before and
    after) with default settings: six fresh clients each sending the 70 MB-text PDF page at once, and one such read
    cancelled 5 s in. `visitor_for(url)` is the normal visitor; returns each attack's outcome by name."""
    path = work / "inflating.pdf"
    path.write_bytes(inflating_pdf())
    uploads = work / "gradio-uploads"
    uploads.mkdir(exist_ok=True)
    env = {**os.environ, "GRADIO_TEMP_DIR": str(uploads), "GRADIO_ANALYTICS_ENABLED": "False"}
    server, url = start_server(["--model", "demo", "--profile", "cpu"], env=env,
                               **({"app": app} if app is not None else {}))
    try:
        visitor_for(url)()  # warm
        right, alone_s, _ = visitor_for(url)()
        return {"visitor_alone_s": round(alone_s, 2), "visitor_alone_right": right,
                "six clients, one 200 KB PDF page inflating to 70 MB of text each":
                    pdf_crowd(url, server.pid, path, visitor_for(url)),
                "that read cancelled 5 s in": cancel_during_pdf(url, server.pid, path)}
    finally:
        stop_server(server)
