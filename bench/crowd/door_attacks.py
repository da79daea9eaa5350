"""Issue 61's ways around the door, against a real server (`python app.py --model demo`) on loopback: reads posted
to gradio's direct route, questions and pasted texts of hundreds of MB, thousands of fresh sessions, the recording
route and files named by a web address, made-up forwarding hops, and a stop with reads in flight. Each returns
numbers as `crowd_attacks`' do: the normal visitor's wait and answer, the server's memory before, at its peak and
after, what was refused and how.

It measures; it formats nothing (scripts/measure_crowd.py --attacks door writes the JSON and the table,
tests/test_crowd_door.py holds the targets with a margin) and bounds every attack in count and time.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
from gradio_client import Client, handle_file

from bench.crowd.crowd_attacks import (MIB, AttackOutcome, TreeCpu, fn_index_of, join_raw, post_upload, visit,
                                          visits_during)
from bench.crowd.crowd_check import MAX_CLIENTS, MemorySampler, ask_job, folder_bytes, outcome_of, tree_rss

MAX_JOINS = 6000  # fresh-session joins one attack may post, whatever the caller asks
ASK_VALUES = 8  # the page's /ask takes the documents, pasted text, question, top-k, reading, two states, threshold


def raw_ask(text: str, question: str = "What is the tide of Harrowgate?", reading: str = "full") -> list:
    """The values of one raw call of the page's `/ask` (its states empty), as a hostile client posts them."""
    return [None, text, question, 1, reading, [], {}, ""]


