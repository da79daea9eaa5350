"""The floor beside the product bench's rows: which floor a `longqa bench` row is compared with (the precision its
matrix products run in, scaled to its window), "× floor" per CPU inference row, and the floor's section in Markdown.
Divides and formats; measures nothing (`bench.floor` does) and writes only where `add_floor` is asked to.
"""

from __future__ import annotations

import json
from pathlib import Path

from longqa.bench.report import cpu_kind, markdown_table, ratio, window_s
from longqa.bench.worker import MAX_WINDOW_TOKENS

FLOOR_HEADING = "## The floor"


# ------------------------------------------------------------------------------------------------ ratios
def is_cpu_row(row: dict) -> bool:
    return bool(row.get("devices")) and all(str(device).startswith("cpu") for device in row["devices"])


def row_precision(strategies, dtype: str | None) -> str | None:
    """The precision a bench row's matrix products run in, from what the row loaded (its resolved strategies and
    weight dtype): "int8" for int8_dynamic (the cpu profile without native bf16), "bf16" for bf16 weights (the cpu
    profile with it), "fp32" for fp32; None for what has no CPU floor here (fp16, bitsandbytes)."""
    if "int8_dynamic" in (strategies or []):
        return "int8"
    if dtype == "bfloat16":
        return "bf16"
    if dtype == "float32":
        return "fp32"
    return None


def floor_for_tokens(floor: dict, precision: str, tokens: int, band_at_linear_rate: bool = False) -> float | None:
    """The floor of a window of `tokens` tokens in `precision`, from a recorded floor (`bench.floor`'s JSON: the
    FLOPs of its window, counted from the rows' model, and the throughputs measured); None when that precision was
    not measured. A window's FLOPs grow in proportion to its tokens. With `band_at_linear_rate`, the second floor:
    the band's needed products (2w+1 keys per query) counted at the Linear layers' rate (docs/cpu-floor.md)."""
    measured = (floor.get("precisions") or {}).get(precision)
    if not measured:
        return None
    linear_rate = measured["linear_flops_per_s"]
    band_rate = linear_rate if band_at_linear_rate else measured["band_flops_per_s"]
    return tokens / floor["tokens"] * (floor["linear_flops"] / linear_rate + floor["band_flops"] / band_rate)


def add_floor_ratios(rows: list[dict], floor: dict | None) -> None:
    """Per CPU inference row: `window_s`, the precision its matrix products run in, the floor of one of its windows
    in that precision (`floor_s`, from the measured throughputs at the row's window length) and `x_floor`; and the
    second floor, the band counted at the Linear layers' rate (`floor_band_at_linear_rate_s`,
    `x_floor_band_at_linear_rate`)."""
    usable = floor if floor and not floor.get("error") else None
    for row in rows:
        if row.get("kind") != "inference" or row.get("error"):
            continue
        row["window_s"] = window_s(row)
        precision = row_precision(row.get("strategies"), row.get("dtype")) if is_cpu_row(row) else None
        tokens = row.get("window_tokens") or min(row["tokens"], MAX_WINDOW_TOKENS)
        floor_s = second_s = None
        if usable and precision:
            floor_s = floor_for_tokens(usable, precision, tokens)
            second_s = floor_for_tokens(usable, precision, tokens, band_at_linear_rate=True)
        row["floor_precision"], row["floor_s"] = precision, floor_s
        row["x_floor"] = ratio(row["window_s"], floor_s)
        row["floor_band_at_linear_rate_s"] = second_s
        row["x_floor_band_at_linear_rate"] = ratio(row["window_s"], second_s)


# ------------------------------------------------------------------------------------------------ markdown
def floor_cell(row: dict) -> str:
    if row.get("x_floor") is None:
        return "–"
    cell = f"{row['x_floor']:.2f}× {row['floor_precision']} ({row['floor_s']:.2f} s)"
    if row.get("x_floor_band_at_linear_rate") is not None:
        cell += f"; {row['x_floor_band_at_linear_rate']:.2f}× ({row['floor_band_at_linear_rate_s']:.2f} s)"
    return cell


ROW_COLUMNS = [
    ("profile", lambda r: r["profile"]),
    ("tokens", lambda r: f"{r['tokens']:,}"),
    ("batch", lambda r: str(r["batch"])),
    ("best s per window", lambda r: f"{r['window_s']:.2f}" if r.get("window_s") is not None else "–"),
    ("× floor (precision, floor s; band at the Linear rate)", floor_cell),
]

