"""Tokenizing a long document for the full read's windows, side by side in one process, interleaved over rounds:
the tokenizer's own overflow in one call over the whole document (tests/reference_windows.py, what `make_windows`
did before) against `make_windows` now (a chunk at a time, `tokenize_document`, then `cut_windows`): wall and CPU
seconds of the process (all its threads: the Rust tokenizer's too), whether the windows are identical, and the
longest stretch between two of the request's Stop checks (how long a cancel can go unseen); and the peak resident
memory each way takes over 6 MB of prose, each in a fresh process of its own; what a run of one class without any
cut (no chunk can end inside it) costs in its one call; and `tokenize_document` over the prose with 2, 4 and 16
chunks a call (how often it can ask Stop), interleaved.

    python scripts/measure_tokenizing.py [--out docs/tokenizing.json] [--rounds 3] [--mb 6]

The demo model's tokenizer; the text: the crowd's 6 MB of prose, and a text of runs without spaces.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from longqa.models import DEMO_MODEL_DIR  # noqa: E402
from longqa.serving import crowd_check  # noqa: E402
from longqa_core.documents import Document  # noqa: E402
from longqa_core.limits import EngineSettings  # noqa: E402
from longqa_core.windows import make_windows  # noqa: E402
from scripts.measure_crowd import cpu_kind  # noqa: E402
from tests.reference_windows import windows_by_overflow  # noqa: E402
from tests.test_windows import runs_text  # noqa: E402

MB = 1024 * 1024
QUESTION = "What is the tide of Harrowgate?"


def timed(call) -> tuple[object, float, float]:
    process = psutil.Process()
    cpu, began = process.cpu_times(), time.perf_counter()
    result = call()
    after = process.cpu_times()
    return result, time.perf_counter() - began, (after.user + after.system) - (cpu.user + cpu.system)


class StopGaps:
    """A Stop check that never stops and records the longest wall time between two calls."""

    def __init__(self):
        self.last = time.perf_counter()
        self.longest = 0.0
        self.calls = 0

    def __call__(self) -> bool:
        now = time.perf_counter()
        self.longest, self.last, self.calls = max(self.longest, now - self.last), now, self.calls + 1
        return False


def same_windows(a, b) -> bool:
    return len(a) == len(b) and all(x.input_ids.tolist() == y.input_ids.tolist()
                                    and x.offsets.tolist() == y.offsets.tolist() for x, y in zip(a, b))


def measure(tokenizer, text: str, rounds: int) -> dict:
    documents, settings = [Document("doc.txt", text)], EngineSettings().resolved(tokenizer)
    one_call, chunked, gaps = [], [], []
    identical = True
    for _ in range(rounds):
        expected, wall, cpu = timed(lambda: windows_by_overflow(tokenizer, QUESTION, documents, settings)[0])
        one_call.append((wall, cpu))
        stop = StopGaps()
        windows, wall, cpu = timed(lambda: make_windows(tokenizer, QUESTION, documents, settings,
                                                        should_stop=stop)[0])
        chunked.append((wall, cpu))
        gaps.append(stop.longest)
        identical = identical and same_windows(windows, expected)
        del expected, windows
    med = lambda runs, i: statistics.median(r[i] for r in runs)  # noqa: E731
    return {"chars": len(text), "windows": len(windows_by_overflow(tokenizer, QUESTION, documents, settings)[0]),
            "identical_windows": identical,
            "one_call_wall_s": [round(w, 2) for w, _ in one_call], "chunked_wall_s": [round(w, 2) for w, _ in chunked],
            "one_call_cpu_s": [round(c, 2) for _, c in one_call], "chunked_cpu_s": [round(c, 2) for _, c in chunked],
            "chunked_over_one_call_wall": round(med(chunked, 0) / med(one_call, 0), 2),
            "chunked_over_one_call_cpu": round(med(chunked, 1) / med(one_call, 1), 2),
            "longest_between_stop_checks_s": round(max(gaps), 3)}


ONE_CLASS_RUNS = {"1,000,000 x": "x" * 1_000_000, "300,000 emoji without spaces": "\U0001F600\U0001F389\U0001F9EA" * 100_000,
                  "1,000,000 digits": "1234567890" * 100_000}


def one_class_runs(tokenizer) -> dict:
    """Seconds (wall, CPU) of `tokenize_document` over runs no chunk can be cut inside: one call each."""
    from longqa_core.windows import plan_chunks, tokenize_document

    rows = {}
    for name, text in ONE_CLASS_RUNS.items():
        tokens, wall, cpu = timed(lambda: tokenize_document(tokenizer, text))
        rows[name] = {"chunks": len(list(plan_chunks(tokenizer, text))), "tokens": len(tokens),
                      "wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}
    return rows


def chunks_a_call(tokenizer, text: str, rounds: int) -> dict:
    """Seconds (wall, CPU; median of `rounds`, interleaved) of `tokenize_document` over `text` with 2, 4 and 16
    chunks of 64K characters a call: fewer chunks a call, more Stop checks."""
    from longqa_core import windows

    default, runs = windows._ENCODE_GROUP_CHARS, {}
    try:
        for _ in range(rounds):
            for chunks in (2, 4, 16):
                windows._ENCODE_GROUP_CHARS = chunks << 16
                _, wall, cpu = timed(lambda: windows.tokenize_document(tokenizer, text))
                runs.setdefault(chunks, []).append((wall, cpu))
    finally:
        windows._ENCODE_GROUP_CHARS = default
    return {f"{chunks} chunks a call": {"wall_s": round(statistics.median(w for w, _ in r), 2),
                                        "cpu_s": round(statistics.median(c for _, c in r), 2)}
            for chunks, r in runs.items()}


def peak_above_start_mb(way: str, mb: float) -> int:
    """The peak RSS above the process's start (tokenizer loaded, text built) of tokenizing `mb` MB of prose for the
    windows `way` ("one_call" or "chunked"), in a fresh process of its own."""
    done = subprocess.run([sys.executable, __file__, "--peak-of", way, "--mb", str(mb)], capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])["peak_above_start_mb"]


def print_peak(way: str, mb: float) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(DEMO_MODEL_DIR)
    documents = [Document("doc.txt", crowd_check.entity_once_text(int(mb * MB)))]
    settings = EngineSettings().resolved(tokenizer)
    Path("/proc/self/clear_refs").write_text("5")  # Linux: the peak (VmHWM) restarts from here, not from the imports
    start = psutil.Process().memory_info().rss
    build = windows_by_overflow if way == "one_call" else make_windows
    build(tokenizer, QUESTION, documents, settings)
    status = Path("/proc/self/status").read_text()
    peak = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))) * 1024  # kB
    print(json.dumps({"peak_above_start_mb": round((peak - start) / MB)}))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peak-of", choices=["one_call", "chunked"], help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "tokenizing.json")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mb", type=float, default=6.0)
    args = parser.parse_args(argv)
    if args.peak_of:
        print_peak(args.peak_of, args.mb)
        return 0
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(DEMO_MODEL_DIR)
    load = os.getloadavg()
    texts = {f"{args.mb:g} MB of prose (the crowd's text)": crowd_check.entity_once_text(int(args.mb * MB)),
             "1 MB of runs without spaces (punctuation, digits, CJK, emoji, marks)": runs_text(0, 7_000)}
    rows = {}
    for name, text in texts.items():
        rows[name] = measure(tokenizer, text, args.rounds)
        print(name, json.dumps(rows[name]), flush=True)
    prose = next(iter(rows))
    rows[prose]["tokenize_document_by_chunks_a_call"] = chunks_a_call(tokenizer, texts[prose], args.rounds)
    print("chunks a call", rows[prose]["tokenize_document_by_chunks_a_call"], flush=True)
    runs = one_class_runs(tokenizer)
    print("runs of one class", json.dumps(runs), flush=True)
    rows[prose]["peak_rss_above_start_mb"] = {way: peak_above_start_mb(way, args.mb) for way in ("one_call", "chunked")}
    print("peak", rows[prose]["peak_rss_above_start_mb"], flush=True)
    result = {"machine": f"{platform.processor() or platform.machine()}, {psutil.cpu_count()} cores",
              "cpu_kind": cpu_kind(), "tokenizer": "demo model's (byte-level BPE, 8,000 tokens)",
              "settings": "defaults (the demo model's windows)", "rounds": args.rounds,
              "load_average_before": [round(x, 1) for x in load],
              "load_average_after": [round(x, 1) for x in os.getloadavg()], "rows": rows,
              "runs_of_one_class_in_one_call": runs}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
