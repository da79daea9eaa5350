"""Question-guided reading: which of the full read's windows a question needs, ranked (`longqa_core.ranker`) over short
passages of the documents' own text, the rounds in which to read them (the likely windows first, more when the
ranking cannot decide or the answer read so far is weak), and the loop that reads windows (`read_rounds`,
`read_windows`): a read that goes on to the whole document reads only the windows not read yet.

The index is built from characters alone and does not depend on the question, so a second question on the same
documents pays only the query. It does not plan a request (`longqa_core.plan`: it cuts the windows) nor assemble
its answer (`longqa_core.answering`). docs/results/reading-eval.json and docs/reading.md say how the numbers below were
chosen.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Generator

import numpy as np

from longqa_core import no_answer
from longqa_core.batching import BatchState, Runner, WindowProgress, iter_windows
from longqa_core.documents import Document
from longqa_core.limits import (EngineSettings, StopCheck, check_predicted_time, no_answer_rule, passes_time_limit,
                                stop_check)
from longqa_core.spans import decode
from longqa_core.windows import Window, WindowCut, cut_windows
from longqa_core.ranker import PassageIndex, as_asked, index_passages, question_words

READING_MODES = ("auto", "full", "guided")
DEFAULT_READING = "auto"
# Passages: a few hundred tokens, overlapping by half, so that a sentence cut by one passage's edge is whole in the
# next. Shorter than a window: a window's score is its best passage's (those centred in it), not diluted by the
# rest of its text. A passage centred where two windows overlap scores for both.
PASSAGE_CHARS = 1_200
PASSAGE_STEP_CHARS = 600
AUTO_MIN_WINDOWS = 4  # auto reads documents of up to this many windows whole: ranking would save little
FIRST_ROUND_WINDOWS = 2  # windows read first when the ranking is decisive
# Windows scoring at least this share of the best one tie with it: the ranking cannot tell them apart (typically
# the entity alone matches, in every window that mentions it), so all of them are read before stopping.
TIE_SHARE = 0.5
# More tied windows than this share of all: the scores are too flat to pick from, and auto reads everything. 0.6,
# not the 0.5 of ranked stretches of about 0.8 window: a whole window holds more text, so the entity's dozen
# mentions light a larger share of them (docs/results/ranking.json: 0.6 reads 36 of 40 literal and 31 of 40 paraphrased
# questions guided, as 0.5 did over stretches; 0.5 over windows, 26 and 8). Reading the ties of a flat ranking
# first costs little now that the windows left are read only once.
FLAT_SHARE = 0.6
# The best answer's score (p_start * p_end within its window) under which the answer is weak and reading goes on.
# Measured with the demo model on 20 documents of the independent generator (20,000 words, about 10 windows each):
# the best span of the window holding the fact scored 1.3e-5 to 1.0 (17 of 20 at least 1e-3), every other window
# at most 1.6e-2 (19 of 20 documents at most 1.6e-4). A weak answer only makes reading go on, so the cost of a
# threshold set high is time, never a lost answer; windows that tie in the ranking are read whatever the score.
WEAK_ANSWER_SCORE = 1e-3
# Scripts the ranker's words cannot split (no spaces between them).
_UNSPLIT_SCRIPT = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u0e00-\u0e7f\u1780-\u17ff]")
UNSPLIT_SHARE = 0.05  # documents with more than this share of such characters are not ranked


@dataclass
class DocumentIndex:
    """The ranking index of one set of documents: its passages, where each one's centre lies, and what building it
    cost. Question- and window-independent: build it once per upload and query it per question."""

    key: str
    passage_documents: np.ndarray  # (P,) the document of each passage
    passage_centres: np.ndarray  # (P,) the character at each passage's centre, ascending within a document
    ranker: PassageIndex | None  # None when there was no text worth ranking
    unsplit_share: float  # share of all characters in scripts the ranking cannot split into words
    build_s: float

    @property
    def vocabulary(self) -> frozenset[str]:
        return self.ranker.vocabulary if self.ranker is not None else frozenset()

    @property
    def nbytes(self) -> int:
        """About the memory it holds (what the index cache counts)."""
        arrays = self.passage_documents.nbytes + self.passage_centres.nbytes
        return arrays + (self.ranker.nbytes if self.ranker is not None else 0)


@dataclass
class Ranking:
    """A question's scores over the full read's windows, best first."""

    order: np.ndarray  # (W,) window indices, best first
    scores: np.ndarray  # (W,) each window's best passage score, in window order
    centres: np.ndarray  # (W,) the character at the centre of each window's best passage (where a sized read looks)
    terms: list[str]  # the question's content words (stemmed)
    matched: list[str]  # those found in the documents
    query_s: float

    @property
    def best(self) -> float:
        return float(self.scores[self.order[0]]) if len(self.order) else 0.0

    def tied(self) -> list[int]:
        """Windows scoring within TIE_SHARE of the best (the best included), best first."""
        if self.best <= 0:
            return []
        return [int(r) for r in self.order if self.scores[r] >= TIE_SHARE * self.best]

    def matching(self) -> list[int]:
        """Windows where any of the question's words occur, best first."""
        return [int(r) for r in self.order if self.scores[r] > 0]