ROW_LEGEND = (
    "× floor: best seconds per window (the fastest timed request over its windows, as the floor is the fastest of "
    "its timings) over the floor of one such window in the precision the row's matrix products run in (fp32; bf16 "
    "for bf16 weights; int8 for int8 dynamic Linear layers, whose attention stays fp32). After the semicolon, the "
    "second floor: the band's needed products counted at the Linear layers' rate.")


def format_floor(floor: dict, machine: dict) -> str:
    """The floor section: FLOPs of a window, measured throughput and floor per precision, the CPU kind."""
    if floor.get("error"):
        return f"{FLOOR_HEADING}\n\nNot measured: {floor['error']}\n"
    load = floor.get("load_average")
    busy = (f" **The machine was busy (load average {load[0]:.1f}): throughputs are low and uncertain.**"
            if load and machine.get("cpu_cores_logical") and load[0] > 0.5 * machine["cpu_cores_logical"] else "")
    lines = [FLOOR_HEADING, "",
             f"CPU kind: {cpu_kind(machine)}; {floor['threads']} threads.{busy}", "",
             f"One window of {floor['tokens']:,} tokens of {floor['model']}: "
             f"{(floor['linear_flops'] + floor['band_flops']) / 1e12:.3f} TFLOP ({floor['linear_flops'] / 1e12:.3f} "
             f"in the linear layers, global key/value projections included; {floor['band_flops'] / 1e12:.3f} in the "
             "band of 2w+1 keys per query). Throughput: best of several timed calls after a warm-up, on the model's "
             "own shapes (the Linear layers at their sizes; the band as PyTorch's batched products of blocks of "
             "w queries against 3w keys).", "",
             "| precision | linear layers GFLOP/s | band GFLOP/s | floor per window s | floor, band at the linear "
             "rate, s |", "|---|---|---|---|---|"]
    flops = floor["linear_flops"] + floor["band_flops"]
    for name, measured in floor["precisions"].items():
        lines.append(f"| {name} | {measured['linear_flops_per_s'] / 1e9:,.0f} | "
                     f"{measured['band_flops_per_s'] / 1e9:,.0f} | {measured['floor_s']:.2f} | "
                     f"{flops / measured['linear_flops_per_s']:.2f} |")
    lines += [f"| {name} | not measured: {reason} | | | |" for name, reason in (floor.get("skipped") or {}).items()]
    return "\n".join(lines) + "\n"


def floor_lines(results: dict) -> list[str]:
    """One line per inference row for the terminal: time per window, its floor and the ratio."""
    lines = []
    for row in results["rows"]:
        if row.get("kind") != "inference" or row.get("error") or row.get("window_s") is None:
            continue
        floor = (f"floor {row['floor_s']:.2f} s ({row['floor_precision']}), {row['x_floor']:.2f}× floor"
                 if row.get("x_floor") is not None else "no floor")
        if row.get("x_floor_band_at_linear_rate") is not None:
            floor += (f"; band at the Linear rate {row['floor_band_at_linear_rate_s']:.2f} s, "
                      f"{row['x_floor_band_at_linear_rate']:.2f}×")
        lines.append(f"{row['profile']} {row['tokens']:,} tokens, batch {row['batch']}: "
                     f"{row['window_s']:.2f} s a window, {floor}")
    return lines


def floor_section(results: dict) -> str:
    """The floor, then each inference row beside it: the section `add_floor` puts at the end of results.md."""
    rows = [r for r in results["rows"] if r.get("kind") == "inference" and not r.get("error")]
    return "\n".join([format_floor(results["floor"], results["machine"]), markdown_table(rows, ROW_COLUMNS), "",
                      ROW_LEGEND, ""])


# ------------------------------------------------------------------------------------------------ the bench's folder
def add_floor(out_dir: Path, floor: dict) -> dict | None:
    """Put the rows of `out_dir`'s results.json (`python -m longqa bench --out DIR`) beside `floor`: the floor and
    each row's ratios into results.json, the floor's section at the end of results.md (replacing one an earlier
    call put there). The results, or None where `out_dir` holds no results.json."""
    path = out_dir / "results.json"
    if not path.exists():
        return None
    results = json.loads(path.read_text())
    results["floor"] = floor
    add_floor_ratios(results["rows"], floor)
    path.write_text(json.dumps(results, indent=2))
    markdown_path = out_dir / "results.md"
    markdown = markdown_path.read_text() if markdown_path.exists() else ""
    markdown = markdown.split(f"\n{FLOOR_HEADING}\n")[0].rstrip("\n")
    markdown_path.write_text(f"{markdown}\n\n{floor_section(results)}")
    return results
