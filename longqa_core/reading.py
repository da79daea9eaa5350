"""Question-guided reading: which stretches of the documents a question needs, ranked with BM25 (`bm25s`) over short
passages of the documents' own text, the rounds in which to read them (the likely windows first, more when the
ranking cannot decide or the answer read so far is weak), and the loop that reads those rounds (`read_rounds`).

The index is built from characters alone and does not depend on the question, so a second question on the same
documents pays only the query. It does not plan a request (`longqa_core.plan`) nor assemble its answer
(`longqa_core.answering`). docs/reading-eval.json and the README say how the numbers below were chosen.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass, field, replace
from typing import Callable

import bm25s
import numpy as np

from longqa_core import no_answer
from longqa_core.batching import BatchState, Runner, WindowProgress, run_windows
from longqa_core.documents import Document
from longqa_core.errors import InputError
from longqa_core.limits import (EngineSettings, StopCheck, check_predicted_time, no_answer_rule, passes_time_limit,
                                stop_check)
from longqa_core.spans import decode
from longqa_core.windows import Window, span_windows, window_span
from longqa_core.words import tokenize

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
    code: str  # why, for programs: one of REASONS
    reason: str  # why, for people
    rounds: list[list[int]] = field(default_factory=list)
    decisive: bool = False  # the first round's windows stand clear of the rest
    basis: str = ""  # a guided read: what the ranking was made on ("ranked 12 stretches of text ... on budget")
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


# Why a request is read as it is: a code for programs, the text in the readout's `reading.reason`.
FULL_ASKED = "the full read was asked for"
REASONS = ("asked_full", "few_windows", "unsplit_script", "few_regions", "no_content_words", "no_match", "flat",
           "ranked", "weak_after_guided")


def full_read(reason: str, code: str = "asked_full") -> ReadingPlan:
    """The plan of reading every window, and why."""
    return ReadingPlan("full", code, reason)


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
        return full_read(FULL_ASKED)
    if mode == "auto" and estimated_windows <= AUTO_MIN_WINDOWS:
        return full_read(f"the documents fit in about {estimated_windows} windows: read whole "
                         f"(auto reads guided past {AUTO_MIN_WINDOWS})", "few_windows")
    if _UNSPLIT_SCRIPT.search(question) or (index is not None and index.unsplit_share > UNSPLIT_SHARE):
        return full_read("the text is in a script written without spaces between words (such as Chinese or "
                         "Japanese), which the ranking cannot split into words: read whole", "unsplit_script")
    assert index is not None and ranking is not None
    if index.n_regions <= FIRST_ROUND_WINDOWS:
        return full_read(f"the documents fit in {index.n_regions} stretch{'es' if index.n_regions != 1 else ''} "
                         f"of about a window: read whole", "few_regions")
    if not ranking.terms:
        return full_read("the question has no content word to rank by (only common words): read whole",
                         "no_content_words")
    if not ranking.matched:
        return full_read("none of the question's content words occur in the documents: read whole", "no_match")
    tied = ranking.tied()
    if len(tied) > FLAT_SHARE * index.n_regions:
        return full_read(f"the question's words score alike in {len(tied)} of {index.n_regions} stretches of text: "
                         f"too flat to pick from, read whole", "flat")
    first = ranking.matching()[:FIRST_ROUND_WINDOWS]  # never a stretch where none of the words occur
    rounds = [first]
    ties = [r for r in tied if r not in first]
    if ties:
        rounds.append(ties)
    decisive = len(tied) <= FIRST_ROUND_WINDOWS
    why = ("the best stand clear of the rest" if decisive
           else f"{len(tied)} score alike, all read before stopping")
    basis = (f"ranked {index.n_regions} stretches of text (each read as about one window) on "
             f"{', '.join(ranking.matched)}")
    return ReadingPlan("guided", "ranked", f"{basis}: {why}; the whole document is read if the answer stays weak",
                       rounds, decisive, basis)


def weak_after_guided(plan: ReadingPlan, windows_read: int) -> ReadingPlan:
    """The plan a guided read falls back to when its answer stays weak: every window, saying why."""
    return full_read(f"guided reading found no strong answer in {windows_read} window"
                     f"{'s' if windows_read != 1 else ''} ({plan.basis}): read whole", "weak_after_guided")


def expected_regions(plan: ReadingPlan, regions: list[Region]) -> list[Region]:
    """What a guided read is expected to read before it stops on a strong answer: the first round, and the ties
    too where the ranking was not decisive."""
    rounds = plan.rounds
    expected = rounds[0] + (rounds[1] if len(rounds) > 1 and not plan.decisive else [])
    return [regions[r] for r in expected]


def read_spans(regions: list[Region], documents: list[Document]) -> list[tuple[int, int, int]]:
    """(document index, start, end) to read for `regions`: each with its margins, neighbours merged."""
    spans: list[list[int]] = []
    for region in sorted(regions, key=lambda r: (r.document_index, r.start_char)):
        start = max(0, region.start_char - REGION_MARGIN_CHARS)
        end = min(len(documents[region.document_index].text), region.end_char + REGION_MARGIN_CHARS)
        if spans and spans[-1][0] == region.document_index and start <= spans[-1][2]:
            spans[-1][2] = max(spans[-1][2], end)
        else:
            spans.append([region.document_index, start, end])
    return [tuple(span) for span in spans]


# Reading the rounds ------------------------------------------------------------------------------------------
@dataclass
class GuidedRead:
    """What a guided read found: the windows read with their logits, where each read, the batch size used, the
    notices, the best answer's score, and whether the time budget cut the rounds short."""

    windows: list[Window] = field(default_factory=list)
    logits: list = field(default_factory=list)
    read_rows: list[dict] = field(default_factory=list)
    batch_size: int = 1
    notices: list[str] = field(default_factory=list)
    best_score: float | None = None
    cut_short: bool = False
    forward_tokens: int = 0
    forward_windows: int = 0
    forward_s: float = 0.0


