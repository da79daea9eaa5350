"""A bounded load test of the served app: N concurrent `/ask` calls from gradio_client, on loopback only.

Reports per-call latency (p50/p95), answers and the queue positions the clients saw. It sends nothing but the
requests it is told to, to the URL it is given, and stops after `n_calls` or `timeout_s`.
Usage: python -m longqa.load_test [--calls 20] [--model demo]   (starts its own server on 127.0.0.1)
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from dataclasses import dataclass, field

from longqa import demo_task


@dataclass
class CallResult:
    ok: bool
    latency_s: float
    answer: str | None = None
    expected: str | None = None
    error: str | None = None
    queue_positions: list[int] = field(default_factory=list)


def requests_for(n_calls: int, seed: int = 7, n_chars: int = 3000) -> list[demo_task.Example]:
    """Distinct small documents with one asked-about fact each (held-out prose)."""
    return [demo_task.make_example(seed * 1000 + i, n_chars, split="test") for i in range(n_calls)]


def _call(url: str, example: demo_task.Example, out: list, index: int, timeout_s: float) -> None:
    from gradio_client import Client

    began = time.perf_counter()
    try:
        job = Client(url, verbose=False).submit([], example.text, example.question, 1, api_name="/ask")
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
        answer = readout["answers"][0]["text"] if readout["answers"] else None
        out[index] = CallResult(True, time.perf_counter() - began, answer, example.answer, queue_positions=positions)
    except Exception as exc:  # a lost or refused call is a result too
        out[index] = CallResult(False, time.perf_counter() - began, expected=example.answer, error=str(exc))


def run_load(url: str, n_calls: int = 20, timeout_s: float = 300.0, seed: int = 7) -> list[CallResult]:
    """Fire `n_calls` concurrent /ask calls at `url` and wait for all of them (bounded by `timeout_s` each)."""
    examples = requests_for(n_calls, seed)
    results: list[CallResult | None] = [None] * n_calls
    threads = [threading.Thread(target=_call, args=(url, ex, results, i, timeout_s), daemon=True)
               for i, ex in enumerate(examples)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout_s + 30)
    return [r if r is not None else CallResult(False, timeout_s, error="thread did not finish") for r in results]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def summarize(results: list[CallResult]) -> dict:
    latencies = [r.latency_s for r in results if r.ok]
    return {
        "calls": len(results), "completed": len(latencies),
        "correct": sum(r.ok and r.answer == r.expected for r in results),
        "p50_s": percentile(latencies, 50) if latencies else None,
        "p95_s": percentile(latencies, 95) if latencies else None,
        "mean_s": statistics.fmean(latencies) if latencies else None,
        "max_queue_position_seen": max((max(r.queue_positions, default=0) for r in results), default=0),
        "errors": [r.error for r in results if not r.ok],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--model", default="demo")
    parser.add_argument("--profile", default="cpu")
    args = parser.parse_args()
    import app
    from longqa.session import Session

    ctx = app.make_context(Session(), models=[args.model], default_model=args.model, default_profile=args.profile)
    app.ensure_loaded(ctx)
    demo = app.build_blocks(ctx)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True)
    try:
        print(json.dumps(summarize(run_load(url, args.calls)), indent=2))
    finally:
        demo.close()


if __name__ == "__main__":
    main()
