"""Question-guided reading: which stretches of the documents a question needs, ranked with BM25 (`bm25s`) over short
passages of the documents' own text, and the rounds in which to read them (the likely windows first, more when the
ranking cannot decide or the answer read so far is weak).

It ranks and plans; it runs no model and tokenizes nothing for the model: `longqa_core.engine` reads what it picks.
The index is built from characters alone and does not depend on the question, so a second question on the same
documents pays only the query. docs/reading-eval.json and the README say how the numbers below were chosen.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from dataclasses import dataclass, field

import bm25s
import numpy as np

from longqa_core.documents import Document
from longqa_core.errors import InputError

try:  # optional: stems make "budgets" match "budget"; without it bm25s matches whole words only
    import Stemmer
except ImportError:
    Stemmer = None

READING_MODES = ("auto", "full", "guided")
DEFAULT_READING = "auto"
# Passages: a few hundred tokens, overlapping by half, so that a sentence cut by one passage's edge is whole in the
# next. Shorter than a window: a window's score is its best passage's, not diluted by the rest of its text.
PASSAGE_CHARS = 1_200
PASSAGE_STEP_CHARS = 600
# A region is the text one model window reads; read with this margin on each side, a passage centred in the region
# is read whole (PASSAGE_CHARS / 2 beyond its centre at most).
REGION_MARGIN_CHARS = PASSAGE_CHARS // 2
# A region is filled to this share of a window's room (at the measured characters per token), leaving space for
# the margins and for text that tokenizes more densely than the sample did.
REGION_FILL = 0.9
AUTO_MIN_WINDOWS = 4  # auto reads documents of up to this many windows whole: ranking would save little
FIRST_ROUND_WINDOWS = 2  # windows read first when the ranking is decisive
# Windows scoring at least this share of the best one tie with it: the ranking cannot tell them apart (typically
# the entity alone matches, in every window that mentions it), so all of them are read before stopping.
TIE_SHARE = 0.5
# More tied windows than this share of all: the scores are too flat to pick from, and auto reads everything.
FLAT_SHARE = 0.5
# The best answer's score (p_start * p_end within its window) under which the answer is weak and reading goes on.
# Measured with the demo model on 20 documents of the independent generator (20,000 words, about 10 windows each):
# the best span of the window holding the fact scored 1.3e-5 to 1.0 (17 of 20 at least 1e-3), every other window
# at most 1.6e-2 (19 of 20 documents at most 1.6e-4). A weak answer only makes reading go on, so the cost of a
# threshold set high is time, never a lost answer; windows that tie in the ranking are read whatever the score.
WEAK_ANSWER_SCORE = 1e-3
# Scripts bm25s's default token pattern cannot split into words (no spaces between them).
_UNSPLIT_SCRIPT = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u0e00-\u0e7f\u1780-\u17ff]")
UNSPLIT_SHARE = 0.05  # documents with more than this share of such characters are not ranked
_QUESTION_WORDS = ["what", "which", "who", "whom", "whose", "where", "when", "why", "how", "much", "many", "does",
                   "did", "do", "is", "are", "was", "were", "tell", "me", "please"]
STOPWORDS = sorted(set(bm25s.stopwords.STOPWORDS_EN_PLUS) | set(_QUESTION_WORDS))


@dataclass(frozen=True)
class Region:
    """About one model window's worth of a document's text: the unit that is ranked, read or skipped."""

    document_index: int
    start_char: int
    end_char: int


@dataclass
class DocumentIndex:
    """The BM25 index of one set of documents: its passages, the regions they fall in, and what building it cost.
    Question-independent: build it once per upload and query it per question."""

    key: str
    regions: list[Region]
    passage_regions: np.ndarray  # (P,) the region each passage's centre falls in
    retriever: bm25s.BM25 | None  # None when there was no text worth ranking
    vocabulary: frozenset[str]
    unsplit_share: float  # share of all characters in scripts the ranking cannot split into words
    build_s: float

    @property
    def n_regions(self) -> int:
        return len(self.regions)


@dataclass
class Ranking:
    """A question's scores over the regions of one index, best first."""

    order: np.ndarray  # (R,) region indices, best first
    scores: np.ndarray  # (R,) each region's best passage score, in region order
    terms: list[str]  # the question's content words (stemmed)
    matched: list[str]  # those found in the documents
    query_s: float

    @property
    def best(self) -> float:
        return float(self.scores[self.order[0]]) if len(self.order) else 0.0

    def tied(self) -> list[int]:
        """Regions scoring within TIE_SHARE of the best (the best included), best first."""
        if self.best <= 0:
            return []
        return [int(r) for r in self.order if self.scores[r] >= TIE_SHARE * self.best]

    def matching(self) -> list[int]:
        """Regions where any of the question's words occur, best first."""
        return [int(r) for r in self.order if self.scores[r] > 0]


