"""Tokenizing a long document for the full read's windows, side by side in one process, interleaved over rounds:
the tokenizer's own overflow in one call over the whole document (tests/reference_windows.py, what `make_windows`
did before) against `make_windows` now (a chunk at a time, `tokenize_document`, then `cut_windows`): wall and CPU
seconds of the process (all its threads: the Rust tokenizer's too), whether the windows are identical, and the
longest stretch between two of the request's Stop checks (how long a cancel can go unseen).

    python scripts/measure_tokenizing.py [--out docs/tokenizing.json] [--rounds 3] [--mb 6]

The demo model's tokenizer; the text: the crowd's 6 MB of prose, and a text of runs without spaces.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "tokenizing.json")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mb", type=float, default=6.0)
    args = parser.parse_args(argv)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(DEMO_MODEL_DIR)
    load = os.getloadavg()
    texts = {f"{args.mb:g} MB of prose (the crowd's text)": crowd_check.entity_once_text(int(args.mb * MB)),
             "1 MB of runs without spaces (punctuation, digits, CJK, emoji, marks)": runs_text(0, 7_000)}
    rows = {}
    for name, text in texts.items():
        rows[name] = measure(tokenizer, text, args.rounds)
        print(name, json.dumps(rows[name]), flush=True)
    result = {"machine": f"{platform.processor() or platform.machine()}, {psutil.cpu_count()} cores",
              "cpu_kind": cpu_kind(), "tokenizer": "demo model's (byte-level BPE, 8,000 tokens)",
              "settings": "defaults (the demo model's windows)", "rounds": args.rounds,
              "load_average_before": [round(x, 1) for x in load],
              "load_average_after": [round(x, 1) for x in os.getloadavg()], "rows": rows}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
