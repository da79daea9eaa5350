"""The reading children's bounds (`reader_children.ReaderChildren`), seen through HTML pages: so many at once,
memory in proportion to the page and one budget for all, a bounded wait in line with the place heard, and a cancel
that ends the child at once."""

from __future__ import annotations

import threading
import time

import psutil
import pytest

from longqa_core import html_files
from longqa_core.files import read_document
from longqa_core.errors import Cancelled, DocumentError
from longqa_core.reader_children import ReaderChildren

MIB = 2**20
SLEEPING_WORKER = "import sys, time; time.sleep(float(sys.stdin.read().split('<!--')[1].split('-->')[0]))"


def sleeping_page(seconds: float) -> bytes:
    """A page that `SLEEPING_WORKER` takes `seconds` to "read" (it then prints nothing: no text)."""
    return f"<p>x</p><!--{seconds}-->".encode()


@pytest.fixture
def readers(monkeypatch):
    """This test's own bounds, and a worker that sleeps instead of parsing."""
    pool = ReaderChildren(readers=1, memory_bytes=512 * MIB, max_waiting=2)
    monkeypatch.setattr(html_files, "READERS", pool)
    monkeypatch.setattr(html_files, "_HTML_WORKER", SLEEPING_WORKER)
    return pool


def read_in_thread(page: bytes, name: str, outcome: dict, **kwargs) -> threading.Thread:
    def read():
        began = time.monotonic()
        try:
            read_document(page, name=name, **kwargs)
            outcome[name] = "read"
        except Exception as exc:  # noqa: BLE001 - the outcome is what the test checks
            outcome[name] = exc
        outcome[f"{name} s"] = time.monotonic() - began

    thread = threading.Thread(target=read)
    thread.start()
    return thread


def my_children() -> list[psutil.Process]:
    return psutil.Process().children(recursive=True)


def test_a_child_may_use_memory_in_proportion_to_its_page_and_no_more_than_all_share():
    pool = ReaderChildren(memory_bytes=1024 * MIB)
    assert html_files.html_memory_cap(0, pool) == html_files.HTML_BASE_MEMORY_BYTES
    assert html_files.html_memory_cap(MIB, pool) == (html_files.HTML_BASE_MEMORY_BYTES
                                                     + html_files.HTML_MEMORY_PER_BYTE * MIB)
    assert html_files.html_memory_cap(50 * MIB, pool) == 1024 * MIB


@pytest.mark.slow
def test_dense_markup_is_refused_when_over_its_proportional_cap_and_read_under_it(monkeypatch):
    page = b"<p><b><i><u><s>x</p>" * 50_000  # 1 MB that lexbor needs about 190 MB for
    monkeypatch.setattr(html_files, "HTML_MEMORY_PER_BYTE", 40)
    with pytest.raises(DocumentError, match=r"needs more than the 0\.1 GB of memory that reading a page of 1\.0 MB"):
        read_document(page, name="dense.html")
    monkeypatch.setattr(html_files, "HTML_MEMORY_PER_BYTE", 256)
    assert read_document(page, name="dense.html").text.count("x") == 50_000


@pytest.mark.slow
def test_reads_past_the_readers_wait_their_turn_in_order_hearing_their_place(readers):
    outcome, heard = {}, []
    threads = [read_in_thread(sleeping_page(0.6), "first.html", outcome)]
    time.sleep(0.2)
    threads.append(read_in_thread(sleeping_page(0.1), "second.html", outcome, on_wait=heard.append))
    peak = 0
    while any(t.is_alive() for t in threads):
        peak = max(peak, readers.running())
        time.sleep(0.02)
    assert peak == 1
    assert heard and heard[0] == 1  # the first one runs ahead of it
    assert outcome["second.html s"] > 0.4  # it waited for the first
    assert all("only whitespace" in str(outcome[n]) for n in ("first.html", "second.html"))


@pytest.mark.slow
def test_reads_past_the_waiting_bound_are_refused_at_once(readers):
    outcome = {}
    threads = [read_in_thread(sleeping_page(0.5), f"p{i}.html", outcome) for i in range(3)]
    time.sleep(0.3)
    began = time.monotonic()
    with pytest.raises(DocumentError, match=r"'late\.html' cannot be read now: 1 document is being read and 2 "
                                            r"wait, the most this server takes"):
        read_document(sleeping_page(0.1), name="late.html")
    assert time.monotonic() - began < 0.2
    for thread in threads:
        thread.join(10)


@pytest.mark.slow
def test_a_cancel_ends_the_child_at_once(readers):
    stop = threading.Event()
    outcome = {}
    thread = read_in_thread(sleeping_page(30), "slow.html", outcome, should_stop=stop.is_set)
    time.sleep(0.5)
    assert readers.running() == 1 and my_children()
    stop.set()
    began = time.monotonic()
    thread.join(5)
    assert time.monotonic() - began < 1.0
    assert isinstance(outcome["slow.html"], Cancelled), outcome
    assert str(outcome["slow.html"]) == "The request was stopped while reading 'slow.html'."
    assert not my_children() and readers.running() == 0


@pytest.mark.slow
def test_a_cancel_or_the_time_limit_ends_a_wait_in_line(readers):
    outcome = {}
    first = read_in_thread(sleeping_page(2.0), "first.html", outcome)
    time.sleep(0.2)
    stop = threading.Event()
    waiting = read_in_thread(sleeping_page(0.1), "stopped.html", outcome, should_stop=stop.is_set)
    timed = read_in_thread(sleeping_page(0.1), "timed.html", outcome, max_read_s=0.5)
    time.sleep(0.3)
    stop.set()
    waiting.join(2)
    timed.join(2)
    assert str(outcome["stopped.html"]) == "The request was stopped while waiting to read 'stopped.html'."
    assert "waiting for a document reader" in str(outcome["timed.html"]) and "time limit of 0.5 s" in str(
        outcome["timed.html"])
    assert readers.waiting() == 0
    first.join(5)
