"""Issue 40's crowds against a served app (loopback, gradio_client, bounded in count and time): guided reads that
fall back to reading everything, many requests indexing large uploads, and the memory a server keeps after work.
Each checks the issue's targets: a normal visitor answered within 10 s, the server within +2.5 GB of idle during the
crowd and back within +0.5 GB after; a request cancelled while it tokenizes or indexes 6 MB, or while it decodes
emoji, stops within a second of the server's CPU time; and 2 MB of emoji is answered or refused in seconds."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import psutil
import pytest

from gradio_client import Client, handle_file

import app
from page.context import make_context
from page.layout import build_blocks
from page import asking
import longqa_core.reading
import longqa_core.spans
import longqa_core.windows
from bench.crowd import crowd_check, load_check
from longqa.session import SAMPLES_DIR, Session

# The crowd targets (crowd_check's, reported in docs/) times the margin a busy machine needs.
VISITOR_WAIT_BOUND_S = crowd_check.TEST_MARGIN * crowd_check.VISITOR_WAIT_TARGET_S
CANCEL_CPU_BOUND_S = crowd_check.TEST_MARGIN * crowd_check.CANCEL_CPU_TARGET_S

pytestmark = pytest.mark.slow
MB = 1024 * 1024
GB = 1024 * MB


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    os.environ.setdefault("GRADIO_TEMP_DIR", str(tmp_path_factory.mktemp("gradio")))  # not another run's uploads
    ctx = make_context(Session(), models=["demo"], default_model="demo", default_profile="cpu")
    asking.ensure_loaded(ctx)
    demo = build_blocks(ctx)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True, max_file_size=50 * MB)
    try:
        visitor = crowd_check.sample_visitor(url, SAMPLES_DIR)
        visitor()  # warm
        yield ctx, url, visitor
    finally:
        demo.close()


def lane_is_idle(ctx) -> bool:
    return ctx.lane.waiting() == 0 and not ctx.lane.is_busy()


def is_clear(outcome: str) -> bool:
    return outcome in ("answered", "cancelled") or (outcome.startswith("refused: ") and len(outcome) > 40)


class LaneWatch:
    """Samples the lane while a crowd runs: the most large requests in progress at once, and the requests seen
    waiting to read everything after a guided read."""

    def __init__(self, lane):
        self.lane, self.most_large, self.widened = lane, 0, set()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._done.wait(0.05):
            with self.lane._condition:
                tickets = list(self.lane._tickets)
                self.most_large = max(self.most_large, sum(t.active and not t.exclusive and t.windows > 0
                                                           and not self.lane.is_small(t) for t in tickets))
                self.widened |= {id(t) for t in tickets if t.widened_after_s is not None}

    def stop(self):
        self._done.set()
        self._thread.join(5)
        return self


def test_guided_reads_that_fall_back_are_admitted_as_full_reads(served, tmp_path):
    ctx, url, visitor = served
    crowd = []
    for i in range(6):  # six fresh clients, each its own 1 MB text naming the entity once and stating nothing
        crowd.append(tmp_path / f"entity{i}.txt")
        crowd[-1].write_text(crowd_check.entity_once_text(MB) + f" Copy {i}.")
    watch = LaneWatch(ctx.lane)
    outcome = crowd_check.run_crowd(url, os.getpid(), crowd, visitor, reading="guided", visitor_after_s=4.0,
                                    wait_answers_s=4.0, settle_s=60.0, idle=lambda: lane_is_idle(ctx))
    watch.stop()
    assert outcome.visitor_error is None and outcome.visitor_right, outcome
    assert outcome.visitor_s < VISITOR_WAIT_BOUND_S, \
        f"the visitor waited {outcome.visitor_s:.1f} s behind the guided crowd"
    assert len(watch.widened) >= 3  # the crowd did fall back, and waited to
    assert watch.most_large <= ctx.lane.max_active  # no more full reads at once than the lane allows
    assert all(is_clear(o) for o in outcome.crowd), outcome.crowd
    assert outcome.rss_peak - outcome.rss_idle < 2.5 * GB
    assert outcome.rss_after - outcome.rss_idle < GB // 2
    assert lane_is_idle(ctx)


def test_ten_clients_indexing_two_uploads_build_their_own_indexes_and_a_visitor_waits_little(served, tmp_path):
    ctx, url, visitor = served
    texts = [crowd_check.fact_text(2 * MB, 4100 + u) for u in range(2)]
    crowd = []
    for i in range(10):  # ten fresh clients, two different 2 MB uploads, guided: the cost is the ranking index
        crowd.append(tmp_path / f"upload{i}.txt")
        crowd[-1].write_text(texts[i % 2])
    builds = ctx.session.index_cache.builds
    outcome = crowd_check.run_crowd(url, os.getpid(), crowd, visitor, reading="guided", visitor_after_s=1.0,
                                    wait_answers_s=20.0, settle_s=60.0, idle=lambda: lane_is_idle(ctx))
    assert outcome.visitor_error is None and outcome.visitor_right, outcome
    assert outcome.visitor_s < VISITOR_WAIT_BOUND_S, \
        f"the visitor waited {outcome.visitor_s:.1f} s behind the indexing crowd"
    # One per visitor and upload: each fresh client is a visitor of its own, whose index is never another's (issue 48
    # item 5: no timing oracle), so every client answered built its own (one the crowd's end cancelled may not have);
    # one build per key however many requests ask is tests/test_index_cache.py's.
    answered = sum(o == "answered" for o in outcome.crowd)
    assert answered <= ctx.session.index_cache.builds - builds <= len(crowd), (answered, outcome.crowd)
    assert ctx.session.index_cache.bytes <= ctx.session.index_cache.max_bytes
    assert all(is_clear(o) for o in outcome.crowd), outcome.crowd
    assert outcome.rss_peak - outcome.rss_idle < 2.5 * GB


def memory_after_full_reads(app_py, tmp_path, reads: int = 8, kb: int = 200) -> crowd_check.MemoryReturn:
    """`reads` fresh clients, four at a time (two rounds by default), each reading `kb` KB in full from `python app.py
    --model demo` (the server as it starts in production, a process of its own): its memory idle, at the peak and
    5 s after."""
    path = tmp_path / "medium.txt"
    path.write_text(crowd_check.entity_once_text(kb * 1024))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")},
           "GRADIO_TEMP_DIR": str(tmp_path / "gradio")}
    process, url = load_check.start_server(["--model", "demo", "--profile", "cpu"], app=app_py, env=env)
    try:
        def read_in_full():
            *_, readout = Client(url, verbose=False).predict([handle_file(str(path))], "",
                                                             "What is the tide of Harrowgate?", 1, "full",
                                                             api_name="/ask")
            return bool(readout["answers"]), 0.0, readout["queue"]
        read_in_full()
        time.sleep(2.0)
        return crowd_check.run_small_requests(process.pid, read_in_full, n=reads, threads=4, settle_s=5.0)
    finally:
        load_check.stop_server(process)


def test_memory_goes_back_after_every_request(tmp_path):
    out = memory_after_full_reads(Path(app.__file__), tmp_path)
    assert out.right == 8
    # 100 MB over 12 reads before, in proportion for 8 (17.5 MB measured on kind B)
    assert out.rss_settled - out.rss_idle < 67 * MB, (out.rss_settled - out.rss_idle) / MB


@pytest.mark.parametrize("stage, reading", [("tokenize", "full"), ("index", "guided")])
def test_a_request_cancelled_while_it_tokenizes_or_indexes_6_mb_stops_within_a_second(served, tmp_path, stage,
                                                                                      reading):
    """Cancelled as it enters the stage: the full read's tokenizing of its document (`make_windows`), or the
    guided read's index of its upload (`build_index`), each seconds of work for 6 MB. The server's CPU seconds, not
    wall seconds, are checked: other sessions on the machine stretch the wall time, not the work."""
    ctx, url, _ = served
    path = tmp_path / f"{stage}.txt"
    path.write_text(crowd_check.entity_once_text(6 * MB) + f" {tmp_path.name}.")  # never indexed before
    owner, name = ((longqa_core.windows, "tokenize_document") if stage == "tokenize"
                   else (longqa_core.reading, "build_index"))
    with crowd_check.watched(owner, name) as watch:
        out = crowd_check.cancel_inside(url, os.getpid(), path, watch, reading=reading)
    assert out.entered and out.stopped_inside, out  # the cancel came while the stage ran, and ended it
    assert out.cpu_to_stop_s < CANCEL_CPU_BOUND_S, out
    assert out.quiet_s is not None and out.cpu_to_quiet_s < CANCEL_CPU_BOUND_S, out  # and nothing went on after it
    assert out.outcome == "cancelled"
    deadline = time.monotonic() + 30
    while not lane_is_idle(ctx) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert lane_is_idle(ctx)


def test_a_2_mb_file_of_emoji_is_answered_or_refused_in_seconds(served, tmp_path):
    """Issue 40 item 2: 2 MB of emoji and punctuation, no letter or digit, spaced or not. Before, decoding such
    text looked at every span of every window (about 4.5 minutes for 2 MB). The server's CPU seconds are checked
    (generously), not the wall time a loaded machine stretches."""
    _, url, _ = served
    server = psutil.Process(os.getpid())
    for i, unit in enumerate(("😀🎉🧪 ", "😀🎉🧪!?…")):
        path = tmp_path / f"emoji{i}.txt"
        path.write_text(crowd_check.emoji_text(2 * MB, unit))
        cpu_before = crowd_check.process_cpu_s(server)
        asked = crowd_check.ask_timed(url, path, "What is the tide of Harrowgate?", "auto", timeout_s=300)
        cpu_s = crowd_check.process_cpu_s(server) - cpu_before
        assert is_clear(asked.outcome), asked
        assert cpu_s < 20.0, (unit, cpu_s, asked)
        assert all(any(ch.isalnum() for ch in answer) for answer in asked.answers), asked


def test_emoji_decode_in_less_than_the_model_time_and_a_cancel_while_decoding_stops_within_a_second(served,
                                                                                                      tmp_path):
    """The issue's own probe, `'😀🎉🧪 ' * 14000`, read in full. Before: 26 s of decoding after 2.2 s on the
    model, and 50 s of work after a cancel. Now its decoding takes less than its model time (the readout's seconds by
    stage, both stretched alike by a loaded machine), and a fresh copy cancelled as its windows' spans begin to be
    decoded costs the server under a second of CPU from the cancel until it went quiet."""
    ctx, url, _ = served
    asked_path, cancelled_path = tmp_path / "emoji.txt", tmp_path / "emoji-cancelled.txt"
    asked_path.write_text("😀🎉🧪 " * 14000)  # no letter or digit at all
    cancelled_path.write_text("😀🎉🧪 " * 14001)  # another upload: nothing of the first one's reused
    asked = crowd_check.ask_timed(url, asked_path, "What is the tide of Harrowgate?", "full", timeout_s=300)
    assert asked.outcome == "answered", asked
    assert asked.latency_s["decode"] < asked.latency_s["forward"], asked.latency_s
    with crowd_check.watched(longqa_core.spans, "window_candidates") as watch:
        out = crowd_check.cancel_inside(url, os.getpid(), cancelled_path, watch, reading="full")
    assert out.entered, out  # it got to decoding
    assert out.quiet_s is not None and out.cpu_to_quiet_s < CANCEL_CPU_BOUND_S, out
    assert out.outcome == "cancelled"
    deadline = time.monotonic() + 30
    while not lane_is_idle(ctx) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert lane_is_idle(ctx)


def test_the_crowd_targets_are_checked_where_they_are_measured():
    crowd = crowd_check.CrowdOutcome(True, crowd_check.VISITOR_WAIT_TARGET_S, None, None, 0, 0, 0)
    assert crowd.meets_target
    assert not crowd_check.CrowdOutcome(True, crowd_check.VISITOR_WAIT_TARGET_S + 0.1, None, None, 0, 0, 0).meets_target
    assert not crowd_check.CrowdOutcome(False, 1.0, None, None, 0, 0, 0).meets_target  # a wrong answer is no answer
    quick = crowd_check.CancelOutcome(True, True, 0.2, 0.3, 0.4, 0.5, "cancelled")
    assert quick.meets_target
    assert not crowd_check.CancelOutcome(True, True, 0.2, 0.3, 1.4, 1.2, "cancelled").meets_target
    assert not crowd_check.CancelOutcome(True, True, 0.2, 0.3, None, None, "cancelled").meets_target  # never quiet
    assert not crowd_check.CancelOutcome(True, False, 0.2, 0.3, 0.4, 0.5, "answered").meets_target
