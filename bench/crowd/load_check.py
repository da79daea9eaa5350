"""A bounded load test of the served app: N concurrent `/ask` calls from gradio_client, on loopback only.

Each request is first sent alone, one after another, then all of them at once: a concurrent answer must be the
generated fact's value and the very answer (text and position) the same server gave that request alone, so a
lost, mixed-up or cross-talking call shows. Reports per-call latency (p50/p95) of the concurrent round and the
queue positions the clients saw. It sends nothing but these requests, to the URL it is given, and stops after
`n_calls` each round or `timeout_s`.
Usage: python -m bench.crowd.load_check [--calls 20] [--model demo] [--profile cpu] [-- APP ARGS...]
       python -m bench.crowd.load_check --url http://127.0.0.1:7860/ [--calls 20]
Without --url it starts `python app.py` on a free loopback port (any arguments after `--` go to app.py, e.g.
`-- --engine ray --replicas 2`) and stops it afterwards. It runs the page as a separate process and never imports it.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from gradio_client import Client

from training import demo_task
from longqa.arguments import positive_int

MAX_CALLS = 64  # the load stays bounded whatever --calls says
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


@dataclass
class CallResult:
    ok: bool
    latency_s: float
    answer: str | None = None
    expected: str | None = None
    error: str | None = None
    queue_positions: list[int] = field(default_factory=list)
    span: tuple[int, int] | None = None  # (start_char, end_char) of the answer
    alone: tuple[str | None, tuple[int, int] | None] | None = None  # the answer to the same request sent alone
    began_s: float = 0.0  # perf_counter when the call was sent
    replica: str | None = None  # the Ray Serve replica that answered (--engine ray), else None
    readout: dict | None = None


def is_numeric_fact(example: demo_task.Example) -> bool:
    """Whether the asked-about value is a number: every answer then differs from every other (a different
    number each), so an answer delivered to the wrong call shows."""
    return example.answer.isdigit()


def requests_for(n_calls: int, seed: int = 7, n_chars: int = 3000) -> list[demo_task.Example]:
    """Small documents with one asked-about numeric fact each (held-out prose), every answer a different number
    so that an answer delivered to the wrong call cannot pass for right."""
    examples, answers, index = [], set(), 0
    while len(examples) < min(n_calls, MAX_CALLS):
        example = demo_task.make_example(seed * 1000 + index, n_chars, split="test")
        index += 1
        if is_numeric_fact(example) and example.answer not in answers:
            examples.append(example)
            answers.add(example.answer)
    return examples


def _call(url: str, example: demo_task.Example, out: list, index: int, timeout_s: float,
          ready: threading.Barrier | None = None) -> None:
    began = time.perf_counter()
    try:
        try:
            client = Client(url, verbose=False)
        finally:
            if ready is not None:  # every client connected first, so that the submits land together
                ready.wait(timeout=timeout_s)
        began = time.perf_counter()
        job = client.submit([], example.text, example.question, 1, api_name="/ask")
        positions = []
        while not job.done():
            status = job.status()
            if getattr(status, "rank", None) is not None:
                positions.append(int(status.rank))
            if time.perf_counter() - began > timeout_s:
                job.cancel()
                raise TimeoutError(f"no answer within {timeout_s:.0f} s")
            time.sleep(0.05)
        readout = job.result(timeout=timeout_s)[-1]
        best = readout["answers"][0] if readout["answers"] else None
        out[index] = CallResult(True, time.perf_counter() - began, best and best["text"], example.answer,
                                queue_positions=positions, span=best and (best["start_char"], best["end_char"]),
                                began_s=began, replica=readout.get("replica"), readout=readout)
    except Exception as exc:  # a lost or refused call is a result too
        out[index] = CallResult(False, time.perf_counter() - began, expected=example.answer, error=str(exc),
                                began_s=began)


def run_alone(url: str, examples: list[demo_task.Example], timeout_s: float) -> list[CallResult]:
    """Each request on its own, one after another: what the server answers without any other call in flight."""
    results: list[CallResult | None] = [None] * len(examples)
    for index, example in enumerate(examples):
        _call(url, example, results, index, timeout_s)
    return results


def run_concurrent(url: str, examples: list[demo_task.Example], timeout_s: float) -> list[CallResult]:
    """All requests at once, one client and thread each (all connected before any submits), and wait for all of
    them (bounded by `timeout_s` each)."""
    results: list[CallResult | None] = [None] * len(examples)
    ready = threading.Barrier(len(examples))
    threads = [threading.Thread(target=_call, args=(url, ex, results, i, timeout_s, ready), daemon=True)
               for i, ex in enumerate(examples)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout_s + 30)
    return [r if r is not None else CallResult(False, timeout_s, error="thread did not finish") for r in results]


def run_load(url: str, n_calls: int = 20, timeout_s: float = 300.0, seed: int = 7) -> list[CallResult]:
    """The concurrent round's results, each carrying the answer the same request got alone."""
    host = urllib.parse.urlsplit(url).hostname
    if host not in LOOPBACK_HOSTS:
        raise ValueError(f"the load test only runs against a server on this machine (127.0.0.1), not {host!r}")
    examples = requests_for(n_calls, seed)
    alone = run_alone(url, examples, timeout_s)
    results = run_concurrent(url, examples, timeout_s)
    for result, single in zip(results, alone):
        result.alone = (single.answer, single.span) if single.ok else None
    return results


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def wall_s(results: list[CallResult]) -> float | None:
    """Seconds from the first call sent to the last answer back: the round's wall time, for its throughput."""
    done = [r for r in results if r.ok]
    return max(r.began_s + r.latency_s for r in done) - min(r.began_s for r in results) if done else None


