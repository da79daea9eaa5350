"""A bounded load test of the served app: N concurrent `/ask` calls from gradio_client, on loopback only.

Each request is first sent alone, one after another, then all of them at once: a concurrent answer must be the
generated fact's value and the very answer (text and position) the same server gave that request alone, so a
lost, mixed-up or cross-talking call shows. Reports per-call latency (p50/p95) of the concurrent round and the
queue positions the clients saw. It sends nothing but these requests, to the URL it is given, and stops after
`n_calls` each round or `timeout_s`.
Usage: python -m longqa.load_test [--calls 20] [--model demo]   (starts its own server on 127.0.0.1)
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import urllib.parse
from dataclasses import dataclass, field

from longqa import demo_task


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


def is_numeric_fact(example: demo_task.Example) -> bool:
    """Whether the asked-about value is a number: the demo model answers those right (all 100 of them in
    docs/demo-model-eval.json; its 10 misses there are all made-up-word values cut at a sub-word boundary)."""
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
        best = readout["answers"][0] if readout["answers"] else None
        out[index] = CallResult(True, time.perf_counter() - began, best and best["text"], example.answer,
                                queue_positions=positions, span=best and (best["start_char"], best["end_char"]))
    except Exception as exc:  # a lost or refused call is a result too
        out[index] = CallResult(False, time.perf_counter() - began, expected=example.answer, error=str(exc))


def run_alone(url: str, examples: list[demo_task.Example], timeout_s: float) -> list[CallResult]:
    """Each request on its own, one after another: what the server answers without any other call in flight."""
    results: list[CallResult | None] = [None] * len(examples)
    for index, example in enumerate(examples):
        _call(url, example, results, index, timeout_s)
    return results


def run_concurrent(url: str, examples: list[demo_task.Example], timeout_s: float) -> list[CallResult]:
    """All requests at once, one client and thread each, and wait for all of them (bounded by `timeout_s` each)."""
    results: list[CallResult | None] = [None] * len(examples)
    threads = [threading.Thread(target=_call, args=(url, ex, results, i, timeout_s), daemon=True)
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
        "errors": [r.error for r in results if not r.ok],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20, help=f"concurrent calls (at most {MAX_CALLS})")
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
