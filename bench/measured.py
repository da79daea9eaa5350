"""What every workshop measurement records beside its numbers: the machine it ran on and how busy it was, and the
JSON and Markdown it writes. Records; measures nothing itself."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

import torch

from bench.floor import kind_name
from longqa.bench.runner import cpu_model
from strategies.hardware import detect_hardware


def measured_here(measure: Callable[[], dict]) -> dict:
    """`measure()`'s result with `machine`: what it ran on (the CPU's model and kind, torch) and how busy the machine
    was (load averages before and after; `loaded` where either passed half the cores), for the CPU-floor scripts."""
    before = list(os.getloadavg())
    result = measure()
    after = list(os.getloadavg())
    result["machine"] = {"cpu_model": cpu_model(), "kind": kind_name(detect_hardware()), "torch": torch.__version__,
                         "load_average_before": before, "load_average_after": after,
                         "loaded": max(before[0], after[0]) > 0.5 * (os.cpu_count() or 1)}
    return result


def write_measurement(out_dir: str | Path, stem: str, result: dict, markdown: str) -> None:
    """`stem`.json and `stem`.md in `out_dir` (made if missing), and the markdown printed."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(result, indent=2))
    (out / f"{stem}.md").write_text(markdown)
    print(markdown)
