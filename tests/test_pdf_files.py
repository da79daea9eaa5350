"""PDF text extraction in a child of the readers' pool (issue 48): a page that inflates past its memory cap is
refused, Stop and the time limit end the child, the memory goes with it, and ordinary PDFs read as before."""

from __future__ import annotations

import signal
import threading
import time

import psutil
import pytest

from bench.crowd.crowd_attacks import inflating_pdf
from longqa_core import pdf_files
from longqa_core.documents import DEFAULT_MAX_READ_S
from longqa_core.files import read_document
from longqa_core.errors import Cancelled, DocumentError
from longqa_core.reader_children import ReaderChildren
from tests.generated_pdfs import text_pdf

MIB = 2**20


@pytest.fixture(scope="module")
def hostile_pdf() -> bytes:
    return inflating_pdf(70_000_000)  # one page, about 200 KB, that PDFium cannot read within 0.26 GB


def my_children() -> list[psutil.Process]:
    return psutil.Process().children(recursive=True)


def read_in_thread(data: bytes, name: str, outcome: dict, **kwargs) -> threading.Thread:
    def read():
        try:
            outcome[name] = read_document(data, name=name, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the outcome is what the test checks
            outcome[name] = exc

    thread = threading.Thread(target=read)
    thread.start()
    return thread


@pytest.mark.slow
def test_a_page_that_inflates_past_the_childs_memory_cap_is_refused_and_leaves_nothing_behind(monkeypatch):
    monkeypatch.setattr(pdf_files, "PDF_BASE_MEMORY_BYTES", 96 * MIB)  # PDFium itself fits; 8 MB of operators not
    rss_before = psutil.Process().memory_info().rss
    began = time.monotonic()
    with pytest.raises(DocumentError, match=r"^'bomb\.pdf' could not be read: its PDF needs more than the 0\.094 GB "
                                            r"of memory that reading a file of 0\.0 MB may use\.$"):
        read_document(inflating_pdf(8_000_000), name="bomb.pdf")
    assert time.monotonic() - began < 15  # about 2 s, 3x that on a busy machine
    assert not my_children()
    assert psutil.Process().memory_info().rss - rss_before < 64 * MIB  # the parser's memory went with the child


@pytest.mark.slow
def test_stop_ends_the_pdf_child_within_a_second(hostile_pdf, monkeypatch):
    monkeypatch.setattr(pdf_files, "READERS", ReaderChildren(memory_bytes=1024 * MIB))
    monkeypatch.setattr(pdf_files, "PDF_BASE_MEMORY_BYTES", 1024 * MIB)  # room to parse: only Stop ends it
    stop, outcome = threading.Event(), {}
    thread = read_in_thread(hostile_pdf, "bomb.pdf", outcome, should_stop=stop.is_set)
    deadline = time.monotonic() + 10
    while not my_children() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(1.5)  # inside PDFium's parse of the page, which nothing interrupts
    assert my_children()
    stop.set()
    stopped = time.monotonic()
    thread.join(10)
    assert time.monotonic() - stopped < 3.0  # 0.1 s polling; a second at most, 3x that on a busy machine
    assert str(outcome["bomb.pdf"]) == "The request was stopped while reading 'bomb.pdf'."
    assert isinstance(outcome["bomb.pdf"], Cancelled) and not my_children()


@pytest.mark.slow
def test_the_time_limit_kills_a_child_stuck_inside_one_page(hostile_pdf, monkeypatch):
    monkeypatch.setattr(pdf_files, "READERS", ReaderChildren(memory_bytes=1024 * MIB))
    monkeypatch.setattr(pdf_files, "PDF_BASE_MEMORY_BYTES", 1024 * MIB)  # room to parse: only the time stops it
    began = time.monotonic()
    with pytest.raises(DocumentError, match=r"^'bomb\.pdf': reading stopped after [\d.]+ s \((extracting its text|"
                                            r"on page 1 of 1 pages, [\d,]+ characters read)\), over the time limit "
                                            r"of 1 s for reading documents\.$"):
        read_document(hostile_pdf, name="bomb.pdf", max_read_s=1.0)
    assert time.monotonic() - began < 3 * (1.0 + pdf_files.PDF_GRACE_S)
    assert not my_children()


def test_a_pdf_is_read_in_a_child_whose_crash_is_a_document_error(monkeypatch):
    monkeypatch.setattr(pdf_files, "_PDF_WORKER", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    with pytest.raises(DocumentError, match=rf"^'crash\.pdf' could not be read: the PDF reader stopped on it \(signal "
                                            rf"{signal.SIGSEGV.value}\)\.$"):
        read_document(text_pdf("Hello"), name="crash.pdf")


@pytest.mark.slow
def test_ordinary_pdfs_read_in_the_child_as_they_did_in_process():
    pages = [f"Page {n}: the fee is {n * 11} dollars.\nSigned in Paris." for n in range(1, 41)]
    data = text_pdf(*pages)
    document = read_document(data, name="contract.pdf")
    text, page_starts, *_ = pdf_files.extract_pdf_text(data, "contract.pdf", pdf_files.ReadLimits())
    assert (document.text, document.page_starts) == (text, tuple(page_starts))
    assert document.text == "\n\n".join(pages)
    assert [document.text[start:].split("\n")[0] for start in document.page_starts] == [
        page.split("\n")[0] for page in pages]


@pytest.mark.slow
def test_the_hostile_page_with_default_limits_ends_within_the_read_limit(hostile_pdf):
    began = time.monotonic()
    with pytest.raises(DocumentError, match="(needs more than the 0.26 GB of memory|over the time limit of 30 s)"):
        read_document(hostile_pdf, name="bomb.pdf", max_chars=16_000_000)
    assert time.monotonic() - began < DEFAULT_MAX_READ_S + 15
    assert not my_children()


@pytest.mark.slow
def test_the_childs_time_limit_counts_from_when_the_request_began_reading(monkeypatch):
    # 0.02 s of the request's 5.5 left when the child is started: starting it (the interpreter, pypdf) takes longer;
    # the parent waits long enough for the child's own check, which names the page, on a busy machine too
    monkeypatch.setattr(pdf_files, "PDF_GRACE_S", 30.0)
    limits = pdf_files.ReadLimits(max_read_s=5.5, began=time.perf_counter() - 5.48)
    with pytest.raises(DocumentError, match=r"^'late\.pdf': reading stopped after [\d.]+ s \(on page 1 of 3 pages, 0 "
                                            r"characters read\), over the time limit of 5\.5 s"):
        pdf_files.read_pdf_file(text_pdf("one", "two", "three"), "late.pdf", limits)
