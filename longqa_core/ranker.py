"""The ranker behind guided reading and the "not found" word check, and the one module that knows it is BM25
(`bm25s`): content words (the stopwords, the stemmer and the splitting that the ranking, `longqa_core.reading`, and
the evidence check, `longqa_core.no_answer`, share, so that both mean the same by "a word of the question"), and a
`PassageIndex` that scores passages for a question's words and says its size. Swapping the ranker is this module.

Text in, words and scores out: it picks no window and judges no answer.
"""

from __future__ import annotations

import re
import sys
import threading
from typing import Callable, Protocol

import bm25s
import numpy as np

from longqa_core.errors import Cancelled

try:  # optional: stems make "budgets" match "budget"; without it bm25s matches whole words only
    import Stemmer
except ImportError:
    Stemmer = None

_QUESTION_WORDS = ["what", "which", "who", "whom", "whose", "where", "when", "why", "how", "much", "many", "does",
                   "did", "do", "is", "are", "was", "were", "tell", "me", "please"]
STOPWORDS = sorted(set(bm25s.stopwords.STOPWORDS_EN_PLUS) | set(_QUESTION_WORDS))
STOP_EVERY_PASSAGES = 256  # a few ms of bm25s's Python loops (splitting, counting, scoring) between two asks
_local = threading.local()  # a stemmer per thread: requests rank side by side, and a stemmer keeps a cache


class PassageIndex(Protocol):
    """Passages indexed once, scored per question: `score(words)` gives each passage's score (P,) for the
    question's content words, `vocabulary` the words the passages hold, `nbytes` about the memory it holds."""

    vocabulary: frozenset[str]

    def score(self, words: list[str]) -> np.ndarray: ...

    @property
    def nbytes(self) -> int: ...


def stemmer():
    if Stemmer is None:
        return None
    if not hasattr(_local, "stemmer"):
        _local.stemmer = Stemmer.Stemmer("english")
    return _local.stemmer


def tokenize(texts: list[str]):
    """bm25s's tokens of `texts` (ids and vocabulary): lower case, stopwords dropped, stemmed."""
    return bm25s.tokenize(texts, stopwords=STOPWORDS, stemmer=stemmer(), show_progress=False)


def content_words(text: str) -> set[str]:
    """The stemmed content words of `text` (words of two or more letters or digits, as bm25s splits them)."""
    return set(bm25s.tokenize([text], stopwords=STOPWORDS, stemmer=stemmer(), return_ids=False,
                              show_progress=False)[0])


def question_words(question: str) -> list[str]:
    """The question's content words (stemmed), in the order the ranking reports them."""
    return [word for word in tokenize([question]).vocab if word]


def as_asked(question: str, stems: list[str]) -> list[str]:
    """The question's words behind `stems` (its stemmed content words), as the question writes them and in its
    order: what a visitor reads ("bridge", not "bridg")."""
    wanted, written = set(stems), {}
    for word in re.findall(r"\w+", question):
        for stem in content_words(word) & wanted:
            written.setdefault(stem, word)
    return list(written.values()) + [stem for stem in stems if stem not in written]


class Bm25Index:
    """BM25 over passages (`bm25s.BM25`): the `PassageIndex` guided reading uses."""

    def __init__(self, retriever: bm25s.BM25, vocabulary: frozenset[str]):
        self._retriever = retriever
        self.vocabulary = vocabulary

    def score(self, words: list[str]) -> np.ndarray:
        return self._retriever.get_scores(words)  # (P,)

    @property
    def nbytes(self) -> int:
        return sys.getsizeof(self) + _size(self.vocabulary) + sum(_size(v) for v in vars(self._retriever).values())


def index_passages(passages: list[str], should_stop: Callable[[], bool]) -> Bm25Index | None:
    """The passages indexed (None when they hold no word worth ranking). Cancelled when `should_stop` says so: it
    is asked every `STOP_EVERY_PASSAGES` passages while bm25s splits them into words and while it counts and scores
    them; the index keeps none of the lists that ask."""
    tokens = tokenize(StopAsking(passages, should_stop))
    vocabulary = frozenset(word for word in tokens.vocab if word)
    if not vocabulary:
        return None
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenization.Tokenized(StopAsking(tokens.ids, should_stop), tokens.vocab),
                    show_progress=False)
    return Bm25Index(retriever, vocabulary)


class StopAsking(list):
    """A list that asks `stop` every `STOP_EVERY_PASSAGES` items as it is walked, and raises Cancelled when told:
    bm25s walks the passages, and their words, in plain Python loops (`for text in texts`, `for doc in corpus`),
    which is where a build spends its time; the index it returns keeps none of these lists."""

    def __init__(self, items, stop: Callable[[], bool]):
        super().__init__(items)
        self.stop = stop

    def __iter__(self):
        for i, item in enumerate(super().__iter__()):
            if i % STOP_EVERY_PASSAGES == 0 and self.stop():
                raise Cancelled("The request was cancelled while its documents were being indexed.")
            yield item


def _size(value) -> int:
    """About the bytes `value` holds: arrays by their buffers, containers with what they hold."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, dict):
        return sys.getsizeof(value) + sum(_size(k) + _size(v) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return sys.getsizeof(value) + sum(_size(v) for v in value)
    return sys.getsizeof(value) if isinstance(value, (str, bytes, int, float)) else 0