@dataclass
class ReadingPlan:
    """What to read: `mode` as resolved ("full" or "guided"), why, and for guided the rounds of regions in order:
    the best windows, then the windows that tie with them. Reading stops after a round when
    `should_stop_after(round, best_score)` says so; an answer still weak after the last round is read again in
    full (`is_weak`), so guided reading never ends on less than the full read would find."""

    mode: str
    reason: str
    rounds: list[list[int]] = field(default_factory=list)
    decisive: bool = False  # the first round's windows stand clear of the rest
    weak_answer_score: float = WEAK_ANSWER_SCORE  # a model whose scores mean something else sets its own

    def is_weak(self, best_score: float | None) -> bool:
        """Whether the best answer read so far is too weak to stop on (or there is none)."""
        return best_score is None or best_score < self.weak_answer_score

    def should_stop_after(self, round_index: int, best_score: float | None) -> bool:
        """Stop reading after round `round_index`: never before the tied windows are read unless the ranking was
        decisive, and never on a weak (or no) answer while rounds remain."""
        if round_index >= len(self.rounds) - 1:
            return True
        if self.is_weak(best_score):
            return False
        return round_index >= 1 or self.decisive


def check_mode(mode) -> str:
    """`mode` if it is one of READING_MODES, else InputError naming them."""
    if mode not in READING_MODES:
        raise InputError(f"The reading mode must be one of {', '.join(READING_MODES)}, got {mode!r}.")
    return mode