def post_json(url: str, route: str, payload: bytes, timeout_s: float = 30.0,
              headers: dict | None = None) -> tuple[int, str]:
    """POST `payload` (JSON bytes) to `route`: (status, the reply's first 300 characters); status 0 when the client
    gave up first (a client gone) or the connection closed before a reply."""
    request = urllib.request.Request(url + route, data=payload,
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as reply:
            return reply.status, reply.read(300).decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(300).decode(errors="replace")
    except (urllib.error.URLError, OSError) as exc:
        return 0, f"no reply ({exc})"


def quiet_cpu_s(pid: int, window_s: float) -> float:
    """The CPU seconds the server and its children use in the next `window_s` (reads on for nobody, or none)."""
    cpu = TreeCpu(pid)
    began = time.monotonic()
    time.sleep(window_s)
    cpu.stop()
    return round(cpu.used_between(began, began + window_s), 2)


def tally(statuses: list[int]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for status in statuses:
        counts[str(status)] = counts.get(str(status), 0) + 1
    return counts


def direct_reads(url: str, pid: int, text: str, visitor, *, posts: int = 45, threads: int = 9,
                 gone_after_s: float = 3.0, quiet_window_s: float = 10.0) -> AttackOutcome:
    """Issue 61 item 1: `posts` full reads of `text` posted to gradio's direct route (`/gradio_api/run/ask`, no
    session, outside the queue), `threads` at a time, each client gone after `gone_after_s`, while the visitor keeps
    asking; then the CPU seconds the server uses in the `quiet_window_s` after the last post and the visitor's last
    answer (a read going on with nobody listening uses them)."""
    server = psutil.Process(pid)
    outcome = AttackOutcome(rss_idle=tree_rss(server))
    sampler = MemorySampler(pid)
    payload = json.dumps({"data": raw_ask(text)}).encode()
    statuses, lock, done = [], threading.Lock(), threading.Event()
    asking = visits_during(outcome, visitor, done, 1.0)

    def post(count: int) -> None:
        for _ in range(count):
            status, _ = post_json(url, "gradio_api/run/ask", payload, timeout_s=gone_after_s)
            with lock:
                statuses.append(status)

    share = [posts // threads + (i < posts % threads) for i in range(threads)]
    workers = [threading.Thread(target=post, args=(n,), daemon=True) for n in share]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(posts * (gone_after_s + 1) + 60)
    done.set()
    asking.join(600)
    outcome.extra["cpu_s_after_posts"] = quiet_cpu_s(pid, quiet_window_s)  # the visitor's asks ended too
    outcome.rss_peak = sampler.stop()
    outcome.rss_after = tree_rss(server)
    outcome.crowd = [f"HTTP {s}" if s else "client gone" for s in statuses]
    outcome.extra.update(posts=len(statuses), statuses=tally(statuses))
    return outcome


def large_bodies(url: str, pid: int, visitor, *, question_mb: float = 100.0, pasted_mb: float = 200.0,
                 at_once: int = 2) -> AttackOutcome:
    """Issue 61 item 2: `at_once` questions of `question_mb` and one pasted text of `pasted_mb` posted to the queue
    (`queue/join`) at once, and one question just under the body cap (refused by the question's length), while the
    visitor keeps asking: what each got."""
    server = psutil.Process(pid)
    outcome = AttackOutcome(rss_idle=tree_rss(server))
    sampler = MemorySampler(pid)
    fn_index = fn_index_of(url, "ask")
    bodies = [("question", int(question_mb * MIB))] * at_once + [("pasted", int(pasted_mb * MIB)),
                                                                 ("question", 40 * MIB)]
    replies: list[str] = []
    done = threading.Event()
    asking = visits_during(outcome, visitor, done, 1.0)

    def send(kind: str, n_bytes: int) -> None:
        text = "x" * n_bytes
        values = raw_ask(text, "?") if kind == "pasted" else raw_ask("The tide of Harrowgate is 7.", text)
        body = json.dumps({"data": values, "fn_index": fn_index, "session_hash": f"big-{time.monotonic_ns()}",
                           "event_data": None, "trigger_id": None}).encode()
        del text, values
        status, reply = post_json(url, "gradio_api/queue/join", body, timeout_s=120)
        replies.append(f"{kind} {n_bytes / MIB:g} MB: HTTP {status} {reply[:160]}")

    senders = [threading.Thread(target=send, args=body, daemon=True) for body in bodies]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join(300)
    time.sleep(3.0)
    done.set()
    asking.join(600)
    outcome.rss_peak = sampler.stop()
    time.sleep(2.0)
    outcome.rss_after = tree_rss(server)
    outcome.crowd = replies
    return outcome


def fresh_session_joins(url: str, pid: int, api_name: str, data: list, visitor, *, joins: int = 5000,
                        threads: int = 6, settle_s: float = 10.0, headers: dict | None = None) -> AttackOutcome:
    """Issue 61 items 3 and 4: `joins` raw joins of `api_name`, each with a fresh session hash (and `headers`: a
    proxy's, for one address), never read, from `threads` threads, while the visitor keeps asking (a long read, to
    see whether it outlives the crowd of sessions, and whether its progress keeps coming): memory before, at its
    peak and `settle_s` after."""
    server = psutil.Process(pid)
    outcome = AttackOutcome(rss_idle=tree_rss(server))
    sampler = MemorySampler(pid, every_s=0.2)
    fn_index = fn_index_of(url, api_name)
    results: list[str] = []
    done = threading.Event()
    asking = visits_during(outcome, visitor, done, 0.5)
    began = time.monotonic()
    joins = min(joins, MAX_JOINS)

    def flood(count: int, worker: int) -> None:
        for i in range(count):
            results.append(join_raw(url, fn_index, data, f"fresh-{worker}-{i}-{time.monotonic_ns()}",
                                    headers=headers))

    share = [joins // threads + (i < joins % threads) for i in range(threads)]
    workers = [threading.Thread(target=flood, args=(n, w), daemon=True) for w, n in enumerate(share)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(900)
    outcome.extra["joins_s"] = round(time.monotonic() - began, 1)
    done.set()
    asking.join(600)
    outcome.rss_peak = sampler.stop()
    time.sleep(settle_s)
    outcome.rss_after = tree_rss(server)
    refused = [r for r in results if r != "joined"]
    outcome.extra.update(joins=len(results), joins_refused=len(refused), join_refusal=refused[0] if refused else None)
    return outcome


def long_read_visitor(url: str, path: Path, question: str = "What is the tide of Harrowgate?"):
    """A visitor whose full read of `path` takes a while, from a fresh client: (right, seconds, {"progress": how many
    progress updates it saw}). Right: answered with a number."""
    def ask() -> tuple[bool, float, dict]:
        began = time.monotonic()
        job = Client(url, verbose=False).submit([handle_file(str(path))], "", question, 1, "full", api_name="/ask")
        seen = set()
        while not job.done():
            status = job.status()
            if status.progress_data:
                seen.add(tuple((p.index, p.desc) for p in status.progress_data))
            time.sleep(0.1)
        readout = job.result()[-1]
        answer = readout["answers"][0]["text"].strip() if readout["answers"] else ""
        return any(c.isdigit() for c in answer), time.monotonic() - began, {"progress": len(seen)}
    return ask


def recording_and_remote_files(url: str, pid: int, folder: Path, visitor, *, posts: int = 10,
                               file_mb: float = 50.0) -> AttackOutcome:
    """Issue 61 items 5 and 6: `posts` files of `file_mb` posted to gradio's recording route, one question naming a
    file by a web address, and the monitoring summary asked for, while the visitor keeps asking: what each got, and
    the upload folder's bytes at the peak and after."""
    server = psutil.Process(pid)
    outcome = AttackOutcome(rss_idle=tree_rss(server))
    sampler = MemorySampler(pid, every_s=0.2, folder=folder)
    done = threading.Event()
    asking = visits_during(outcome, visitor, done, 1.0)
    data = os.urandom(int(file_mb * MIB))
    replies = []
    for i in range(posts):
        status, body = post_upload(url, f"rec{i}.wav", data[:-8] + f"{i:08d}".encode(),
                                   route="gradio_api/process_recording")
        replies.append(f"recording: HTTP {status} {body[:120]}")
    try:
        Client(url, verbose=False).predict([handle_file("http://93.184.215.14/large.txt")], "", "What?", 1,
                                           api_name="/ask")
        replies.append("remote file: answered")
    except Exception as exc:  # noqa: BLE001 - the refusal is the outcome
        replies.append(f"remote file: refused: {str(exc)[:200]}")
    try:
        with urllib.request.urlopen(f"{url}monitoring/summary", timeout=30) as reply:
            replies.append(f"monitoring summary: HTTP {reply.status}")
    except urllib.error.HTTPError as exc:
        replies.append(f"monitoring summary: HTTP {exc.code}")
    time.sleep(2.0)
    done.set()
    asking.join(600)
    outcome.rss_peak, outcome.folder_peak = sampler.stop(), sampler.folder_peak
    outcome.rss_after = tree_rss(server)
    outcome.extra["folder_after"] = folder_bytes(folder)
    outcome.crowd = replies
    return outcome


def spoofed_first_hops(url: str, pid: int, path: Path, visitor, *, clients: int = 6,
                       address: str = "81.2.69.142") -> AttackOutcome:
    """Issue 61 item 6, against a server started with `--visitor-header X-Forwarded-For`: `clients` fresh clients
    behind one address, each making up its own first hop (`X-Forwarded-For: 1.2.3.N, ADDRESS`, as a proxy appends
    the address it saw), each asking for a long read; the visitor (another address) asks meanwhile. What each got:
    one address's share answered or waiting, the rest refused."""
    server = psutil.Process(pid)
    outcome = AttackOutcome(rss_idle=tree_rss(server))
    sampler = MemorySampler(pid)
    jobs = [Client(url, verbose=False, headers={"X-Forwarded-For": f"1.2.3.{n}, {address}"})
            .submit([handle_file(str(path))], "", "What is the tide of Harrowgate?", 1, "full", api_name="/ask")
            for n in range(min(clients, MAX_CLIENTS))]
    time.sleep(3.0)
    visit(outcome, visitor)
    refused = [outcome_of(job, 0.5) if job.done() else "in the lane" for job in jobs]
    for job in jobs:
        job.cancel()
    outcome.crowd = refused
    outcome.rss_peak = sampler.stop()
    time.sleep(3.0)
    outcome.rss_after = tree_rss(server)
    return outcome


def stop_during_reads(server: subprocess.Popen, url: str, path: Path, folder: Path, *, clients: int = 3,
                      after_s: float = 5.0) -> dict:
    """Issue 61 item 1's shutdown: `clients` fresh clients' full reads of `path` in flight `after_s`, then SIGTERM:
    how soon the process ended, its exit code, and what was left in the upload folder."""
    jobs = [ask_job(url, path, "What is the tide of Harrowgate?", "full") for _ in range(min(clients, MAX_CLIENTS))]
    time.sleep(after_s)
    in_flight = sum(not job.done() for job in jobs)
    began = time.monotonic()
    server.terminate()
    try:
        code = server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        code = None
    ended_s = round(time.monotonic() - began, 2)
    if code is None:
        server.kill()
        server.wait()
    return {"reads_in_flight": in_flight, "ended_after_s": ended_s if code is not None else None, "exit_code": code,
            "folder_after": folder_bytes(folder)}
