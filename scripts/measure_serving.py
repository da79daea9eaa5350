"""Measure what one hostile or careless visitor costs the others, against a served app on 127.0.0.1.

For each scenario: when the hostile request was refused or ended, how long a normal request sent 1 s after it
waited (against the same request alone), whether that answer was right, and the server's RSS change. Writes
docs/results/measure-serving.json and prints a Markdown table for the README. Bounded: one request of each kind,
loopback only.
`--collection`: what a stopped or refused request's clean-up (`batching.release_memory`, a full garbage collection
that holds the interpreter lock) costs in a process set up as `python app.py --model demo` sets one up, with
start-up's objects frozen (`policy.tune_server_process`, as `python app.py` does) and not, each in a process of its
own; writes docs/results/measure-serving-collection.json.
Usage: python scripts/measure_serving.py [--out docs/results/measure-serving.json]
       python scripts/measure_serving.py --collection [--out docs/results/measure-serving-collection.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
from gradio_client import Client, handle_file

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.measured import measured_here  # noqa: E402
from longqa.serving import policy  # noqa: E402
from longqa.session import SAMPLES_DIR, Session  # noqa: E402
from longqa_core import telemetry  # noqa: E402
from longqa_core.batching import release_memory  # noqa: E402
from page.cli import build_parser, context_from, load_before_serving, make_session, serve  # noqa: E402
from page.context import make_context  # noqa: E402
from page.layout import build_blocks  # noqa: E402
from page.asking import ensure_loaded  # noqa: E402
from tests.hostile import combining_marks_text, shared_stream_pdf  # noqa: E402

MB = 1024 * 1024
EXAMPLE = json.loads((SAMPLES_DIR / "examples.json").read_text())[0]


def rss() -> int:
    gc.collect()
    return psutil.Process().memory_info().rss


def normal(url: str) -> tuple[bool, float]:
    began = time.monotonic()
    *_, readout = Client(url, verbose=False).predict([handle_file(str(SAMPLES_DIR / EXAMPLE["file"]))], "",
                                                     EXAMPLE["question"], 1, api_name="/ask")
    return readout["answers"][0]["text"].strip() == EXAMPLE["answer"], time.monotonic() - began


def beside(url: str, hostile) -> dict:
    """Run `hostile()` (returns its outcome text), send a normal request 1 s later, measure both."""
    outcome: dict = {}

    def run():
        began = time.monotonic()
        outcome["outcome"] = hostile()[:160]
        outcome["hostile_s"] = round(time.monotonic() - began, 1)

    before = rss()
    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(1.0)
    right, waited = normal(url)
    thread.join(timeout=600)
    return {**outcome, "normal_right": right, "normal_waited_s": round(waited, 1),
            "rss_change_mb": round((rss() - before) / MB)}


def upload(url: str, path: Path) -> str:
    try:
        Client(url, verbose=False).predict([handle_file(str(path))], "", "What is it?", 1, api_name="/ask")
        return "answered"
    except Exception as exc:  # noqa: BLE001 - the refusal is what is measured
        return str(exc)


def long_text(windows: int) -> str:
    return "The harbour was quiet that morning and nothing else happened. " * (190 * windows)


def abandoned(url: str, cancel_after_s: float) -> str:
    job = Client(url, verbose=False).submit([], long_text(60), "What is the tide of Harrowgate?", 1, api_name="/ask")
    time.sleep(cancel_after_s)
    job.cancel()
    return "cancelled by the client (Stop)"


def collection_child(frozen: bool, repeats: int = 7) -> dict:
    """In this process, set up as `python app.py --model demo` sets one up (start-up frozen or not): the CPU
    seconds of `release_memory`, `repeats` times."""
    if frozen:
        policy.tune_server_process()
    else:
        telemetry.tune_allocator()
    args = build_parser().parse_args(["--model", "demo", "--profile", "cpu"])
    session = make_session(args)
    ctx = context_from(args, session)
    load_before_serving(ctx, args)
    build_blocks(ctx, args.queue_size)
    seconds = []
    for _ in range(repeats):
        began = time.process_time()
        release_memory()
        seconds.append(time.process_time() - began)
    session.close()
    return {"frozen_objects": gc.get_freeze_count(), "tracked_objects": len(gc.get_objects()),
            "collect_cpu_s_median": round(statistics.median(seconds), 4), "collect_cpu_s": seconds}


def collection(out: Path) -> int:
    def measure() -> dict:
        rows = {}
        for name, flag in (("start-up not frozen", "thawed"), ("start-up frozen (python app.py)", "frozen")):
            done = subprocess.run([sys.executable, __file__, "--collection-child", flag], capture_output=True,
                                  text=True, check=True, timeout=600)
            rows[name] = json.loads(done.stdout.strip().splitlines()[-1])
        return {"model": "demo", "profile": "cpu", "measures": "CPU seconds of one release_memory() (gc.collect "
                "and malloc_trim) in a process set up as `python app.py --model demo`, after the page is built",
                "rows": rows}

    result = measured_here(measure)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{result['machine']['cpu_model']} ({result['machine']['kind']})\n")
    print("| server process | objects frozen | objects a collection walks | CPU s per clean-up (median of 7) |\n"
          "|---|---|---|---|")
    for name, row in result["rows"].items():
        print(f"| {name} | {row['frozen_objects']:,} | {row['tracked_objects']:,} | {row['collect_cpu_s_median']} |")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="default docs/results/measure-serving.json, "
                             "or docs/results/measure-serving-collection.json with --collection")
    parser.add_argument("--collection", action="store_true",
                        help="measure a clean-up's garbage collection, start-up frozen and not")
    parser.add_argument("--collection-child", choices=("frozen", "thawed"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.collection_child:
        print(json.dumps(collection_child(args.collection_child == "frozen")))
        return 0
    if args.collection:
        return collection(args.out or ROOT / "docs" / "results" / "measure-serving-collection.json")
    args.out = args.out or ROOT / "docs" / "results" / "measure-serving.json"
    ctx = make_context(Session(), models=["demo"], default_model="demo", default_profile="cpu")
    ensure_loaded(ctx)
    demo = build_blocks(ctx)
    url, _ = serve(demo, host="127.0.0.1", port=7895, block=False)
    work = Path(psutil.Process().cwd()) / "bench-results" / "serving"
    work.mkdir(parents=True, exist_ok=True)
    pdf, marks = work / "expanding.pdf", work / "marks.txt"
    pdf.write_bytes(shared_stream_pdf(40, 2_000_000))
    marks.write_bytes(combining_marks_text(16 * MB))
    try:
        normal(url)
        right, alone = normal(url)
        rows = {
            "12 KB PDF, 40 pages sharing one 2 MB content stream": beside(url, lambda: upload(url, pdf)),
            "16 MB .txt of combining marks": beside(url, lambda: upload(url, marks)),
            "a 60-window request, Stop after 2 s": beside(url, lambda: abandoned(url, 2.0)),
        }
    finally:
        demo.close()
    result = {"machine": f"{platform.processor() or platform.machine()}, {psutil.cpu_count()} cores",
              "cpu_bf16": ctx.hardware.cpu_bf16, "model": "demo", "profile": "cpu",
              "normal_alone_s": round(alone, 1), "normal_alone_right": right, "rows": rows}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"normal request alone: {alone:.1f} s\n")
    print("| hostile request | it ended after | a normal request sent 1 s later waited | right answer | server RSS "
          "change |\n|---|---|---|---|---|")
    for name, row in rows.items():
        print(f"| {name} | {row['hostile_s']} s | {row['normal_waited_s']} s | "
              f"{'yes' if row['normal_right'] else 'no'} | {row['rss_change_mb']:+} MB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