def content_key(documents: list[Document], region_chars: list[int]) -> str:
    """Identifies an index: the documents' text and the region sizes it was cut with."""
    digest = hashlib.blake2b(digest_size=16)
    for document, size in zip(documents, region_chars):
        digest.update(f"{len(document.text)}:{size}:".encode())
        digest.update(document.text.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def cut_regions(document_index: int, text: str, region_chars: int) -> list[Region]:
    """Consecutive regions of about `region_chars`, each ending at white space where one is near."""
    regions, start = [], 0
    while start < len(text):
        end = min(len(text), start + region_chars)
        if end < len(text):
            space = text.rfind(" ", start + region_chars // 2, end)
            end = space if space > start else end
        regions.append(Region(document_index, start, end))
        start = end
    return regions or [Region(document_index, 0, 0)]


def passage_starts(n_chars: int) -> range:
    return range(0, max(1, n_chars - PASSAGE_CHARS + PASSAGE_STEP_CHARS), PASSAGE_STEP_CHARS)


_local = threading.local()  # a stemmer per thread: requests rank side by side, and a stemmer keeps a cache


def stemmer():
    if Stemmer is None:
        return None
    if not hasattr(_local, "stemmer"):
        _local.stemmer = Stemmer.Stemmer("english")
    return _local.stemmer


def tokenize(texts: list[str]):
    return bm25s.tokenize(texts, stopwords=STOPWORDS, stemmer=stemmer(), show_progress=False)


def unsplit_share(text: str, sample_chars: int = 200_000) -> float:
    """Share of characters (over an even sample of the text) in scripts written without spaces between words."""
    if not text:
        return 0.0
    step = max(1, len(text) // sample_chars)
    sample = text[::step]
    return len(_UNSPLIT_SCRIPT.findall(sample)) / len(sample)


def build_index(documents: list[Document], region_chars: list[int]) -> DocumentIndex:
    """Cut each document into regions of `region_chars[i]` characters and passages, and index the passages."""
    began = time.perf_counter()
    regions: list[Region] = []
    passages: list[str] = []
    owners: list[int] = []
    for index, (document, size) in enumerate(zip(documents, region_chars)):
        text = document.text
        first = len(regions)
        doc_regions = cut_regions(index, text, max(size, PASSAGE_CHARS))
        regions.extend(doc_regions)
        ends = np.array([r.end_char for r in doc_regions])  # (R_doc,)
        for start in passage_starts(len(text)):
            passage = text[start: start + PASSAGE_CHARS]
            centre = start + len(passage) // 2
            passages.append(passage)
            owners.append(first + min(int(np.searchsorted(ends, centre, side="right")), len(doc_regions) - 1))
    n_chars = sum(len(d.text) for d in documents)
    share = sum(unsplit_share(d.text) * len(d.text) for d in documents) / n_chars if n_chars else 0.0
    tokens = tokenize(passages)
    vocabulary = frozenset(word for word in tokens.vocab if word)
    retriever = None
    if vocabulary:
        retriever = bm25s.BM25()
        retriever.index(tokens, show_progress=False)
    return DocumentIndex(content_key(documents, region_chars), regions, np.array(owners, dtype=np.int64),
                         retriever, vocabulary, share, time.perf_counter() - began)


def rank(index: DocumentIndex, question: str) -> Ranking:
    """Each region's best passage score for the question (BM25), and the order best first."""
    began = time.perf_counter()
    terms = tokenize([question]).vocab
    terms = [t for t in terms if t]
    matched = [t for t in terms if t in index.vocabulary]
    region_scores = np.zeros(index.n_regions, dtype=np.float64)  # (R,)
    if matched and index.retriever is not None:
        passage_scores = index.retriever.get_scores(matched)  # (P,)
        np.maximum.at(region_scores, index.passage_regions, passage_scores)
    order = np.argsort(-region_scores, kind="stable")  # ties keep document order
    return Ranking(order, region_scores, terms, matched, time.perf_counter() - began)


def plan_reading(mode: str, index: DocumentIndex | None, ranking: Ranking | None, question: str,
                 estimated_windows: int) -> ReadingPlan:
    """Resolve `mode` ("auto", "full", "guided") into what to read, with the reason. Guided reading falls back to
    the full read where ranking cannot serve; auto also reads short documents whole."""
    check_mode(mode)
    if mode == "full":
        return ReadingPlan("full", "the full read was asked for")
    if mode == "auto" and estimated_windows <= AUTO_MIN_WINDOWS:
        return ReadingPlan("full", f"the documents fit in about {estimated_windows} windows: read whole "
                                   f"(auto reads guided past {AUTO_MIN_WINDOWS})")
    if _UNSPLIT_SCRIPT.search(question) or (index is not None and index.unsplit_share > UNSPLIT_SHARE):
        return ReadingPlan("full", "the text is in a script written without spaces between words (such as Chinese "
                                   "or Japanese), which the ranking cannot split into words: read whole")
    assert index is not None and ranking is not None
    if index.n_regions <= FIRST_ROUND_WINDOWS:
        return ReadingPlan("full", f"the documents fit in {index.n_regions} stretch"
                                   f"{'es' if index.n_regions != 1 else ''} of about a window: read whole")
    if not ranking.terms:
        return ReadingPlan("full", "the question has no content word to rank by (only common words): read whole")
    if not ranking.matched:
        return ReadingPlan("full", "none of the question's content words occur in the documents: read whole")
    tied = ranking.tied()
    if len(tied) > FLAT_SHARE * index.n_regions:
        return ReadingPlan("full", f"the question's words score alike in {len(tied)} of {index.n_regions} stretches "
                                   f"of text: too flat to pick from, read whole")
    first = ranking.matching()[:FIRST_ROUND_WINDOWS]  # never a stretch where none of the words occur
    rounds = [first]
    ties = [r for r in tied if r not in first]
    if ties:
        rounds.append(ties)
    decisive = len(tied) <= FIRST_ROUND_WINDOWS
    why = ("the best stand clear of the rest" if decisive
           else f"{len(tied)} score alike, all read before stopping")
    return ReadingPlan("guided", f"ranked {index.n_regions} stretches of text (each read as about one window) on "
                                 f"{', '.join(ranking.matched)}: {why}; the whole document is read if the answer "
                                 f"stays weak", rounds, decisive)