@dataclass
class ReadingPlan:
    """What to read: `mode` as resolved ("full" or "guided"), why, and for guided the rounds of the full read's
    windows (their indices) in order: the best windows, then the windows that tie with them. Reading stops after a
    round when `should_stop_after(round, best_score)` says so; an answer still weak after the last round goes on to
    the windows not read yet (`is_weak`), so guided reading never ends on less than the full read would find."""

    mode: str
    code: str  # why, for programs: one of REASONS
    reason: str  # why, for people
    rounds: list[list[int]] = field(default_factory=list)
    decisive: bool = False  # the first round's windows stand clear of the rest
    basis: str = ""  # a guided read: what the ranking was made on ("ranked 12 windows on budget")
    centres: dict[int, int] = field(default_factory=dict)  # each ranked window's best passage's centre (a character)
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
REASONS = ("asked_full", "few_windows", "unsplit_script", "no_content_words", "no_match", "flat",
           "ranked", "weak_after_guided")


def full_read(reason: str, code: str = "asked_full") -> ReadingPlan:
    """The plan of reading every window, and why."""
    return ReadingPlan("full", code, reason)


def content_key(documents: list[Document], salt: str = "") -> str:
    """Identifies an upload: the documents' text (and `salt`: what else a cached entry depends on)."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(salt.encode())
    for document in documents:
        digest.update(f"{len(document.text)}:".encode())
        digest.update(document.text.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def passage_starts(n_chars: int) -> range:
    return range(0, max(1, n_chars - PASSAGE_CHARS + PASSAGE_STEP_CHARS), PASSAGE_STEP_CHARS)


def unsplit_share(text: str, sample_chars: int = 200_000) -> float:
    """Share of characters (over an even sample of the text) in scripts written without spaces between words."""
    if not text:
        return 0.0
    step = max(1, len(text) // sample_chars)
    sample = text[::step]
    return len(_UNSPLIT_SCRIPT.findall(sample)) / len(sample)


def build_index(documents: list[Document], *, should_stop: StopCheck | None = None) -> DocumentIndex:
    """Cut each document into passages and index them (`ranker.index_passages`). Cancelled when `should_stop` says
    so, every few hundred passages, so a cancel ends a build of 6 MB (about 10,000 passages) within a fraction of a
    second; a cancelled build returns nothing to cache."""
    began = time.perf_counter()
    stop = stop_check(should_stop)
    passages: list[str] = []
    owners: list[int] = []
    centres: list[int] = []
    for index, document in enumerate(documents):
        text = document.text
        for start in passage_starts(len(text)):
            passage = text[start: start + PASSAGE_CHARS]
            passages.append(passage)
            owners.append(index)
            centres.append(start + len(passage) // 2)
    n_chars = sum(len(d.text) for d in documents)
    share = sum(unsplit_share(d.text) * len(d.text) for d in documents) / n_chars if n_chars else 0.0
    ranker = index_passages(passages, stop)
    return DocumentIndex(content_key(documents), np.array(owners, dtype=np.int64),
                         np.array(centres, dtype=np.int64), ranker, share, time.perf_counter() - began)


def window_passages(index: DocumentIndex, cut: WindowCut) -> tuple[int, int]:
    """The passages [first, end) that score for a window: those centred in its text, else (a window shorter than a
    passage step) those overlapping it."""
    documents, centres = index.passage_documents, index.passage_centres
    lo, hi = np.searchsorted(documents, cut.document_index, side="left"), \
        np.searchsorted(documents, cut.document_index, side="right")
    first = lo + int(np.searchsorted(centres[lo:hi], cut.start_char, side="left"))
    end = lo + int(np.searchsorted(centres[lo:hi], cut.end_char, side="left"))
    if end == first:
        reach = PASSAGE_CHARS // 2
        first = lo + int(np.searchsorted(centres[lo:hi], cut.start_char - reach, side="left"))
        end = lo + int(np.searchsorted(centres[lo:hi], cut.end_char + reach, side="left"))
    return first, end


def rank(index: DocumentIndex, question: str, cuts: list[WindowCut]) -> Ranking:
    """Each window's best passage score for the question, and the order best first."""
    began = time.perf_counter()
    terms = question_words(question)
    matched = [t for t in terms if t in index.vocabulary]
    window_scores = np.zeros(len(cuts), dtype=np.float64)  # (W,)
    window_centres = np.array([(cut.start_char + cut.end_char) // 2 for cut in cuts], dtype=np.int64)  # (W,)
    if matched and index.ranker is not None:
        passage_scores = index.ranker.score(matched)  # (P,)
        for w, cut in enumerate(cuts):
            first, end = window_passages(index, cut)
            if end > first:
                best = first + int(passage_scores[first:end].argmax())
                window_scores[w] = passage_scores[best]
                window_centres[w] = index.passage_centres[best]
    order = np.argsort(-window_scores, kind="stable")  # ties keep document order
    return Ranking(order, window_scores, window_centres, terms, matched, time.perf_counter() - began)


def plan_reading(mode: str, index: DocumentIndex | None, ranking: Ranking | None, question: str,
                 n_windows: int, *, estimated: bool = False) -> ReadingPlan:
    """Resolve `mode` ("auto", "full", "guided") into what to read of the full read's `n_windows` windows (counted,
    or `estimated` from the characters before tokenizing), with the reason. Guided reading falls back to the full
    read where ranking cannot serve; auto also reads short documents whole. `mode` is checked once per request,
    by `longqa_core.plan.plan_request`."""
    if mode == "full":
        return full_read(FULL_ASKED)
    if (mode == "auto" and n_windows <= AUTO_MIN_WINDOWS) or n_windows <= FIRST_ROUND_WINDOWS:
        fit = f"{'about ' if estimated else ''}{n_windows} window{'s' if n_windows != 1 else ''}"
        why = (f"auto reads guided past {AUTO_MIN_WINDOWS}" if mode == "auto"
               else f"the first round alone reads {FIRST_ROUND_WINDOWS}")
        return full_read(f"the documents fit in {fit}: read whole ({why})", "few_windows")
    if _UNSPLIT_SCRIPT.search(question) or (index is not None and index.unsplit_share > UNSPLIT_SHARE):
        return full_read("the text is in a script written without spaces between words (such as Chinese or "
                         "Japanese), which the ranking cannot split into words: read whole", "unsplit_script")
    assert index is not None and ranking is not None
    if not ranking.terms:
        return full_read("the question has no content word to rank by (only common words): read whole",
                         "no_content_words")
    if not ranking.matched:
        return full_read("none of the question's content words occur in the documents: read whole", "no_match")
    tied = ranking.tied()
    if len(tied) > FLAT_SHARE * n_windows:
        return full_read(f"the question's words score alike in {len(tied)} of {n_windows} windows: too flat to "
                         f"pick from, read whole", "flat")
    first = ranking.matching()[:FIRST_ROUND_WINDOWS]  # never a window where none of the words occur
    rounds = [first]
    ties = [r for r in tied if r not in first]
    if ties:
        rounds.append(ties)
    decisive = len(tied) <= FIRST_ROUND_WINDOWS
    why = ("the best stand clear of the rest" if decisive
           else f"{len(tied)} score alike, all read before stopping")
    basis = f"ranked the full read's {n_windows} windows on {', '.join(as_asked(question, ranking.matched))}"
    centres = {w: int(ranking.centres[w]) for round_windows in rounds for w in round_windows}
    return ReadingPlan("guided", "ranked", f"{basis}: {why}; the other windows are read if the answer stays weak",
                       rounds, decisive, basis, centres=centres)


def weak_after_guided(plan: ReadingPlan, windows_read: int, windows_left: int) -> ReadingPlan:
    """The plan a guided read goes on with when its answer stays weak: the windows not read yet, saying why."""
    return full_read(f"guided reading found no strong answer in {windows_read} window"
                     f"{'s' if windows_read != 1 else ''} ({plan.basis}): read the other {windows_left}, the whole "
                     f"document", "weak_after_guided")


def expected_windows(plan: ReadingPlan) -> list[int]:
    """What a guided read is expected to read before it stops on a strong answer: the first round, and the ties
    too where the ranking was not decisive."""
    rounds = plan.rounds
    return rounds[0] + (rounds[1] if len(rounds) > 1 and not plan.decisive else [])


# Reading windows ----------------------------------------------------------------------------------------------
@dataclass
class GuidedRead:
    """What a read of some of the full read's windows found: the windows read (`indices` into the plan's cuts, in
    the order read) with their logits, the batch size used, the notices, the best answer's score, whether the time
    budget cut the rounds short, and what the forward passes measured."""

    indices: list[int] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)
    logits: list = field(default_factory=list)
    batch_size: int = 1
    notices: list[str] = field(default_factory=list)
    best_score: float | None = None
    cut_short: bool = False
    forward_tokens: int = 0
    forward_windows: int = 0
    forward_s: float = 0.0
    narrowed: set[int] = field(default_factory=set)  # windows (`indices`) read sized to their passage and kept
    widened: int = 0  # windows read sized to their passage first, then whole because the answer was weak

    def drop(self, indices: list[int]) -> None:
        """Forget the windows at `indices` (read sized to their passage): they are read again whole."""
        keep = [i for i, index in enumerate(self.indices) if index not in set(indices)]
        self.indices = [self.indices[i] for i in keep]
        self.windows = [self.windows[i] for i in keep]
        self.logits = [self.logits[i] for i in keep]
        self.narrowed -= set(indices)

    def in_document_order(self) -> tuple[list[int], list[Window], list]:
        """The windows read and their logits in the full read's order (what decoding them as the full read needs)."""
        order = sorted(range(len(self.indices)), key=self.indices.__getitem__)
        return ([self.indices[i] for i in order], [self.windows[i] for i in order], [self.logits[i] for i in order])


def read_windows(runner: Runner, tokenizer, plan, indices: list[int], read: GuidedRead, batch_state: BatchState,
                 measurement, *, should_stop: StopCheck | None = None,
                 on_window_progress: Callable[[WindowProgress], None] | None = None,
                 cuts: list[WindowCut] | None = None,
                 on_batch: Callable[[list[Window], list], None] | None = None) -> Generator[None, None, None]:
    """Read the plan's windows at `indices` (into `plan.cuts`; `cuts`: parts of them to read instead, one each)
    and add them, their logits and what the passes measured to `read`; progress counts on from the windows `read`
    already holds; `on_batch` hears each batch, and it yields after each (`batching.iter_windows`)."""
    with measurement.stage("tokenize"):
        new = cut_windows(tokenizer, plan.question, plan.documents, plan.document_tokens,
                          cuts if cuts is not None else [plan.cuts[i] for i in indices], should_stop=should_stop)
    done_before, windows_total = len(read.windows), len(plan.cuts)

    def progress(state: WindowProgress) -> None:
        if on_window_progress is not None:
            on_window_progress(replace(state, windows_done=done_before + state.windows_done,
                                       windows_total=max(windows_total, done_before + len(new))))
    with measurement.stage("forward"):
        logits, read.batch_size, sample = yield from iter_windows(runner, new, tokenizer.pad_token_id,
                                                                  plan.settings, batch_state,
                                                                  should_stop=should_stop,
                                                                  on_window_progress=progress, on_batch=on_batch)
    read.forward_tokens += sample.tokens
    read.forward_windows += sample.windows
    read.forward_s += sample.seconds
    read.indices.extend(indices)
    read.windows.extend(new)
    read.logits.extend(logits)


def read_rounds(runner: Runner, tokenizer, plan, batch_state: BatchState, measurement, evidence: no_answer.Evidence,
                *, should_stop: StopCheck | None = None,
                on_window_progress: Callable[[WindowProgress], None] | None = None,
                on_batch: Callable[[list[Window], list], None] | None = None) -> Generator[None, None, GuidedRead]:
    """Read a guided plan's rounds (`longqa_core.plan.RequestPlan`: windows of the full read) in order, deciding after
    each whether the answer so far is enough; a later round that would pass the time budget is not read. `evidence`:
    the request's one `no_answer.Evidence`, which a rule that needs evidence asks of each round's best answer;
    `on_batch` hears each batch, and it yields after each (`batching.iter_windows`). After a round the rule only
    says whether to read on (an answer it would call "not found" is as weak as none); the request's verdict is
    judged once, after the read (`answering.judge_answers`). With `settings.passage_window_tokens`, a round's
    windows are read first sized to their best passage (`RequestPlan.narrowed_cuts`), and read again whole, in place
    of those, only where the answer after them is weak."""
    settings, rounds = plan.settings, plan.reading
    read = GuidedRead(batch_size=batch_state.size if settings.adaptive_batching else settings.batch_size)
    rule = no_answer_rule(settings)

    def best_score() -> float | None:
        """The best answer's score of the windows read so far; None where there is none, or the request's rule
        calls it "not found" (as weak as no answer: read on)."""
        with measurement.stage("decode"):
            decoded = decode(read.windows, read.logits, plan.documents, replace(settings, top_k=1),
                             stop_check(should_stop), top_k=no_answer.answer_pool(rule, 1))
        answers, missing, _ = no_answer.evidenced_first(rule, decoded.answers, evidence,  # as the verdict will
                                                        decoded.null_score)
        score = answers[0].score if answers else None
        return None if no_answer.is_found(rule, score, decoded.null_score, missing[0] if missing else None) is False \
            else score

    for round_index, round_windows in enumerate(rounds.rounds):
        new_tokens = plan.read_tokens(round_windows)  # what the round runs first: sized to its passages where asked
        rate = batch_state.tokens_per_s
        predicted = batch_state.seconds_for_tokens(new_tokens)
        forward_after = None if predicted is None else measurement.latency_s.get("forward", 0.0) + predicted
        if round_index > 0 and passes_time_limit(forward_after, settings.max_request_s):
            read.notices.append(f"Read {len(read.windows):,} windows; reading {len(round_windows):,} more would pass "
                                f"the limit of {settings.max_request_s:g} s a request, so the answer comes from "
                                f"those read.")
            read.cut_short = True
            break
        if round_index == 0:
            check_predicted_time(predicted, settings, len(round_windows), new_tokens, rate)
        narrowed = plan.narrowed_cuts(round_windows)
        if narrowed is not None:
            yield from read_windows(runner, tokenizer, plan, round_windows, read, batch_state, measurement,
                                    should_stop=should_stop, on_window_progress=on_window_progress, cuts=narrowed,
                                    on_batch=on_batch)
            read.narrowed |= set(round_windows)
            read.best_score = best_score()
            if rounds.is_weak(read.best_score):  # widen: the round's windows whole, as without sizing
                whole_s = batch_state.seconds_for_tokens(plan.cut_tokens(round_windows))
                if whole_s is not None and passes_time_limit(measurement.latency_s.get("forward", 0.0) + whole_s,
                                                             settings.max_request_s):
                    read.notices.append(f"Read {len(read.windows):,} windows sized to their passage; reading them "
                                        f"whole would pass the limit of {settings.max_request_s:g} s a request, so "
                                        f"the answer comes from those read.")
                    read.cut_short = True
                    break
                read.drop(round_windows)
                read.widened += len(round_windows)
                narrowed = None
        if narrowed is None:
            yield from read_windows(runner, tokenizer, plan, round_windows, read, batch_state, measurement,
                                    should_stop=should_stop, on_window_progress=on_window_progress,
                                    on_batch=on_batch)
            read.best_score = best_score()
        if rounds.should_stop_after(round_index, read.best_score):
            break
    return read


def rest_passes_limit(settings: EngineSettings, batch_state: BatchState, forward_s: float, windows_left: int,
                      window_tokens_left: int) -> str | None:
    """The notice to give when reading the `windows_left` windows not read yet (`window_tokens_left` tokens) would
    pass `settings.max_request_s` at the measured rate (counting the `forward_s` already spent), else None."""
    left_s = batch_state.seconds_for_tokens(window_tokens_left)
    if settings.max_request_s is None or left_s is None:
        return None
    predicted = forward_s + left_s
    if predicted <= settings.max_request_s:
        return None
    return (f"The answer is weak, and reading the other {windows_left:,} windows would take about "
            f"{predicted:,.0f} s in all, over the limit of {settings.max_request_s:g} s a request: the answer comes "
            f"from the windows the ranking picked.")
