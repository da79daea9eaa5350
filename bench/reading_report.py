"""The reading sweep's report: guided against full per document length (speed-up, what ran before the first forward
pass as a share of the answer), reading.json, reading.md and a log-log plot. It measures nothing
(`bench.reading_sweep` does)."""

from __future__ import annotations

import json
from pathlib import Path

STAGES = ("extract", "tokenize", "rank", "forward", "decode", "total")
BEFORE_FORWARD = ("extract", "tokenize", "rank")
GB = 1e9


def add_ratios(rows: list[dict]) -> None:
    """Each guided row gains `speedup_vs_full` (the full read's total over its own, measured or predicted) and
    `before_forward_share` (reading, tokenizing and ranking as a share of its total)."""
    full = {r["doc_tokens"]: r for r in rows if r.get("mode") == "full" and not r.get("error")}
    for row in rows:
        if row.get("error"):
            continue
        latency = row["latency_s"]
        row["before_forward_share"] = (sum(latency.get(s, 0.0) for s in BEFORE_FORWARD) / latency["total"]
                                       if latency.get("total") else None)
        if row["mode"] != "full" and row["doc_tokens"] in full and latency.get("total"):
            row["speedup_vs_full"] = full[row["doc_tokens"]]["latency_s"]["total"] / latency["total"]
            row["speedup_predicted"] = bool(full[row["doc_tokens"]].get("predicted"))


def format_seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:,.2f}"


def format_markdown(results: dict) -> str:
    machine = results["machine"]
    lines = [f"# Reading cost by document length: {results['model']} ({results['profile']})", "",
             f"Measured on {machine['cpu_model']} ({machine['cpu_cores_logical']} logical cores, native bf16: "
             f"{'yes' if machine.get('cpu_bf16') else 'no'}), torch {machine['torch']}, {results['started']}.",
             f"Command: `{results['command']}`. Guided stopping: {results['stopping']}.", "",
             "| tokens | mode | windows read / total | " + " | ".join(f"{s} (s)" for s in STAGES)
             + " | peak RSS (GB) | × faster than full | before the first forward |",
             "|---" * (len(STAGES) + 6) + "|"]
    for row in sorted((r for r in results["rows"] if not r.get("error")), key=lambda r: (r["doc_tokens"], r["mode"])):
        latency = row["latency_s"]
        total = f"{row['windows_total']:,}"
        speed = row.get("speedup_vs_full")
        speed_text = "—" if speed is None else f"{speed:,.1f}×{' (full predicted)' if row.get('speedup_predicted') else ''}"
        share = row.get("before_forward_share")
        mode = row["mode"] + (" (predicted)" if row.get("predicted") else "")
        if row.get("resolved_mode") and row["resolved_mode"] != row["mode"]:
            mode += f" → {row['resolved_mode']}"
        peak = row.get("host_peak_rss_bytes")
        lines.append(f"| {row['doc_tokens']:,} | {mode} | {row['windows_read']:,} / {total} | "
                     + " | ".join(format_seconds(latency.get(s)) for s in STAGES)
                     + f" | {'—' if peak is None else f'{peak / GB:.2f}'} | {speed_text} | "
                     + ("—" if share is None else f"{share:.1%}") + " |")
    errors = [r for r in results["rows"] if r.get("error")]
    for row in errors:
        lines.append(f"\nFailed: {row['mode']} at {row['doc_tokens']:,} tokens: {row['error']}")
    return "\n".join(lines) + "\n"


def plot(results: dict, path: Path) -> None:
    """Total seconds against document tokens, log-log, one line per mode (predicted points hollow)."""
    import matplotlib  # deferred: heavy, and only the chart needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # deferred with matplotlib, after choosing the backend

    figure, axis = plt.subplots(figsize=(6.5, 4.5))
    for mode in dict.fromkeys(r["mode"] for r in results["rows"] if not r.get("error")):
        rows = sorted((r for r in results["rows"] if r.get("mode") == mode and not r.get("error")),
                      key=lambda r: r["doc_tokens"])
        xs, ys = [r["doc_tokens"] for r in rows], [r["latency_s"]["total"] for r in rows]
        line, = axis.plot(xs, ys, marker="o", label=mode)
        for r in rows:
            if r.get("predicted"):
                axis.plot([r["doc_tokens"]], [r["latency_s"]["total"]], marker="o", markerfacecolor="white",
                          color=line.get_color())
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("document tokens")
    axis.set_ylabel("seconds per question (hollow: predicted)")
    axis.set_title(f"{results['model']} {results['profile']} on {results['machine']['cpu_model']}", fontsize="small")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write_reading_report(out_dir: Path, results: dict) -> None:
    add_ratios(results["rows"])
    (out_dir / "reading.json").write_text(json.dumps(results, indent=2))
    (out_dir / "reading.md").write_text(format_markdown(results))
    plot(results, out_dir / "reading.png")
