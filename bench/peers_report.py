"""The peers' record as a reader sees it: each system's median against the project's, and the Markdown table.
Divides and formats; measures nothing (`bench.peers` does) and imports none of the peers' packages.
"""

from __future__ import annotations

NOT_RUN = ("missing", "skipped", "failed")


def ratios_to_project(systems: list[dict]) -> dict[str, float | None]:
    """Each measured system's median over the project's (2.0: twice the project's time); None where either has
    no median."""
    project = next((row for row in systems if row["name"] == "project" and row.get("median_s")), None)
    return {row["name"]: (row["median_s"] / project["median_s"] if project and row.get("median_s") else None)
            for row in systems}


def seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def times(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def gigabytes(value: int | None) -> str:
    return "—" if value is None else f"{value / 1e9:.1f}"


def agreement_cells(row: dict) -> list[str]:
    found = row.get("agreement")
    if not found:
        return ["—", "—", "—"]
    same = "/".join("yes" if found[key] else "no" for key in ("same_start_argmax", "same_end_argmax"))
    return [f"{found['max_abs_start_diff']:.3g}", f"{found['max_abs_end_diff']:.3g}", same]


def machine_line(result: dict) -> str:
    machine, versions = result["machine"], result["machine"]["versions"]
    installed = ", ".join(f"{name} {version}" for name, version in versions.items() if version)
    absent = [name for name, version in versions.items() if not version]
    load = machine["load_average_before"][0], machine["load_average_after"][0]
    flags = ", ".join(machine["cpu_flags"]) or "none of the listed flags"
    return (f"CPU: {machine['cpu_model']}, kind {machine['kind']} ({flags}), {result['threads']} "
            f"threads for every system; {installed}"
            f"{'; not installed: ' + ', '.join(absent) if absent else ''}; commit {result.get('commit') or '?'}; "
            f"load average {load[0]:.1f} before, {load[1]:.1f} after.")


def markdown(result: dict) -> str:
    systems = result["systems"]
    ratio = ratios_to_project(systems)
    measured = [row for row in systems if row["status"] == "ok"]
    lines = [f"# Peers: one window of {result['model']} ({result['machine']['kind']})", "",
             f"`{result['command']}`", "", machine_line(result), "",
             f"One window of {result['tokens']:,} tokens (random weights of the real shapes). Each system in its own "
             f"process: it prepares, calls the window once (\"first call\": where a system compiles, it compiles "
             f"then) and {result['warmup']} more time(s) untimed; then {result['rounds']} round(s) of one forward per "
             f"system in turn, {result['pause_between_forwards_s']:g} s apart, each timed in its own process. Median "
             f"and min of the rounds; × project is the median over the project's. Logits against "
             f"`{result['reference']}`'s first call: the largest |difference| of start and end logits, and whether the "
             "best start and end token are the same. Peak RSS: the system's process at its highest, preparing "
             "included (an export or a conversion peaks far above the forward).", "",
             "| system | median s | min s | × project | first call s | prepared in s | peak RSS GB | "
             "max \\|Δ start\\| | max \\|Δ end\\| | same best start/end |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in measured:
        lines.append("| " + " | ".join([f"`{row['name']}`", seconds(row["median_s"]), seconds(row["min_s"]),
                                         times(ratio[row["name"]]), seconds(row.get("first_call_s")),
                                         seconds(row.get("prepare_s")), gigabytes(row.get("peak_rss_bytes")),
                                         *agreement_cells(row)]) + " |")
    not_run = [row for row in systems if row["status"] in NOT_RUN]
    if not_run:
        lines += ["", "Not measured:", ""]
        lines += [f"- `{row['name']}` ({row['description']}): {row['status']}: {row['error']}" for row in not_run]
    lines += ["", "What each system is:", ""]
    for row in systems:
        notes = "; ".join(row.get("notes") or [])
        lines.append(f"- `{row['name']}`: {row['description']}{'. ' + notes if notes else ''}")
    return "\n".join(lines) + "\n"