def read_rounds(runner: Runner, tokenizer, plan, batch_state: BatchState, measurement, *,
                should_stop: StopCheck | None = None,
                on_window_progress: Callable[[WindowProgress], None] | None = None) -> GuidedRead:
    """Read a guided plan's rounds (`longqa_core.plan.RequestPlan`) in order, deciding after each whether the
    answer so far is enough; a later round that would pass the time budget is not read."""
    settings, documents, rounds = plan.settings, plan.documents, plan.reading
    read = GuidedRead(batch_size=batch_state.size if settings.adaptive_batching else settings.batch_size)
    windows_total = plan.windows
    evidence = None  # built at the first answer a rule that needs evidence judges
    for round_index, round_regions in enumerate(rounds.rounds):
        with measurement.stage("tokenize"):
            new = span_windows(tokenizer, plan.question, documents,
                               read_spans([plan.regions[r] for r in round_regions], documents), settings,
                               should_stop)
        new_tokens = sum(len(w.input_ids) for w in new)
        rate = batch_state.tokens_per_s
        predicted = new_tokens / rate if rate else None
        forward_after = None if predicted is None else measurement.latency_s.get("forward", 0.0) + predicted
        if round_index > 0 and passes_time_limit(forward_after, settings.max_request_s):
            read.notices.append(f"Read {len(read.windows):,} windows; reading {len(new):,} more would pass the limit "
                                f"of {settings.max_request_s:g} s a request, so the answer comes from those read.")
            read.cut_short = True
            break
        if round_index == 0:
            check_predicted_time(predicted, settings, len(new), new_tokens, rate)
        done_before = len(read.windows)

        def round_progress(state: WindowProgress, done_before=done_before, n_new=len(new)) -> None:
            if on_window_progress is not None:
                on_window_progress(replace(state, windows_done=done_before + state.windows_done,
                                           windows_total=max(windows_total, done_before + n_new)))
        with measurement.stage("forward"):
            new_logits, read.batch_size, sample = run_windows(runner, new, tokenizer.pad_token_id, settings,
                                                              batch_state, should_stop=should_stop,
                                                              on_window_progress=round_progress)
        read.forward_tokens += sample.tokens
        read.forward_windows += sample.windows
        read.forward_s += sample.seconds
        read.windows.extend(new)
        read.logits.extend(new_logits)
        read.read_rows.extend(window_span(w) for w in new)
        with measurement.stage("decode"):
            decoded = decode(read.windows, read.logits, documents, replace(settings, top_k=1),
                             stop_check(should_stop))
        read.best_score = decoded.answers[0].score if decoded.answers else None
        rule = no_answer_rule(settings)
        missing = None
        if rule.needs_evidence and decoded.answers:
            best = decoded.answers[0]
            evidence = evidence or no_answer.Evidence(plan.question, [d.text for d in documents])
            missing = evidence.missing(best.document_index, best.start_char, best.end_char)
        if no_answer.is_found(rule, read.best_score, decoded.null_score, missing) is False:
            read.best_score = None  # what the request's rule calls "not found" is as weak as no answer: read on
        if rounds.should_stop_after(round_index, read.best_score):
            break
    return read


def full_read_passes_limit(settings: EngineSettings, batch_state: BatchState, forward_s: float,
                           windows_total: int) -> str | None:
    """The notice to give when reading every window now would pass `settings.max_request_s` at the measured rate
    (counting the `forward_s` already spent), else None."""
    rate = batch_state.tokens_per_s
    if settings.max_request_s is None or not rate:
        return None
    predicted = forward_s + windows_total * settings.max_seq_len / rate
    if predicted <= settings.max_request_s:
        return None
    return (f"The answer is weak, and reading all {windows_total:,} windows would take about {predicted:,.0f} s, "
            f"over the limit of {settings.max_request_s:g} s a request: the answer comes from the windows the "
            f"ranking picked.")
