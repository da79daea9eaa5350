"""Whether a request's memory depends on what ran before: the same question over the same bundled sample, asked
under profiles switched back and forth in one process (`longqa.compare.compare_profiles`, each profile loaded
afresh), with the process's peak, the baseline right before the request and the request's own peak above it:

    python scripts/measure_profile_switching.py [--model arch:base] [--profiles cpu,baseline-fp32,cpu,...]
        [--out docs/memory-switching] [--no-trim] [--glibc-allocator] [--stem NAME]

The process starts with the page's allocator settings (`policy.tune_allocator`, as `python app.py` does);
`--glibc-allocator` leaves glibc's own (and so do MALLOC_* variables in the environment). `--no-trim` measures the
code as it was before the free heap was handed back (no malloc_trim at unload nor before a request), in the same
way, for the before/after table. Writes switching-<kind>[-glibc][-no-trim].json and .md (or --stem's).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from longqa import loader  # noqa: E402
from longqa.bench.floor import kind_name  # noqa: E402
from longqa.bench.runner import measured_here, write_measurement  # noqa: E402
from longqa.compare import ProfileChoice, compare_profiles  # noqa: E402
from longqa.serving import policy  # noqa: E402
from longqa.session import SAMPLES_DIR, Session, read_documents, sample_examples  # noqa: E402
from longqa_core import telemetry  # noqa: E402
from strategies.hardware import detect_hardware  # noqa: E402

DEFAULT_PROFILES = "cpu,baseline-fp32,cpu,baseline-fp32,cpu"


def without_trims() -> None:
    """The code before: unloading collects garbage only, and a request is measured from the heap as it is."""
    telemetry.trim_heap = lambda: None
    loader.release_memory = lambda: __import__("gc").collect()


def measure(model: str, names: list[str]) -> dict:
    example = sample_examples()[0]
    documents, extract_s = read_documents([str(SAMPLES_DIR / example["file"])])
    comparison = compare_profiles(Session(), model, [ProfileChoice(name) for name in names], documents,
                                  example["question"], "full", extract_s=extract_s)
    runs = [{"profile": run.choice.name, "peak_bytes": run.peak_bytes,
             "baseline_bytes": run.readout.request_memory.baseline_bytes,
             "request_peak_bytes": run.request_peak_bytes, "time_s": run.time_s,
             "windows": run.readout.result.windows, "answer": run.answer_text} for run in comparison.runs]
    return {"model": model, "document": example["file"], "question": example["question"], "runs": runs,
            "spread": spreads(runs)}


def spreads(runs: list[dict]) -> dict:
    """Per profile: (largest / smallest - 1) of its repeats' process peak and request peak, over every repeat and
    over the repeats after its first (the first in a process also pays one-time initialisation)."""
    out = {}
    for name in dict.fromkeys(run["profile"] for run in runs):
        mine = [run for run in runs if run["profile"] == name]
        out[name] = {f"{key}{suffix}": spread([run[key] for run in chosen])
                     for key in ("peak_bytes", "request_peak_bytes")
                     for suffix, chosen in (("", mine), ("_after_first", mine[1:]))}
    return out


def spread(values: list) -> float | None:
    values = [v for v in values if v is not None]
    if len(values) < 2 or min(values) <= 0:
        return None
    return max(values) / min(values) - 1


def markdown(result: dict, trimmed: bool) -> str:
    machine = result["machine"]
    lines = [f"# The same request after switching profiles ({'with' if trimmed else 'without'} the heap trims)", "",
             f"{result['model']}, {result['document']}, full read; {machine['cpu_model']} (kind {machine['kind']}), "
             f"torch {machine['torch']}{', loaded machine' if machine['loaded'] else ''}; allocator: "
             f"{result['allocator']}.", "",
             "| run | profile | process peak | baseline before the request | request's own peak | time |",
             "|---|---|---|---|---|---|"]
    for index, run in enumerate(result["runs"], 1):
        lines.append(f"| {index} | {run['profile']} | {mb(run['peak_bytes'])} | {mb(run['baseline_bytes'])} | "
                     f"{mb(run['request_peak_bytes'])} | {run['time_s']:.2f} s |")
    lines += ["", "| profile | process peak spread | request peak spread | after its first run: process | "
              "request |", "|---|---|---|---|---|"]
    for name, spread_of in result["spread"].items():
        lines.append(f"| {name} | {pct(spread_of['peak_bytes'])} | {pct(spread_of['request_peak_bytes'])} | "
                     f"{pct(spread_of['peak_bytes_after_first'])} | {pct(spread_of['request_peak_bytes_after_first'])} |")
    return "\n".join(lines) + "\n"


def mb(value) -> str:
    return "—" if value is None else f"{value / 1e6:,.1f} MB"


def pct(value) -> str:
    return "—" if value is None else f"{100 * value:.1f} %"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="arch:base")
    parser.add_argument("--profiles", default=DEFAULT_PROFILES)
    parser.add_argument("--out", default="docs/memory-switching")
    parser.add_argument("--no-trim", action="store_true")
    parser.add_argument("--glibc-allocator", action="store_true", help="leave glibc's allocator settings alone")
    parser.add_argument("--stem", help="the output files' name (default: from the machine and the flags)")
    args = parser.parse_args(argv)
    allocator = {} if args.glibc_allocator else policy.tune_allocator()  # before anything large is allocated
    if args.no_trim:
        without_trims()
    result = measured_here(lambda: measure(args.model, args.profiles.split(",")))
    result["trimmed"] = not args.no_trim
    result["allocator"] = allocator or "glibc's own settings"
    stem = args.stem or (f"switching-{kind_name(detect_hardware())}{'-glibc' if args.glibc_allocator else ''}"
                         f"{'-no-trim' if args.no_trim else ''}")
    write_measurement(args.out, stem, result, markdown(result, not args.no_trim))
    return 0


if __name__ == "__main__":
    sys.exit(main())
