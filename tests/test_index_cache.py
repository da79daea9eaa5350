"""The server's index cache: one build per upload whatever the crowd, builds bounded, bytes bounded, stops."""

from __future__ import annotations

import ast
import pickle
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from longqa_core import ranker, reading
from longqa_core.documents import Document
from longqa_core.errors import Cancelled
from longqa_core.index_cache import WAIT_POLL_S, IndexCache, index_bytes
from longqa_core.windows import DocumentTokens


def slow_build(value, built: list, seconds: float = 0.3, running: list | None = None):
    def build():
        if running is not None:
            running.append(1)
            built.append(len(running))
        else:
            built.append(value)
        time.sleep(seconds)
        if running is not None:
            running.pop()
        return value
    return build


def in_threads(calls) -> list:
    results, threads = [None] * len(calls), []
    for i, call in enumerate(calls):
        def run(i=i, call=call):
            try:
                results[i] = call()
            except Exception as exc:  # noqa: BLE001 - recorded for the test to check
                results[i] = exc
        threads.append(threading.Thread(target=run))
        threads[-1].start()
    for thread in threads:
        thread.join(10)
    return results


@pytest.mark.slow
def test_many_requests_for_one_upload_share_one_build():
    cache, built = IndexCache(size_of=lambda index: 10), []
    results = in_threads([lambda: cache.get_or_build("upload", slow_build("index", built))] * 8)
    assert results == ["index"] * 8 and built == ["index"] and cache.builds == 1
    assert cache.get_or_build("upload", slow_build("again", built)) == "index"  # a hit: nothing built
    assert built == ["index"]


@pytest.mark.slow
def test_builds_of_different_uploads_run_one_at_a_time():
    cache, built, running = IndexCache(builders=1, size_of=lambda index: 10), [], []
    results = in_threads([lambda k=k: cache.get_or_build(k, slow_build(k, built, 0.1, running)) for k in "abcd"])
    assert results == list("abcd") and built == [1, 1, 1, 1]  # never two at once


def test_the_cache_keeps_indexes_up_to_its_bytes_the_most_recently_used_last():
    cache = IndexCache(max_bytes=100, size_of=lambda index: index[1])
    for key, size in (("a", 40), ("b", 40), ("c", 40)):
        cache.get_or_build(key, lambda key=key, size=size: (key, size))
    assert "a" not in cache and "b" in cache and "c" in cache and cache.bytes == 80
    cache.get_or_build("b", lambda: ("b", 40))  # b used: c goes first next
    cache.get_or_build("d", lambda: ("d", 40))
    assert "c" not in cache and set("bd") == {k for k in "abcd" if k in cache}
    assert cache.get_or_build("huge", lambda: ("huge", 500)) == ("huge", 500)  # built, answered, not kept
    assert "huge" not in cache and cache.bytes == 80


@pytest.mark.slow
def test_a_request_waiting_for_a_build_stops_when_asked():
    cache, built, stop = IndexCache(size_of=lambda index: 10), [], threading.Event()
    builder = threading.Thread(target=lambda: cache.get_or_build("k", slow_build("index", built, 2.0)))
    builder.start()
    time.sleep(0.1)
    began = time.monotonic()
    threading.Timer(0.2, stop.set).start()
    with pytest.raises(Cancelled, match="index"):
        cache.get_or_build("k", lambda: "mine", should_stop=stop.is_set)
    assert time.monotonic() - began < 3 * (0.2 + WAIT_POLL_S)  # the stop, then one poll: with a busy machine's margin
    builder.join(5)
    assert built == ["index"] and cache.get_or_build("k", lambda: "mine") == "index"


def test_a_failed_build_lets_the_next_request_build():
    cache = IndexCache(size_of=lambda index: 10)

    def fail():
        raise RuntimeError("no")
    with pytest.raises(RuntimeError):
        cache.get_or_build("k", fail)
    assert cache.get_or_build("k", lambda: "index") == "index"


