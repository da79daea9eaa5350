"""Issue 61's ways around the door, each against `python app.py --model demo` as a user starts it, under
--lock-profile, or behind a proxy header (`bench.crowd.door_attacks`): the rows of docs/results/crowd-door.json. Run as
`python scripts/measure_crowd.py --attacks door [--door-attacks NAMES]`."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.crowd import crowd_attacks, crowd_check, load_check  # noqa: E402
from bench.crowd import door_attacks as door  # noqa: E402
from scripts.crowd_runs import MB, attack_row, measured_attacks, visitor  # noqa: E402


# The door attacks by the name `--door-attacks` picks them with (each run as a user starts the app and under
# --lock-profile, or behind the proxy header where PROXY_DOOR_ATTACKS has it).
DOOR_ATTACKS = {"direct": "45 full reads of 2 MB posted to gradio's direct route",
                "bodies": "two 100 MB questions, a 200 MB pasted text and a 40 MB question at once",
                "fresh": "5,000 fresh-session /plan joins",
                "long-read": "2,600 fresh-session /plan joins during a visitor's 4 MB full read",
                "recording": "the recording route, a file by web address, the monitoring summary",
                "stop": "SIGTERM with three 4 MB full reads in flight",
                "hops": "6 clients behind one address, each making up its first hop (behind the proxy header)",
                "proxy-fresh": "5,000 fresh-session /plan joins from one address behind the proxy header"}
PROXY_DOOR_ATTACKS = {"hops", "proxy-fresh"}


def door_attacks(work: Path, picks: set[str] | None = None) -> dict:
    """Issue 61's six ways around the door, each against `python app.py --model demo` as a user starts it and under
    --lock-profile (the made-up hops against a server behind a proxy header): 45 full reads of 2 MB posted to
    gradio's direct route, each client gone after 3 s; two 100 MB questions, a 200 MB pasted text and a 40 MB
    question at once; 5,000 fresh-session /plan joins; 2,600 of them during a visitor's 4 MB full read; ten 50 MB
    posts to the recording route, a file named by a web address and the monitoring summary; six clients making up
    their first hop behind one address, and 5,000 fresh-session joins from one address there; and SIGTERM with three
    full reads of 4 MB in flight. `picks`: only these of DOOR_ATTACKS (a server is started only for a setting one of
    them runs in)."""
    two_mb, four_mb = work / "two-mb.txt", work / "four-mb.txt"
    two_mb.write_text(crowd_check.fact_text(2 * MB, 7))
    four_mb.write_text(crowd_check.fact_text(4 * MB, 7))
    text = two_mb.read_text()
    plan = ["demo", "T4", None, 1, None, None, None, False, None]
    rows, alone, stops = {}, {}, {}
    picks = set(DOOR_ATTACKS) if picks is None else set(picks)
    for setting in ("--no-lock-profile", "--lock-profile", "--visitor-header=X-Forwarded-For"):
        behind_proxy = setting.startswith("--visitor-header")
        if not picks & (PROXY_DOOR_ATTACKS if behind_proxy else set(DOOR_ATTACKS) - PROXY_DOOR_ATTACKS):
            continue
        name = {"--no-lock-profile": "", "--lock-profile": " (--lock-profile)"}.get(setting, " (X-Forwarded-For)")
        uploads = work / f"uploads{setting.replace('=', '-')}"
        shutil.rmtree(uploads, ignore_errors=True)
        uploads.mkdir()
        server, url = crowd_attacks.start_demo_server(uploads, setting)
        try:
            visitor(url)()
            alone[setting] = round(visitor(url)()[1], 2)
            if behind_proxy:
                if "hops" in picks:
                    rows["6 clients behind one address, each making up its first hop" + name] = attack_row(
                        door.spoofed_first_hops(url, server.pid, four_mb, visitor(url)))
                if "proxy-fresh" in picks:
                    rows["5,000 /plan joins, each from a fresh session, one address behind the proxy" + name] = (
                        attack_row(door.fresh_session_joins(url, server.pid, "plan", plan, visitor(url),
                                                                     joins=5000,
                                                                     headers={"X-Forwarded-For": "81.2.69.142"})))
                continue
            if "direct" in picks:
                rows["45 full reads of 2 MB posted to /gradio_api/run/ask, each client gone after 3 s" + name] = (
                    attack_row(door.direct_reads(url, server.pid, text, visitor(url))))
            if "bodies" in picks:
                rows["two 100 MB questions, a 200 MB pasted text and a 40 MB question at once" + name] = attack_row(
                    door.large_bodies(url, server.pid, visitor(url)))
            if "fresh" in picks:
                rows["5,000 /plan joins, each from a fresh session" + name] = attack_row(
                    door.fresh_session_joins(url, server.pid, "plan", plan, visitor(url), joins=5000))
            if "long-read" in picks:
                long_read = door.long_read_visitor(url, four_mb)
                right, long_alone, seen = long_read()
                alone[f"{setting} 4 MB full read"] = {"s": round(long_alone, 2), "right": right, **seen}
                rows["2,600 fresh-session /plan joins during a visitor's 4 MB full read" + name] = attack_row(
                    door.fresh_session_joins(url, server.pid, "plan", plan, long_read, joins=2600))
            if "recording" in picks:
                rows["ten 50 MB posts to /gradio_api/process_recording, a file by web address, /monitoring/summary"
                     + name] = attack_row(door.recording_and_remote_files(url, server.pid, uploads,
                                                                                   visitor(url)))
            if "stop" in picks:
                stops[setting] = door.stop_during_reads(server, url, four_mb, uploads)
        finally:
            if server.poll() is None:
                load_check.stop_server(server)
    return {"visitor_alone_s": alone, "rows": rows, "sigterm_with_reads_in_flight": stops}


def main_door(out: Path, picks: set[str] | None = None) -> int:
    """All of the door's attacks, written to `out`; or only `picks`, whose rows (and the visitor's time alone, the
    stops) replace theirs in `out`, each row noted in its `re_measured` with the commit, machine and load."""
    result = measured_attacks(out, "crowd-door", lambda work: door_attacks(work, picks),
                              "defaults, direct connection, `python app.py --model demo` (--lock-profile or "
                              "--visitor-header X-Forwarded-For where named)", merge=picks is not None)
    print("| attack | visitor's longest wait (median, asks) | refused asks | RSS idle | peak, after (above idle) | "
          "the attack's calls |\n|---|---|---|---|---|---|")
    for name, row in result["rows"].items():
        print(f"| {name} | {row['visitor_s']} s ({row.get('visitor_median_s')} s, {row.get('visitor_asks')}) | "
              f"{row.get('visitor_refused')} {row['visitor_error'] or ''} | {row['rss_idle_mb']} MB | "
              f"{row['rss_peak_above_idle_mb']:+} MB, {row['rss_after_above_idle_mb']:+} MB | {row['crowd']} "
              f"{row.get('joins', '')} {row.get('joins_refused', '')} {row.get('statuses', '')} "
              f"{row.get('cpu_s_after_posts', '')} {row['refusals'][:2]} |")
    print(json.dumps(result["sigterm_with_reads_in_flight"], indent=2))
    return 0
