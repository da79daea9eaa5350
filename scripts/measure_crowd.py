"""Measure issue 32's targets against a served app on 127.0.0.1, with the default settings on a direct connection:
a normal visitor's wait behind eight fresh clients each reading 5 MB in full, and behind eight slow-HTML clients;
the server's memory idle, at its peak during the crowd and after the crowd is cancelled; what each crowd request got.
Then the lane's two orders (round robin, shortest first) on a simulated model: a small request's wait behind large
ones, and the large ones' completion. Writes docs/crowd.json and prints Markdown rows for the README.
`--only html-uploads`: issue 40's attacks on HTML reading and uploads instead, against `python app.py --model demo`
started as its own process (memory counted with its children), written to docs/crowd-html-uploads.json.
Usage: python scripts/measure_crowd.py [--out docs/crowd.json] [--clients 8] [--mb 5] [--only html-uploads]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path

import psutil
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import app  # noqa: E402
from longqa.serving import crowd_attacks, crowd_check  # noqa: E402
from longqa.serving.lane import GatedRunner, ModelLane  # noqa: E402
from longqa.session import Session  # noqa: E402

MB = 1024 * 1024


def cpu_kind() -> str:
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return "AVX-512 with avx512_bf16" if "avx512_bf16" in flags else "AVX2 only (no avx512_bf16)"


def visitor(url: str):
    return crowd_check.sample_visitor(url, app.SAMPLES_DIR)


def crowd_row(url: str, ctx, files: list[Path], reading: str) -> dict:
    idle = lambda: ctx.lane.waiting() == 0 and not ctx.lane.is_busy()  # noqa: E731
    out = crowd_check.run_crowd(url, os.getpid(), files, visitor(url), reading=reading, visitor_after_s=3.0,
                                wait_answers_s=2.0, settle_s=90.0, idle=idle)
    return {"visitor_right": out.visitor_right, "visitor_s": round(out.visitor_s, 1) if out.visitor_s else None,
            "visitor_error": out.visitor_error, "visitor_queue": out.visitor_queue,
            "rss_idle_mb": round(out.rss_idle / MB),
            "rss_peak_above_idle_mb": round((out.rss_peak - out.rss_idle) / MB),
            "rss_after_above_idle_mb": round((out.rss_after - out.rss_idle) / MB), "crowd": out.crowd}


class SimulatedModel:
    devices = ["cpu"]

    def __init__(self, batch_s: float):
        self.batch_s = batch_s

    def __call__(self, batch):
        time.sleep(self.batch_s)


def compare_orders(batch_s: float = 0.02, large: int = 4, large_batches: int = 150, small: int = 12,
                   small_batches: int = 2, every_s: float = 0.25) -> dict:
    """Each order on a simulated model (a batch takes `batch_s`): `large` requests of `large_batches` start
    together, then a small request of `small_batches` arrives every `every_s`. The small ones' times, and when the
    last large one finished (both as multiples of one batch)."""
    results = {}
    for order in ("round_robin", "shortest_first"):
        lane, model = ModelLane(order=order), SimulatedModel(batch_s)
        times: dict[str, list[float]] = {"small": [], "large": []}

        def request(kind: str, batches: int, began: float) -> None:
            with lane.request(None, windows=batches) as ticket:
                gated = GatedRunner(lane, ticket, model)
                for _ in range(batches):
                    gated({"input_ids": torch.zeros(1, 1)})
            times[kind].append((time.monotonic() - began) / batch_s)

        began = time.monotonic()
        threads = [threading.Thread(target=request, args=("large", large_batches, began)) for _ in range(large)]
        for thread in threads:
            thread.start()
        for _ in range(small):
            time.sleep(every_s)
            threads.append(threading.Thread(target=request, args=("small", small_batches, time.monotonic())))
            threads[-1].start()
        for thread in threads:
            thread.join(120)
        results[order] = {"small_median_batches": round(statistics.median(times["small"]), 1),
                          "small_max_batches": round(max(times["small"]), 1),
                          "large_last_done_batches": round(max(times["large"]), 1),
                          "large_first_done_batches": round(min(times["large"]), 1)}
    return results


def attack_row(out: crowd_attacks.AttackOutcome) -> dict:
    kinds: dict[str, int] = {}
    for o in out.crowd:
        kind = o.split(":")[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    refusals = sorted({o[len("refused: "):][:160] for o in out.crowd if o.startswith("refused: ")})
    return {"visitor_right": out.visitor_right, "visitor_s": round(out.visitor_s, 1) if out.visitor_s else None,
            "visitor_error": out.visitor_error, "rss_idle_mb": round(out.rss_idle / MB),
            "rss_peak_above_idle_mb": round((out.rss_peak - out.rss_idle) / MB),
            "rss_after_above_idle_mb": round((out.rss_after - out.rss_idle) / MB),
            "children_peak": out.children_peak, "upload_folder_peak_mb": round(out.folder_peak / MB),
            "crowd": kinds, "refusals": refusals, **out.extra}


def html_and_upload_attacks(work: Path, port: int = 7897) -> dict:
    """Issue 40 items 3 and 5 against a fresh `python app.py --model demo` with default settings: twelve fresh
    clients with 4 MB of dense HTML each, one client sending 34 slow HTML pages at once, a cancel during a slow
    HTML read, and four threads posting 50 MB uploads that never ask for 40 s (more than the 2 GB cap)."""
    dense, slow = [], work / "misnested.html"
    for i in range(12):
        dense.append(work / f"dense{i}.html")
        dense[-1].write_text(crowd_attacks.dense_html(4 * MB) + f"<!-- {i} -->")
    slow.write_text(crowd_attacks.misnested_html(2 * MB))
    uploads = work / "gradio-uploads"
    shutil.rmtree(uploads, ignore_errors=True)  # the upload folder holds this server's files only
    uploads.mkdir()
    server, url = crowd_attacks.start_server(port, uploads)
    try:
        visitor(url)()
        right, alone, _ = visitor(url)()
        rows = {
            "12 fresh clients, 4 MB of dense HTML each": attack_row(
                crowd_attacks.html_crowd(url, server.pid, dense, visitor(url))),
            "one client, 34 slow HTML pages at once (2 MB misnested)": attack_row(
                crowd_attacks.one_client_many_html(url, server.pid, slow, visitor(url))),
            "a slow HTML read cancelled 2 s in": attack_row(crowd_attacks.cancel_during_html(url, server.pid, slow)),
            "4 threads posting 50 MB uploads for 40 s, never asking": attack_row(
                crowd_attacks.upload_flood(url, server.pid, uploads, visitor(url), seconds=40.0,
                                           visitor_after_s=30.0)),
        }
    finally:
        crowd_attacks.stop_server(server)
    return {"visitor_alone_s": round(alone, 1), "visitor_alone_right": right, "rows": rows}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "crowd.json")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--mb", type=float, default=5.0)
    parser.add_argument("--only", choices=["html-uploads"], default=None,
                        help="html-uploads: issue 40's HTML and upload attacks only")
    args = parser.parse_args(argv)
    if args.only == "html-uploads":
        return main_html_uploads(args.out if args.out != ROOT / "docs" / "crowd.json"
                                 else ROOT / "docs" / "crowd-html-uploads.json")
    ctx = app.make_context(Session(), models=["demo"], default_model="demo", default_profile="cpu")
    app.ensure_loaded(ctx)
    demo = app.build_blocks(ctx)
    url, _ = app.serve(demo, host="127.0.0.1", port=7896, block=False)
    work = ROOT / "bench-results" / "crowd"
    work.mkdir(parents=True, exist_ok=True)
    large, slow = [], []
    for i in range(args.clients):
        large.append(work / f"large{i}.txt")
        large[-1].write_text(crowd_check.large_text(int(args.mb * MB)))
        slow.append(work / f"slow{i}.html")
        slow[-1].write_text(crowd_check.slow_html(300_000))
    try:
        visitor(url)()
        right, alone, _ = visitor(url)()
        rows = {f"{args.clients} fresh clients, {args.mb:g} MB each, read in full": crowd_row(url, ctx, large, "full"),
                f"{args.clients} slow-HTML clients ('<a' * 150,000, 300 KB each)": crowd_row(url, ctx, slow, "auto")}
    finally:
        demo.close()
    result = {"machine": f"{platform.processor() or platform.machine()}, {psutil.cpu_count()} cores",
              "cpu_kind": cpu_kind(), "model": "demo", "profile": "cpu", "settings": "defaults, direct connection",
              "visitor_alone_s": round(alone, 1), "visitor_alone_right": right, "rows": rows,
              "lane_orders_simulated": compare_orders()}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"CPU: {result['cpu_kind']}; visitor alone: {alone:.1f} s\n")
    print("| crowd | visitor answered after | right | RSS peak above idle | RSS after cancel | crowd outcomes |\n"
          "|---|---|---|---|---|---|")
    for name, row in rows.items():
        kinds = {}
        for o in row["crowd"]:
            kinds[o.split(":")[0]] = kinds.get(o.split(":")[0], 0) + 1
        print(f"| {name} | {row['visitor_s']} s | {'yes' if row['visitor_right'] else 'no'} | "
              f"{row['rss_peak_above_idle_mb']:+} MB | {row['rss_after_above_idle_mb']:+} MB | {kinds} |")
    print(json.dumps(result["lane_orders_simulated"], indent=2))
    return 0


def main_html_uploads(out: Path) -> int:
    work = ROOT / "bench-results" / "crowd-html-uploads"
    work.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    result = {"machine": f"{platform.processor() or platform.machine()}, {psutil.cpu_count()} cores",
              "cpu_kind": cpu_kind(), "model": "demo", "profile": "cpu",
              "settings": "defaults, direct connection, server started as `python app.py --model demo`",
              "load_average_before": [round(x, 2) for x in load], **html_and_upload_attacks(work)}
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"CPU: {result['cpu_kind']}; load before {load}; visitor alone: {result['visitor_alone_s']} s\n")
    print("| attack | visitor answered after | right | memory peak above idle (children included) | HTML children "
          "at once | upload folder peak | crowd outcomes |\n|---|---|---|---|---|---|---|")
    for name, row in result["rows"].items():
        print(f"| {name} | {row['visitor_s']} s | {'yes' if row['visitor_right'] else row['visitor_error']} | "
              f"{row['rss_peak_above_idle_mb']:+} MB | {row['children_peak']} | {row['upload_folder_peak_mb']} MB | "
              f"{row['crowd']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
