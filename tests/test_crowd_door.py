"""Issue 61's ways around the door, against a real server (`python app.py --model demo`, default settings,
loopback), smaller than docs/serving.md's: reads posted to gradio's direct route, questions and pasted texts of
hundreds of MB, fresh-session joins (refused past the address's budget of new sessions), the recording route with a
file by web address and the monitoring summary; then, on a server behind a proxy (`--visitor-header`), made-up
first hops behind one address, and SIGTERM with reads in flight. The other visitor is never refused and waits
within the test margin of its target (`crowd_check.VISITOR_WAIT_TARGET_S`, `TEST_MARGIN`); memory and disk come
back."""

from __future__ import annotations

import pytest

from bench.crowd import crowd_attacks, crowd_check, door_attacks, load_check
from longqa.session import SAMPLES_DIR

pytestmark = pytest.mark.slow
MB = 2**20
PLAN = ["demo", "T4", None, 1, None, None, None, False, None]


@pytest.fixture(scope="module")
def uploads(tmp_path_factory):
    return tmp_path_factory.mktemp("gradio-uploads")


@pytest.fixture(scope="module")
def server(uploads):
    process, url = crowd_attacks.start_demo_server(uploads)
    try:
        visitor(url)()  # warm
        yield process, url
    finally:
        load_check.stop_server(process)


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("texts") / "one-mb.txt"
    path.write_text(crowd_check.fact_text(MB, 7))
    return path


def visitor(url):
    return crowd_check.sample_visitor(url, SAMPLES_DIR)


def served_within_target(out: crowd_attacks.AttackOutcome) -> None:
    assert out.visitor_error is None and out.visitor_right, out
    assert out.extra.get("visitor_refused", 0) == 0, out.extra
    bound = crowd_check.TEST_MARGIN * crowd_check.VISITOR_WAIT_TARGET_S
    assert out.visitor_s < bound, f"the visitor waited {out.visitor_s:.1f} s"


def test_reads_posted_to_gradios_direct_route_are_refused_and_nothing_reads_on(server, text_file):
    process, url = server
    out = door_attacks.direct_reads(url, process.pid, text_file.read_text(), visitor(url), posts=6, threads=3,
                                     quiet_window_s=3.0)
    served_within_target(out)
    assert out.extra["statuses"] == {"404": 6}, out.extra
    assert out.extra["cpu_s_after_posts"] < 1.5, out.extra  # a read going on for nobody would use both cores


def test_questions_and_pasted_texts_of_hundreds_of_mb_are_refused_by_their_length(server):
    process, url = server
    out = door_attacks.large_bodies(url, process.pid, visitor(url), question_mb=100.0, pasted_mb=200.0, at_once=2)
    served_within_target(out)
    assert sum("HTTP 413" in reply for reply in out.crowd) == 3, out.crowd
    assert out.rss_peak - out.rss_idle < 0.5 * 2**30 and out.rss_after - out.rss_idle < 0.2 * 2**30, out


def test_fresh_session_joins_past_the_budget_are_refused_and_keep_no_page_state_worth_counting(server):
    process, url = server
    out = door_attacks.fresh_session_joins(url, process.pid, "plan", PLAN, visitor(url), joins=600, threads=12,
                                            settle_s=3.0)
    served_within_target(out)  # a fresh client each ask, on the same address: its heartbeat heard, never refused
    assert out.extra["joins"] == 600 and out.extra["joins_refused"] >= 200, out.extra
    assert out.extra["join_refusal"].startswith("refused: 429") and "new sessions" in out.extra["join_refusal"], out
    assert out.rss_after - out.rss_idle < 100 * MB, out  # gradio's own copies kept about 150 MB for 600 (issue 61)


def test_the_recording_route_a_file_by_web_address_and_the_monitoring_summary_are_closed(server, uploads):
    process, url = server
    before = crowd_check.folder_bytes(uploads)
    out = door_attacks.recording_and_remote_files(url, process.pid, uploads, visitor(url), posts=2, file_mb=5.0)
    served_within_target(out)
    assert sum("recording: HTTP 404" in reply for reply in out.crowd) == 2, out.crowd
    assert any(reply.startswith("remote file: refused: 'Documents' names a file by a web address")
               for reply in out.crowd), out.crowd
    assert "monitoring summary: HTTP 403" in out.crowd
    assert out.extra["folder_after"] <= before + MB, (before, out.extra)


@pytest.fixture(scope="module")
def proxied(tmp_path_factory):
    """A server behind a proxy (`--visitor-header X-Forwarded-For`), its uploads in a folder of its own. The SIGTERM
    test, the last of this module, ends it: the spoofed hops' test needs such a server, the stop any server."""
    folder = tmp_path_factory.mktemp("proxied-uploads")
    process, url = crowd_attacks.start_demo_server(folder, "--visitor-header", "X-Forwarded-For")
    try:
        yield process, url, folder
    finally:
        load_check.stop_server(process)


def test_clients_making_up_their_first_hop_behind_one_address_get_one_visitors_share(proxied, text_file):
    process, url, _ = proxied
    out = door_attacks.spoofed_first_hops(url, process.pid, text_file, visitor(url), clients=6)
    served_within_target(out)
    refused = [o for o in out.crowd if o.startswith("refused: You already have")]
    assert len(refused) == 3, out.crowd  # the lane's three a visitor, whatever each client wrote first


def test_sigterm_ends_the_server_within_seconds_with_reads_in_flight(proxied, tmp_path):
    process, url, folder = proxied
    path = tmp_path / "four-mb.txt"
    path.write_text(crowd_check.fact_text(4 * MB, 7))  # about 24 s a full read here: it must not be waited for
    try:
        stopped = door_attacks.stop_during_reads(process, url, path, folder, clients=3, after_s=3.0)
    finally:
        if process.poll() is None:
            process.kill()
    assert stopped["reads_in_flight"] >= 1 and stopped["exit_code"] == 0, stopped
    assert stopped["ended_after_s"] < crowd_check.TEST_MARGIN * crowd_check.STOP_TARGET_S, stopped
    assert stopped["folder_after"] < 4 * MB, stopped  # the uploads read were deleted as the server stopped
