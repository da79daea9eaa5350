"""Measure issue 32's and issue 40's targets against a served app on 127.0.0.1, with the default settings on a direct
connection: a normal visitor's wait behind eight fresh clients each reading 5 MB in full, and behind eight slow-HTML
clients (issue 32); behind ten guided reads that fall back to the full read and sixteen clients indexing two large
uploads (issue 40); the server's memory (its children included) idle, at its peak during the crowd and after the
crowd is cancelled; what each crowd request got. Then the lane's two orders on a simulated model (issue 32), and the
memory a server keeps after 30 full reads, as a process of its own, against the base commit (issue 40); and how
soon a request cancelled inside each stage of planning and reading 6 MB (counting, tokenizing, indexing) stops, in
wall seconds and in the server's CPU seconds (`--attacks cancel`, issue 40); and how long a 2 MB file of emoji
and punctuation takes to be answered or refused, and how soon its request stops when cancelled while it tokenizes
or decodes (`--attacks emoji`, issue 40 item 2).
Writes the JSON and prints Markdown rows.
`--attacks html-uploads`: issue 40's attacks on HTML reading and uploads instead, against `python app.py --model demo`
started as its own process (memory counted with its children), written to docs/results/crowd-html-uploads.json.
`--attacks endpoints`: issue 48's floods of /plan, /load_profile, /compare and /training_step the same way, written
to docs/results/crowd-endpoints.json (docs/serving.md's table of attacks).
`--attacks door`: issue 61's six ways around the door the same way (and under --lock-profile), written to
docs/results/crowd-door.json (docs/serving.md's table of attacks); `--door-attacks fresh` (or others of DOOR_ATTACKS)
re-runs only those and replaces their rows there.
Usage: python scripts/measure_crowd.py [--out docs/results/crowd.json] [--clients 8] [--mb 5] [--attacks full,html]
       python scripts/measure_crowd.py --attacks html-uploads [--out docs/results/crowd-html-uploads.json]
       python scripts/measure_crowd.py --attacks endpoints [--out docs/results/crowd-endpoints.json]
       python scripts/measure_crowd.py --attacks door [--out docs/results/crowd-door.json] [--door-attacks fresh,...]
       python scripts/measure_crowd.py --attacks guided_fallback,index,memory --base-tree DIR
           --out docs/results/crowd-lane.json
       python scripts/measure_crowd.py --attacks guided_fallback,index,cancel --out docs/results/crowd-cancel.json
       python scripts/measure_crowd.py --attacks emoji --out docs/results/crowd-emoji.json
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
RESULTS = ROOT / "docs" / "results"
sys.path.insert(0, str(ROOT))

from longqa.session import Session  # noqa: E402
from page.cli import serve  # noqa: E402
from page.context import make_context  # noqa: E402
from page.layout import build_blocks  # noqa: E402
from page.asking import ensure_loaded  # noqa: E402
from bench.crowd import crowd_attacks, crowd_check, load_check  # noqa: E402
from scripts.crowd_runs import MB, attack_row, cpu_kind, measured_attacks, visitor  # noqa: E402
from scripts.measure_door import DOOR_ATTACKS, main_door  # noqa: E402
from longqa.serving.lane import GatedRunner, ModelLane  # noqa: E402
from longqa_core.reading import DEFAULT_READING  # noqa: E402



def crowd_row(url: str, ctx, files: list[Path], reading: str) -> dict:
    idle = lambda: ctx.lane.waiting() == 0 and not ctx.lane.is_busy()  # noqa: E731
    out = crowd_check.run_crowd(url, os.getpid(), files, visitor(url), reading=reading, visitor_after_s=3.0,
                                wait_answers_s=2.0, settle_s=90.0, idle=idle)
    return {"visitor_right": out.visitor_right, "visitor_s": round(out.visitor_s, 1) if out.visitor_s else None,
            "visitor_error": out.visitor_error, "visitor_queue": out.visitor_queue,
            "rss_idle_mb": round(out.rss_idle / MB),
            "rss_peak_above_idle_mb": round((out.rss_peak - out.rss_idle) / MB),
            "rss_after_above_idle_mb": round((out.rss_after - out.rss_idle) / MB), "crowd": out.crowd}


def guided_fallback_row(url: str, ctx, work: Path, clients: int = 10, mb: float = 6.0) -> dict:
    """Issue 40 item 1: `clients` fresh clients each ask a guided question over `mb` MB that names the entity once
    and states no fact (each upload its own file: no shared index), then a normal visitor."""
    files = []
    for i in range(clients):
        files.append(work / f"entity_once{i}.txt")
        files[-1].write_text(crowd_check.entity_once_text(int(mb * MB)) + f" Copy {i}.")
    idle = lambda: ctx.lane.waiting() == 0 and not ctx.lane.is_busy()  # noqa: E731
    out = crowd_check.run_crowd(url, os.getpid(), files, visitor(url), reading="guided", visitor_after_s=3.0,
                                wait_answers_s=20.0, settle_s=90.0, idle=idle)
    return summary(out)


def index_crowd_row(url: str, ctx, work: Path, clients: int = 16, mb: float = 6.0, uploads: int = 2) -> dict:
    """Issue 40 item 4: `clients` fresh clients ask a guided question over one of `uploads` different `mb` MB
    texts (each states the fact, so guided reading answers from a window or two: the work is the ranking index),
    then a normal visitor. Each client's request is its own upload of the same bytes. 6 MB, not the issue's 6.5: since
    a guided read counts its tokens exactly (issue 42), 6.5 MB of this prose (2,091,163 tokens) is refused over the
    2,000,000-token limit before any index is built."""
    texts = [crowd_check.fact_text(int(mb * MB), 4100 + u) for u in range(uploads)]
    files = []
    for i in range(clients):
        files.append(work / f"indexed{i}.txt")
        files[-1].write_text(texts[i % uploads])
    builds_before = ctx.session.index_cache.builds
    idle = lambda: ctx.lane.waiting() == 0 and not ctx.lane.is_busy()  # noqa: E731
    out = crowd_check.run_crowd(url, os.getpid(), files, visitor(url), reading="guided", visitor_after_s=2.0,
                                wait_answers_s=30.0, settle_s=90.0, idle=idle)
    return {**summary(out), "indexes_built": ctx.session.index_cache.builds - builds_before,
            "index_cache_bytes": ctx.session.index_cache.bytes}


# Stages a request is cancelled in (`cancel_rows`): the function watched, as (module, name), and the reading asked.
CANCEL_STAGES = {
    "a full read counting its tokens (plan: count_tokens)": ("longqa_core.plan", "count_tokens", "full"),
    "a full read tokenizing its document for its windows (make_windows: tokenize_document)":
        ("longqa_core.windows", "tokenize_document", "full"),
    "a guided read tokenizing its upload (plan: tokenize_document)": ("longqa_core.plan", "tokenize_document",
                                                                       "guided"),
    "a guided read indexing its upload (build_index)": ("longqa_core.reading", "build_index", "guided"),
}


def cancel_rows(url: str, ctx, work: Path, mb: float = 6.0, repeats: int = 3) -> dict:
    """Issue 40's target "a cancelled request's work stops within a second": one fresh client's question over its
    own `mb` MB text (never indexed before), cancelled as the request enters each stage of CANCEL_STAGES, `repeats`
    times: wall seconds and the server's CPU seconds until it left the stage, and until the server went quiet (under
    15 % of a core for a second: its clean-up included)."""
    import importlib

    rows = {}
    for name, (module, function, reading) in CANCEL_STAGES.items():
        runs = []
        for r in range(repeats):
            path = work / f"cancel-{function}-{r}.txt"
            path.write_text(crowd_check.entity_once_text(int(mb * MB)) + f" Copy {time.time_ns()}.")
            with crowd_check.watched(importlib.import_module(module), function) as watch:
                out = crowd_check.cancel_inside(url, os.getpid(), path, watch, reading=reading)
            runs.append({"stopped_inside": out.stopped_inside, "stop_s": round(out.stop_s, 2),
                         "cpu_to_stop_s": round(out.cpu_to_stop_s, 2),
                         "quiet_s": round(out.quiet_s, 2) if out.quiet_s is not None else None,
                         "cpu_to_quiet_s": round(out.cpu_to_quiet_s, 2) if out.cpu_to_quiet_s is not None else None,
                         "outcome": out.outcome})
            deadline = time.monotonic() + 60
            while (ctx.lane.waiting() or ctx.lane.is_busy()) and time.monotonic() < deadline:
                time.sleep(0.1)
            print(name, runs[-1], flush=True)
        rows[name] = {"runs": runs, **{f"max_{key}": max((r[key] for r in runs if r[key] is not None), default=None)
                                       for key in ("stop_s", "cpu_to_stop_s", "quiet_s", "cpu_to_quiet_s")}}
    return rows


# Texts of emoji and punctuation, no letter or digit: (repeated unit, bytes). 2 MB is the size; 1.9 MB the
# largest under the default 2,000,000-token limit (the demo model's tokenizer gives one token a byte here), read in
# full; 182 KB is the issue's own probe, `'😀🎉🧪 ' * 14000`.
EMOJI_TEXTS = {"2 MB of '😀🎉🧪 ' (spaced)": ("😀🎉🧪 ", 2 * MB),
               "2 MB of '😀🎉🧪!?…' (no white space at all)": ("😀🎉🧪!?…", 2 * MB),
               "1.9 MB of '😀🎉🧪 ' (under the token limit: read in full)": ("😀🎉🧪 ", 1_900_000),
               "'😀🎉🧪 ' * 14000 (182 KB, the issue's probe)": ("😀🎉🧪 ", 14000 * 13),
               "182 KB of '😀🎉🧪!?…' (no white space at all)": ("😀🎉🧪!?…", 14000 * 13)}
# Stages an emoji request is cancelled in (as it enters them): tokenizing its upload at planning (the default reading,
# auto, tokenizes exactly and builds the ranking index there), and decoding the windows' spans.
EMOJI_CANCEL_STAGES = {"tokenizing (plan: tokenize_document)": ("longqa_core.plan", "tokenize_document"),
                       "decoding (spans.window_candidates)": ("longqa_core.spans", "window_candidates")}


def emoji_rows(url: str, ctx, work: Path) -> dict:
    """Issue 40 item 2's target: a 2 MB file of emoji and punctuation (no letter or digit) is answered or
    refused in seconds, and a cancel stops the server's work within a second. For each text: one fresh client's
    question awaited (wall seconds to its answer or refusal, what it said, the readout's seconds by stage), then a
    fresh upload of the same text cancelled as the request enters each stage of EMOJI_CANCEL_STAGES (`cancel_inside`:
    wall and the server's CPU seconds until it left the stage and until the server went quiet)."""
    import importlib

    rows = {}
    for name, (unit, size) in EMOJI_TEXTS.items():
        text = crowd_check.emoji_text(size, unit)
        path = work / f"emoji-{len(rows)}.txt"
        path.write_text(text)
        asked = crowd_check.ask_timed(url, path, "What is the tide of Harrowgate?", DEFAULT_READING)
        row = {"bytes": len(text.encode()), "answer_or_refusal_s": round(asked.seconds, 2), "outcome": asked.outcome,
               "answers": asked.answers, "latency_s": {k: round(v, 2) for k, v in asked.latency_s.items()},
               "cancelled": {}}
        print(name, json.dumps(row, ensure_ascii=False), flush=True)
        for stage, (module, function) in EMOJI_CANCEL_STAGES.items():
            if asked.outcome != "answered":  # refused at the door: no stage to cancel it in
                break
            fresh = work / f"emoji-{len(rows)}-{function}.txt"
            fresh.write_text(text + f"{time.time_ns()}")  # a new upload: nothing cached from the first ask
            with crowd_check.watched(importlib.import_module(module), function) as watch:
                out = crowd_check.cancel_inside(url, os.getpid(), fresh, watch, reading=DEFAULT_READING)
            row["cancelled"][stage] = {
                "entered": out.entered, "stopped_inside": out.stopped_inside,
                **{key: (round(getattr(out, key), 2) if getattr(out, key) is not None else None)
                   for key in ("stop_s", "cpu_to_stop_s", "quiet_s", "cpu_to_quiet_s")}, "outcome": out.outcome}
            print(" ", stage, row["cancelled"][stage], flush=True)
            deadline = time.monotonic() + 60
            while (ctx.lane.waiting() or ctx.lane.is_busy()) and time.monotonic() < deadline:
                time.sleep(0.1)
        rows[name] = row
    return rows


def summary(out) -> dict:
    return {"visitor_right": out.visitor_right, "visitor_s": round(out.visitor_s, 1) if out.visitor_s else None,
            "visitor_error": out.visitor_error, "visitor_queue": out.visitor_queue,
            "rss_idle_mb": round(out.rss_idle / MB),
            "rss_peak_above_idle_mb": round((out.rss_peak - out.rss_idle) / MB),
            "rss_after_above_idle_mb": round((out.rss_after - out.rss_idle) / MB),
            "idle_after_cancel_s": round(out.idle_after_cancel_s, 2) if out.idle_after_cancel_s is not None else None,
            "quiet_after_cancel_s": round(out.quiet_after_cancel_s, 2) if out.quiet_after_cancel_s is not None
            else None, "crowd": out.crowd}


def medium_visitor(url: str, path: Path):
    """A visitor who reads `path` in full (a fresh client each time): (answered, seconds, queue)."""
    from gradio_client import Client, handle_file

    def ask() -> tuple[bool, float, dict]:
        began = time.monotonic()
        *_, readout = Client(url, verbose=False).predict([handle_file(str(path))], "", "What is the tide of Harrowgate?",
                                                         1, "full", api_name="/ask")
        return bool(readout["answers"]), time.monotonic() - began, readout["queue"]
    return ask


def memory_return_rows(base_tree: Path | None, n: int = 100, settle_s: float = 60.0, medium_kb: int = 0) -> dict:
    """Issue 40 item 6: `n` small requests against `python app.py --model demo` as a separate process, with the
    base commit's app (`base_tree`, a checkout of it; skipped when None), this one with glibc's default allocator
    (MALLOC_ARENA_MAX=16 is glibc's own default on 2 cores, and any MALLOC_* variable leaves `tune_allocator`
    alone), this one as it starts (2 arenas), and this one with a 4 MB mmap threshold as well (dropped: slower). The server's memory idle, right after and `settle_s` later."""
    variants = {"this branch: heap trimmed after each request, allocator tuned": (ROOT / "app.py", {}),
                "this branch: heap trimmed after each request, glibc defaults": (ROOT / "app.py",
                                                                                {"MALLOC_ARENA_MAX": "16"}),
                "this branch: heap trimmed after each request, 2 arenas and a 4 MB mmap threshold (tried, dropped)":
                    (ROOT / "app.py", {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": "4194304"})}
    if base_tree is not None:
        variants = {"before (main f93cea5): trimmed only after a cancel": (base_tree / "app.py", {}), **variants}
    rows = {}
    for name, (app_py, extra) in variants.items():
        env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
        temp = ROOT / "bench-results" / "crowd" / f"gradio-{len(rows)}"
        temp.mkdir(parents=True, exist_ok=True)
        env.update(extra, GRADIO_TEMP_DIR=str(temp), PYTHONPATH=str(app_py.parent))
        process, url = load_check.start_server(["--model", "demo", "--profile", "cpu"], app=app_py, env=env)
        try:
            medium = ROOT / "bench-results" / "crowd" / f"medium{medium_kb}.txt"
            if medium_kb:
                medium.write_text(crowd_check.entity_once_text(medium_kb * 1024))
            ask = medium_visitor(url, medium) if medium_kb else visitor(url)
            ask()
            time.sleep(5.0)
            out = crowd_check.run_small_requests(process.pid, ask, n=n, threads=4, settle_s=settle_s)
        finally:
            load_check.stop_server(process)
        rows[name] = {"requests": out.requests, "right": out.right, "seconds": round(out.seconds, 1),
                      "rss_idle_mb": round(out.rss_idle / MB),
                      "rss_peak_above_idle_mb": round((out.rss_peak - out.rss_idle) / MB),
                      "rss_right_after_above_idle_mb": round((out.rss_after - out.rss_idle) / MB),
                      f"rss_{settle_s:g}s_after_above_idle_mb": round((out.rss_settled - out.rss_idle) / MB)}
        print(name, json.dumps(rows[name]), flush=True)
    return rows


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


def html_and_upload_attacks(work: Path) -> dict:
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
    server, url = crowd_attacks.start_demo_server(uploads)
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
        load_check.stop_server(server)
    return {"visitor_alone_s": round(alone, 1), "visitor_alone_right": right, "rows": rows}


def endpoint_attacks(work: Path, seconds: float = 30.0) -> dict:
    """Issue 48's attacks on the endpoints that wait for a one-at-a-time resource, each against a fresh
    `python app.py --model demo` with default settings: three threads posting `/plan` joins with one session hash
    (under --lock-profile, the Space's default), the same with `/load_profile` alternating two profiles (unlocked),
    six 4-profile compares of a 1 MB text from one session, and twelve visitors' 4,096-token training steps
    (unlocked), while the visitor keeps asking."""
    big = work / "one-mb.txt"
    big.write_text(crowd_check.fact_text(MB, 7))
    rows, alone = {}, {}
    plan = ["demo", "T4", None, 1, None, None, None, False, None]
    load = ["cpu", "demo", [], None]
    profiles = (["cpu", "baseline-fp32", "auto", "custom"], ["int8_dynamic"])
    for locked in (True, False):
        uploads = work / ("uploads-locked" if locked else "uploads")
        shutil.rmtree(uploads, ignore_errors=True)
        uploads.mkdir()
        server, url = crowd_attacks.start_demo_server(uploads, "--lock-profile" if locked else "--no-lock-profile")
        try:
            visitor(url)()
            alone["locked" if locked else "unlocked"] = round(visitor(url)()[1], 2)
            if locked:
                rows[f"3 threads posting /plan joins, one session, {seconds:g} s (--lock-profile)"] = attack_row(
                    crowd_attacks.endpoint_flood(url, server.pid, "plan", plan, visitor(url), seconds=seconds))
                continue
            rows[f"3 threads posting /load_profile joins (cpu, baseline-fp32 in turn), one session, {seconds:g} s"] = (
                attack_row(crowd_attacks.endpoint_flood(
                    url, server.pid, "load_profile", load, visitor(url), seconds=seconds,
                    vary=lambda i, data: [("cpu", "baseline-fp32")[i % 2], *data[1:]])))
            compare_args = ([crowd_attacks.handle_file(str(big))], "", "What is the tide of Harrowgate?", 3, "full",
                            "", *profiles)
            rows["6 compares of 4 profiles over 1 MB, read in full, from one session"] = attack_row(
                crowd_attacks.many_calls(url, server.pid, "/compare", compare_args, visitor(url), calls=6,
                                         one_client=True))
            rows["12 visitors' training steps at 4,096 tokens"] = attack_row(
                crowd_attacks.many_calls(url, server.pid, "/training_step", (4096,), visitor(url), calls=12,
                                         one_client=False))
        finally:
            load_check.stop_server(server)
    return {"visitor_alone_s": alone, "rows": rows}


def main_endpoints(out: Path) -> int:
    result = measured_attacks(out, "crowd-endpoints", endpoint_attacks,
                              "defaults, direct connection, `python app.py --model demo` (--lock-profile where named)")
    print("| attack | visitor's longest wait (median, asks) | refused asks | RSS idle, peak, after | the attack's calls |"
          "\n|---|---|---|---|---|")
    for name, row in result["rows"].items():
        print(f"| {name} | {row['visitor_s']} s ({row.get('visitor_median_s')} s, {row.get('visitor_asks')}) | "
              f"{row.get('visitor_refused')} {row['visitor_error'] or ''} | {row['rss_idle_mb']} MB, "
              f"{row['rss_peak_above_idle_mb']:+} MB, {row['rss_after_above_idle_mb']:+} MB | {row['crowd']} "
              f"{row.get('joins', '')} joins, {row.get('joins_refused', '')} refused; {row['refusals'][:2]} |")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS / "crowd.json")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--mb", type=float, default=5.0)
    parser.add_argument("--attacks", default="full,html",
                        help="which to run: full, html (issue 32), guided_fallback, index, memory, cancel, emoji "
                             "(issue 40); "
                             "html-uploads alone: issue 40's HTML and upload attacks; endpoints alone: issue 48's "
                             "floods of /plan, /load_profile, /compare and /training_step; door alone: issue 61's "
                             "ways around the door")
    parser.add_argument("--door-attacks", default=None,
                        help="with --attacks door: only these, comma-separated ("
                             + "; ".join(f"{k}: {v}" for k, v in DOOR_ATTACKS.items())
                             + "); their rows replace theirs in the JSON, the others kept")
    parser.add_argument("--base-tree", type=Path, default=None,
                        help="a checkout of the commit to compare with (memory: its app.py as a process)")
    args = parser.parse_args(argv)
    attacks = set(args.attacks.split(","))
    if attacks == {"endpoints"}:
        return main_endpoints(args.out if args.out != RESULTS / "crowd.json"
                              else RESULTS / "crowd-endpoints.json")
    if attacks == {"door"}:
        picks = set(args.door_attacks.split(",")) if args.door_attacks else None
        if picks and picks - set(DOOR_ATTACKS):
            parser.error(f"--door-attacks: {', '.join(sorted(picks - set(DOOR_ATTACKS)))} is none of "
                         f"{', '.join(DOOR_ATTACKS)}")
        return main_door(args.out if args.out != RESULTS / "crowd.json" else RESULTS / "crowd-door.json", picks)
    if attacks == {"html-uploads"}:
        return main_html_uploads(args.out if args.out != RESULTS / "crowd.json"
                                 else RESULTS / "crowd-html-uploads.json")
    os.environ.setdefault("GRADIO_TEMP_DIR", str(ROOT / "bench-results" / "crowd" / "gradio"))
    load_before = os.getloadavg()
    ctx = make_context(Session(), models=["demo"], default_model="demo", default_profile="cpu")
    ensure_loaded(ctx)
    demo = build_blocks(ctx)
    url, _ = serve(demo, host="127.0.0.1", port=7896, block=False)
    work = ROOT / "bench-results" / "crowd"
    work.mkdir(parents=True, exist_ok=True)
    large, slow = [], []
    for i in range(args.clients):
        large.append(work / f"large{i}.txt")
        large[-1].write_text(crowd_check.large_text(int(args.mb * MB)))
        slow.append(work / f"slow{i}.html")
        slow[-1].write_text(crowd_check.slow_html(300_000))
    rows, cancels, emoji = {}, {}, {}
    try:
        visitor(url)()
        right, alone, _ = visitor(url)()
        if "full" in attacks:
            rows[f"{args.clients} fresh clients, {args.mb:g} MB each, read in full"] = crowd_row(url, ctx, large, "full")
        if "html" in attacks:
            rows[f"{args.clients} slow-HTML clients ('<a' * 150,000, 300 KB each)"] = crowd_row(url, ctx, slow, "auto")
        if "guided_fallback" in attacks:
            rows["10 fresh clients, guided, 6 MB each naming the entity once (falls back to the full read)"] = \
                guided_fallback_row(url, ctx, work)
        if "index" in attacks:
            rows["16 fresh clients, guided, two different 6 MB uploads (the ranking index)"] = \
                index_crowd_row(url, ctx, work)
        if "cancel" in attacks:
            cancels = cancel_rows(url, ctx, work)
        if "emoji" in attacks:
            emoji = emoji_rows(url, ctx, work)
    finally:
        demo.close()
    memory = memory_return_rows(args.base_tree, n=30, settle_s=60.0, medium_kb=300) if "memory" in attacks else {}
    result = {"machine": f"{platform.processor() or platform.machine()}, {psutil.cpu_count()} cores",
              "cpu_kind": cpu_kind(), "load_average_1_5_15_at_start": [round(x, 1) for x in load_before],
              "load_average_1_5_15_at_end": [round(x, 1) for x in os.getloadavg()],
              "model": "demo", "profile": "cpu", "settings": "defaults, direct connection",
              "visitor_alone_s": round(alone, 1), "visitor_alone_right": right, "rows": rows}
    if memory:
        result["memory_after_30_full_reads_of_300_kb"] = memory
    if cancels:
        result["cancelled_inside_a_stage_6_mb"] = cancels
    if emoji:
        result["emoji_2_mb"] = emoji
    if {"full", "html"} & attacks:
        result["lane_orders_simulated"] = compare_orders()
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
    for name, row in cancels.items():
        print(f"| cancelled in {name} | left the stage after at most {row['max_stop_s']} s "
              f"({row['max_cpu_to_stop_s']} CPU s) | quiet after at most {row['max_quiet_s']} s "
              f"({row['max_cpu_to_quiet_s']} CPU s) |")
    for name, row in emoji.items():
        print(f"| {name} | {row['outcome'][:80]} after {row['answer_or_refusal_s']} s | " + " | ".join(
            f"cancelled in {stage}: quiet after {c['quiet_s']} s ({c['cpu_to_quiet_s']} CPU s)"
            for stage, c in row["cancelled"].items()) + " |")
    for name, row in memory.items():
        print(f"| {name} | idle {row['rss_idle_mb']} MB | peak {row['rss_peak_above_idle_mb']:+} MB | "
              f"a minute after {row['rss_60s_after_above_idle_mb']:+} MB |")
    return 0


def main_html_uploads(out: Path) -> int:
    result = measured_attacks(out, "crowd-html-uploads", html_and_upload_attacks,
                              "defaults, direct connection, server started as `python app.py --model demo`")
    print("| attack | visitor answered after | right | memory peak above idle (children included) | HTML children "
          "at once | upload folder peak | crowd outcomes |\n|---|---|---|---|---|---|---|")
    for name, row in result["rows"].items():
        print(f"| {name} | {row['visitor_s']} s | {'yes' if row['visitor_right'] else row['visitor_error']} | "
              f"{row['rss_peak_above_idle_mb']:+} MB | {row['children_peak']} | {row['upload_folder_peak_mb']} MB | "
              f"{row['crowd']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
