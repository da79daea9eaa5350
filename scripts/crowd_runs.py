"""What the crowd and attack measurements share (scripts/measure_crowd.py, scripts/measure_door.py): the CPU named,
the sample visitor, an attack's outcome as a row of the JSON, and a run written with its machine and load (or its
rows merged into an earlier run's). A module of the workshop: nothing of the product imports it."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.crowd import crowd_attacks, crowd_check  # noqa: E402
from longqa.session import SAMPLES_DIR  # noqa: E402

MB = 1024 * 1024


def cpu_kind() -> str:
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    if "amx_bf16" in flags:
        return "kind C: AVX-512 BF16 and AMX"
    return "AVX-512 with avx512_bf16" if "avx512_bf16" in flags else "AVX2 only (no avx512_bf16)"


def visitor(url: str):
    return crowd_check.sample_visitor(url, SAMPLES_DIR)


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


def measured_attacks(out: Path, name: str, attacks, settings: str, merge: bool = False) -> dict:
    """Run `attacks` (a function of a work folder) with the machine and its load recorded before and after, write
    the result to `out` as JSON (`merge`: into what `out` holds, `merged_rows`), print what the machine was, and
    return it."""
    work = ROOT / "bench-results" / name
    work.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    result = {"machine": f"{platform.processor() or platform.machine()}, {psutil.cpu_count()} cores",
              "cpu_kind": cpu_kind(), "model": "demo", "profile": "cpu", "settings": settings,
              "load_average_before": [round(x, 2) for x in load], **attacks(work)}
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    written = merged_rows(json.loads(out.read_text()), result) if merge and out.exists() else result
    out.write_text(json.dumps(written, indent=2) + "\n")
    print(f"CPU: {result['cpu_kind']}; load before {load}; visitor alone: {result['visitor_alone_s']} s\n")
    return result


def merged_rows(earlier: dict, result: dict) -> dict:
    """`earlier` (a whole run's JSON) with `result`'s rows and stops in place of its own, each row's `re_measured`
    saying where and when (the commit, the machine, the load before and after, the visitor alone then: `earlier`'s
    times alone stay, for its own rows)."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or None  # None in an exported tree: say the commit in docs/
    where = {"commit": commit, "machine": result["machine"], "cpu_kind": result["cpu_kind"],
             "load_average_before": result["load_average_before"], "load_average_after": result["load_average_after"],
             "visitor_alone_s": result.get("visitor_alone_s", {}),
             "command": " ".join(["python scripts/measure_crowd.py", *sys.argv[1:]])}
    merged = {**earlier, "rows": {**earlier.get("rows", {})}}
    merged["sigterm_with_reads_in_flight"] = {**earlier.get("sigterm_with_reads_in_flight", {}),
                                              **result.get("sigterm_with_reads_in_flight", {})}
    for name, row in result["rows"].items():
        merged["rows"][name] = {**row, "re_measured": where}
    return merged
