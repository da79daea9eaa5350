"""The table of `bench.first_answer`'s measurement: each read's seconds a window, first candidate and end,
against what its plan expected, and the sized guided read against the whole-window one (medians of the rounds,
side by side). It formats; it measures nothing."""

from __future__ import annotations

import statistics


def _seconds(value: float | None) -> str:
    return "–" if value is None else f"{value:,.1f} s"


def read_name(row: dict) -> str:
    if row["mode"] == "full":
        return "full read"
    sized = row["passage_window_tokens"]
    return f"guided, windows sized to the passage ({sized:,} tokens)" if sized else "guided, whole windows"


def summary(result: dict) -> list[dict]:
    """One line per read kind: the medians of its rounds."""
    kinds: dict[str, list[dict]] = {}
    for row in result["rows"]:
        kinds.setdefault(read_name(row), []).append(row)

    def median(rows: list[dict], key: str) -> float | None:
        values = [r[key] for r in rows if r.get(key) is not None]
        return statistics.median(values) if values else None
    return [{"read": name, "rounds": len(rows), "windows": f"{rows[0]['windows_read']} of {rows[0]['windows_total']}",
             "window_passes": rows[0]["window_passes"], "window_tokens": rows[0]["window_tokens"],
             **{key: median(rows, key) for key in ("seconds_per_window", "first_candidate_s", "total_s",
                                                   "expected_s", "forward_s")},
             "answer": rows[0]["answer"], "answer_start": rows[0]["answer_start"]} for name, rows in kinds.items()]


def markdown(result: dict) -> str:
    machine = result["machine"]
    lines = [f"# Time to a first answer: {result['model']} on `{result['profile']}`, a {result['pages']}-page PDF",
             "",
             f"{machine['cpu_model']}, {result['threads']} threads, load average "
             f"{machine['load_average_start'][0]:.1f} at the start and {result['load_average_end'][0]:.1f} at the "
             f"end; {result['chars']:,} characters read from the PDF in {result['extract_s']:.2f} s. "
             f"`{result['command']}`",
             "",
             "| read | windows read | window passes | tokens a window | s a window | first candidate | end | "
             "expected (forward) | forward took | top answer (start) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for line in summary(result):
        lines.append(f"| {line['read']} | {line['windows']} | {line['window_passes']} | {line['window_tokens']:,} | "
                     f"{_seconds(line['seconds_per_window'])} | {_seconds(line['first_candidate_s'])} | "
                     f"{_seconds(line['total_s'])} | {_seconds(line['expected_s'])} | "
                     f"{_seconds(line['forward_s'])} | {line['answer']!r} ({line['answer_start']}) |")
    return "\n".join(lines) + "\n"
