"""Content words: the stopwords, the stemmer and the tokenizer that the ranking (`longqa_core.reading`) and the
evidence check of the "not found" rules (`longqa_core.no_answer`) share, so that both mean the same by "a word of
the question". Text in, words out: it ranks nothing and judges nothing.
"""

from __future__ import annotations

import threading

import bm25s

try:  # optional: stems make "budgets" match "budget"; without it bm25s matches whole words only
    import Stemmer
except ImportError:
    Stemmer = None

_QUESTION_WORDS = ["what", "which", "who", "whom", "whose", "where", "when", "why", "how", "much", "many", "does",
                   "did", "do", "is", "are", "was", "were", "tell", "me", "please"]
STOPWORDS = sorted(set(bm25s.stopwords.STOPWORDS_EN_PLUS) | set(_QUESTION_WORDS))
_local = threading.local()  # a stemmer per thread: requests rank side by side, and a stemmer keeps a cache


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