@pytest.mark.slow
def test_an_index_is_counted_by_its_arrays_and_vocabulary():
    words = " ".join(f"word{i}" for i in range(3000))
    small = reading.build_index([Document("a", "The tide of Harrowgate is 4102. " * 200)])
    large = reading.build_index([Document("b", (words + ". ") * 20)])
    assert 0 < index_bytes(small) < index_bytes(large)
    assert index_bytes(large) > large.passage_centres.nbytes + 3000 * 40  # the vocabulary counts


def test_an_uploads_entry_counts_its_tokens_too():
    """What a plan caches per upload is the index and the documents' tokens: both count toward the cap."""
    index = reading.build_index([Document("a", "The tide of Harrowgate is 4102. " * 200)])
    tokens = DocumentTokens(np.zeros(100_000, dtype=np.int32), np.zeros((100_000, 2), dtype=np.int32))
    assert index_bytes((index, [tokens])) >= index_bytes(index) + tokens.ids.nbytes + tokens.offsets.nbytes




def varied_text(n_words: int, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    return " ".join(f"word{i}" for i in rng.integers(0, 5_000, n_words)) + " The tide of Harrowgate is 4102."


@pytest.mark.slow
def test_building_an_index_asks_stop_between_passages_and_ends_there():
    documents = [Document("a", varied_text(100_000))]  # about 800,000 characters: 1,350 passages
    passages = len(reading.passage_starts(len(documents[0].text)))
    asked = []
    whole = reading.build_index(documents)
    asking = reading.build_index(documents, should_stop=lambda: asked.append(1) and False)
    assert len(asked) >= 3 * passages // ranker.STOP_EVERY_PASSAGES  # splitting, counting and scoring each ask
    question = ["harrowgat", "tide"]
    assert np.array_equal(whole.ranker.score(question), asking.ranker.score(question))
    assert b"StopAsking" not in pickle.dumps(asking.ranker)  # the index keeps none of the lists that ask
    for stop_after in (2, len(asked) // 2, len(asked) - 2):  # while splitting, counting and scoring passages
        calls = []
        with pytest.raises(Cancelled, match="indexed"):
            reading.build_index(documents, should_stop=lambda: calls.append(1) or len(calls) > stop_after)
        assert len(calls) == stop_after + 1  # it ended at the first ask after the stop


@pytest.mark.slow
def test_a_build_cancelled_half_way_is_not_cached_and_the_next_request_builds_it():
    cache, documents, asked = IndexCache(), [Document("a", varied_text(50_000))], []
    with pytest.raises(Cancelled):
        cache.get_or_build("k", lambda: reading.build_index(documents, should_stop=lambda: len(asked) > 3
                                                            or asked.append(1)))
    assert "k" not in cache and len(cache) == 0 and cache.builds == 0
    index = cache.get_or_build("k", lambda: reading.build_index(documents))
    assert "k" in cache and cache.builds == 1 and index.ranker is not None


@pytest.mark.slow
def test_only_the_ranker_reaches_into_bm25s():
    """The ranking is one seam (`longqa_core.ranker`): the index cache counts an index by its `nbytes`, and the
    "not found" word check asks the ranker for words; no other module imports bm25s."""
    root = Path(__file__).resolve().parents[1]
    importers = set()
    for path in [*root.glob("longqa_core/*.py"), *root.glob("longqa/**/*.py"), *root.glob("strategies/*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(name.split(".")[0] == "bm25s" for name in names):
                importers.add(path.relative_to(root).as_posix())
    assert importers == {"longqa_core/ranker.py"}


def test_the_cache_counts_any_ranker_by_its_nbytes():
    class Fixed:
        vocabulary = frozenset({"tide"})
        nbytes = 12_345

        def score(self, words):
            return np.ones(2)

    index = reading.DocumentIndex("k", np.zeros(2, dtype=np.int64), np.zeros(2, dtype=np.int64), Fixed(), 0.0, 0.0)
    assert index_bytes(index) == 12_345 + 2 * 2 * 8
    assert index.vocabulary == {"tide"}