def summarize(results: list[CallResult]) -> dict:
    latencies = [r.latency_s for r in results if r.ok]
    return {
        "calls": len(results), "completed": len(latencies),
        "correct": sum(r.ok and r.answer == r.expected for r in results),
        "same_as_alone": sum(r.ok and r.alone == (r.answer, r.span) for r in results),
        "p50_s": percentile(latencies, 50) if latencies else None,
        "p95_s": percentile(latencies, 95) if latencies else None,
        "mean_s": statistics.fmean(latencies) if latencies else None,
        "max_queue_position_seen": max((max(r.queue_positions, default=0) for r in results), default=0),
        "wall_s": wall_s(results),
        "throughput_per_s": len(latencies) / wall_s(results) if latencies and wall_s(results) else None,
        "replicas_answering": len({r.replica for r in results if r.ok and r.replica}),
        "errors": [r.error for r in results if not r.ok],
    }


APP = Path(__file__).resolve().parents[2] / "app.py"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(app_args: list[str], timeout_s: float = 600.0, *, app: Path = APP,
                 env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """`python app.py APP_ARGS` on a free loopback port, once its page answers: (process, url). RuntimeError with
    the server's last output lines when it exits or does not answer within `timeout_s`. `app` may be another
    checkout's app.py (run from its folder), `env` the server's whole environment."""
    port = free_port()
    process = subprocess.Popen([sys.executable, str(app), *app_args, "--host", "127.0.0.1", "--port", str(port)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=Path(app).parent,
                               env=env)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)
    reader.start()
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        try:
            with urllib.request.urlopen(url, timeout=5):
                return process, url
        except (urllib.error.URLError, OSError):
            time.sleep(0.5)
    stop_server(process)
    reader.join(timeout=10)
    raise RuntimeError(f"the server did not start ({' '.join(app_args)}):\n" + "".join(lines[-20:]))


def stop_server(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    app_args = argv[argv.index("--") + 1:] if "--" in argv else []
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=positive_int, default=20, help=f"concurrent calls (at most {MAX_CALLS})")
    parser.add_argument("--url", help="a server already running on this machine (default: start app.py)")
    parser.add_argument("--model", default="demo")
    parser.add_argument("--profile", default="cpu")
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if args.url:
        print(json.dumps(summarize(run_load(args.url, args.calls)), indent=2))
        return
    process, url = start_server(["--model", args.model, "--profile", args.profile, *app_args])
    try:
        print(json.dumps(summarize(run_load(url, args.calls)), indent=2))
    finally:
        stop_server(process)


if __name__ == "__main__":
    main()
