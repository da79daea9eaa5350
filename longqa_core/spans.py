"""Answer-span decoding from start/end logits, as transformers' removed question-answering pipeline did it.

Per window: softmax over context tokens and `<s>`, score = p_start × p_end, spans with end < start or longer
than `max_answer_len` dropped, the best `2 * top_k + 10`, each widened to whole words (the pipeline's
`align_to_words=True`). Across windows: identical answers (case-insensitive) merge by summing scores, optional
null answer. Deliberate differences, so that an answer is never empty or a broken piece: words cut by a window's
edge are completed, numbers are never cut at their separators, stray punctuation is trimmed from the ends, and a
span that is empty, white space or punctuation once trimmed is never an answer: the window's next span takes its
place. Spans that cannot hold a letter or digit however they widen (emoji, punctuation, white space) are never
enumerated, so decoding costs in proportion to the text that can be an answer. `decode_answers` does this over a
request's windows and their logits. Pure numpy and text; knows nothing of
models or tokenizers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from longqa_core.documents import Document, Location, format_location, locate
from longqa_core.errors import Cancelled
from longqa_core.limits import EngineSettings
from longqa_core.windows import Window


@dataclass(frozen=True)
class Span:
    score: float
    start_token: int
    end_token: int


def window_probabilities(logits: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """Softmax of `logits` (L,) over `candidates` (L,) bool; other positions get probability 0."""
    masked = np.where(candidates, logits.astype(np.float64), -np.inf)  # (L,)
    shifted = np.exp(masked - masked.max())
    return shifted / shifted.sum()


def best_spans(start_logits: np.ndarray, end_logits: np.ndarray, context: np.ndarray, cls_index: int | None,
               top_k: int, max_answer_len: int,
               reach: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[list[Span], float]:
    """Top-k spans of one window and its null score p_start(<s>) × p_end(<s>).

    `context` (L,) marks the tokens an answer may use; `<s>` at `cls_index` joins the softmax (so a model can
    say "not in this window") but never starts or ends a span. With `reach` (from `answer_reach`), spans that
    cannot hold a letter or digit are left out; the probabilities of the others do not change.
    """
    candidates = context.copy()
    if cls_index is not None:
        candidates[cls_index] = True
    p_start = window_probabilities(start_logits, candidates)  # (L,)
    p_end = window_probabilities(end_logits, candidates)  # (L,)
    null_score = float(p_start[cls_index] * p_end[cls_index]) if cls_index is not None else 0.0
    p_start = np.where(context, p_start, 0.0)
    p_end = np.where(context, p_end, 0.0)

    length = len(p_start)
    width = min(max_answer_len, length)
    # band[i, j] = score of the span starting at i and ending at i + j: only the spans the pipeline keeps
    ends = np.arange(length)[:, None] + np.arange(width)[None, :]  # (L, W)
    inside = ends < length
    band = p_start[:, None] * np.where(inside, p_end[np.minimum(ends, length - 1)], 0.0)  # (L, W)
    valid = inside & context[:, None] & context[np.minimum(ends, length - 1)]  # (L, W)
    if reach is not None:
        before_first, through_last = reach
        valid &= through_last[np.minimum(ends, length - 1)] > before_first[:, None]
    band = np.where(valid, band, -1.0)

    flat = band.ravel()
    k = min(top_k, int(valid.sum()))
    if k <= 0:
        return [], null_score
    top = np.argpartition(-flat, k - 1)[:k]
    top = top[np.argsort(-flat[top], kind="stable")]
    starts, offsets = np.unravel_index(top, band.shape)
    return [Span(float(flat[i]), int(s), int(s + o)) for i, s, o in zip(top, starts, offsets)], null_score


@dataclass
class Candidate:
    """An answer string and where it was first found."""

    text: str
    score: float
    document_index: int
    start_char: int
    end_char: int


# The byte-level BPE pre-tokenizer's pattern (GPT-2's), which every Longformer (RoBERTa) tokenizer splits words
# with: a token never crosses one of these words, so they are the words the pipeline's `token_to_word` saw.
# One change: digits joined by "," or "." ("48,213", "3.5") are one word here, so a number is never cut at its separator.
MAX_WORD_CHARS = 200
_WORD_RE = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+(?:[.,]\d+)*| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+")
# Punctuation an answer never starts or ends with: what is left of the sentence around it ("Fredville." -> "Fredville").
_LEADING_PUNCTUATION = set(",.;:!?»-–—/|")
_TRAILING_PUNCTUATION = set(",.;:!?«-–—/|")
_PAIRS = {"(": ")", "[": "]", "{": "}", ")": "(", "]": "[", "}": "{"}


def spans_per_window(top_k: int) -> int:
    """Spans kept per window: transformers 5.2's QuestionAnsweringPipeline.postprocess takes
    `pre_topk = top_k * 2 + 10 if align_to_words`, because aligned spans can coincide."""
    return 2 * top_k + 10


def _word_edge(text: str, index: int, want_end: bool) -> int:
    """Where the pre-tokenizer word holding character `index` (not white space) starts or ends in `text`.

    Looks at most MAX_WORD_CHARS either side: in a longer run without white space (a blob, not prose) the words
    found can differ from the tokenizer's at the run's far ends, never near `index`'s own letters.
    """
    lo, hi = max(0, index - MAX_WORD_CHARS), min(len(text), index + MAX_WORD_CHARS)
    sync = index
    while sync > lo and not text[sync - 1].isspace():
        sync -= 1
    if sync > lo:  # the pattern's matches restart at the last white-space character before a run of text
        sync -= 1
    run_end = index + 1
    while run_end < hi and not text[run_end].isspace():
        run_end += 1
    word = next(w for w in _WORD_RE.finditer(text, sync, run_end) if w.start() <= index < w.end())
    return word.end() if want_end else word.start() + (text[word.start()] == " ")


def align_to_words(text: str, first: tuple[int, int], last: tuple[int, int]) -> tuple[int, int]:
    """The characters of the span from the token at `first` to the token at `last` (their character spans in
    `text`), widened to the whole words they are part of, as the pipeline's `word_to_chars` gave them, then
    trimmed of white space. A token with no characters (a bare "Ġ" before a word) belongs to the word after it,
    as in the pre-tokenizer, where the space is part of " word".

    Differences from the pipeline, so that an answer is never a broken piece: a word cut by the window's edge is
    completed from the document (the pipeline's `word_to_chars` saw only the window's own tokens and could answer
    "ropriate"), a number is never cut at its separator (",213" of "48,213"), and punctuation left over from the
    sentence is trimmed from the ends (see `trim_punctuation`).
    """
    start, end = first[0], last[1]
    if start < len(text) and not text[start].isspace():
        start = _word_edge(text, start, want_end=False)
    if last[0] < last[1]:
        end = _word_edge(text, last[1] - 1, want_end=True)
    elif 0 < end < len(text) and text[end - 1] == " " and not text[end].isspace():
        end = _word_edge(text, end, want_end=True)
    return trim_punctuation(text, start, end)


def _is_initial(text: str, start: int, end: int) -> bool:
    """Whether `text[start:end]` ends in an initial's full stop ("J. K.", "U.S."), which belongs to the answer."""
    return end - start >= 2 and text[end - 2].isupper() and (end - 3 < start or not text[end - 3].isalnum())


def trim_punctuation(text: str, start: int, end: int) -> tuple[int, int]:
    """`text[start:end]` without white space and stray punctuation at its ends: a leading comma or hyphen, a
    sentence's full stop (not an initial's), a bracket whose partner is not in the answer."""
    while True:
        before = (start, end)
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        if start < end:
            first, last = text[start], text[end - 1]
            if first in _LEADING_PUNCTUATION or (first in _PAIRS and _PAIRS[first] not in text[start + 1:end]):
                start += 1
            elif (last in _TRAILING_PUNCTUATION and not (last == "." and _is_initial(text, start, end))) or \
                    (last in _PAIRS and _PAIRS[last] not in text[start:end - 1]):
                end -= 1
        if (start, end) == before:
            return start, max(start, end)


def is_answer_text(text: str) -> bool:
    """Whether a span can be shown as an answer: at least one letter or digit (not empty, blank or punctuation)."""
    return any(ch.isalnum() for ch in text)


def answer_reach(text: str, offsets: list[tuple[int, int]], context: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per token (L,), letters and digits counted in `text` before the first character a span starting at the
    token can widen back to, and up to the last one a span ending at it can widen forward to: the span from token
    s to token e can be an answer only if `through_last[e] > before_first[s]`.

    Generous by construction, never exact: `align_to_words` widens within the run of non-white-space characters
    around a token and at most MAX_WORD_CHARS + 1 characters away, and trimming never removes a letter or digit,
    so a span this rules out would have been rejected after aligning. Reads only the window's stretch of `text`.
    """
    positions = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)  # (L, 2)
    if not context.any():
        return np.zeros(len(positions), dtype=np.int64), np.zeros(len(positions), dtype=np.int64)
    lo = max(0, int(positions[context, 0].min()) - MAX_WORD_CHARS - 1)
    hi = min(len(text), int(positions[context, 1].max()) + MAX_WORD_CHARS + 1)
    stretch = text[lo:hi]
    n = len(stretch)
    alnum = np.fromiter(map(str.isalnum, stretch), dtype=bool, count=n)  # (n,)
    space = np.fromiter(map(str.isspace, stretch), dtype=bool, count=n)  # (n,)
    counts = np.concatenate(([0], np.cumsum(alnum)))  # (n + 1,) letters and digits in stretch[:i]
    index = np.arange(n + 1)
    # the last white space before i, and the first at or after i (the stretch's ends if none)
    space_before = np.maximum.accumulate(np.concatenate(([0], np.where(space, index[:-1], 0))))  # (n + 1,)
    space_from = np.minimum.accumulate(np.where(np.append(space, True), index, n)[::-1])[::-1]  # (n + 1,)
    first = np.clip(positions[:, 0] - lo, 0, n)  # (L,)
    last = np.clip(positions[:, 1] - lo, 0, n)  # (L,)
    widest_start = np.maximum(space_before[first], first - MAX_WORD_CHARS - 1).clip(0)
    widest_end = np.minimum(space_from[last], last + MAX_WORD_CHARS).clip(max=n)
    return counts[widest_start], counts[widest_end]


# Spans aligned between two looks at `should_stop`: about a millisecond of work.
_SPANS_PER_STOP_CHECK = 128


def window_candidates(start_logits: np.ndarray, end_logits: np.ndarray, context: np.ndarray,
                      offsets: list[tuple[int, int]], text: str, document_index: int, top_k: int,
                      max_answer_len: int, cls_index: int | None = 0,
                      should_stop: Callable[[], bool] | None = None) -> tuple[list[Candidate], float]:
    """One window's answers, best first, and its null score.

    The best `spans_per_window(top_k)` spans that are answers, each aligned to words in `text` (the window's
    document; `offsets` are its tokens' character spans). A span that is no answer once aligned is skipped and the
    next one taken, so a window whose best span trims to nothing still offers its real candidates; at the first
    such span, the window's spans that can hold no letter or digit however they widen are left out
    (`answer_reach`), so a window of emoji or punctuation is not looked at span by span.

    `should_stop`, if given, is called with no arguments before any work and about every millisecond of it
    (every `_SPANS_PER_STOP_CHECK` spans aligned); when it returns True, decoding ends with `Cancelled` and
    nothing is returned. It should be cheap (a threading.Event's `is_set`, a clock compared with a deadline), and
    may say True for a request over its time budget as well as for one whose visitor pressed Stop.
    """
    def check_stop():
        if should_stop is not None and should_stop():
            raise Cancelled("The request was cancelled while its answers were being decoded.")

    check_stop()
    wanted = spans_per_window(top_k)
    reach = None  # worked out at the first span that is no answer: most windows of prose never need it
    kept: list[Candidate] = []
    seen, asked = 0, wanted
    while True:
        check_stop()
        spans, null_score = best_spans(start_logits, end_logits, context, cls_index, asked, max_answer_len, reach)
        for number, span in enumerate(spans[seen:], start=1):
            if number % _SPANS_PER_STOP_CHECK == 0:
                check_stop()
            start_char, end_char = map(int, align_to_words(text, offsets[span.start_token], offsets[span.end_token]))
            if is_answer_text(text[start_char:end_char]):
                kept.append(Candidate(text[start_char:end_char], span.score, document_index, start_char, end_char))
                if len(kept) == wanted:
                    return kept, null_score
            elif reach is None:  # start again without the spans that cannot be answers
                reach = answer_reach(text, offsets, context)
                kept, seen, asked = [], 0, wanted
                break
        else:
            if len(spans) < asked:  # every span of the window was looked at
                return kept, null_score
            seen, asked = len(spans), asked * 4


def merge_candidates(found: list[Candidate], top_k: int, null_score: float | None = None) -> list[Candidate]:
    """Sum the scores of identical answers (case-insensitive; the first occurrence keeps its place), then top-k.

    With `null_score` (SQuAD-2 models), the empty answer competes with the lowest "<s>" score of any window.
    """
    merged: dict[str, Candidate] = {}
    for candidate in found:
        key = candidate.text.lower()
        if key in merged:
            merged[key].score += candidate.score
        else:
            merged[key] = Candidate(candidate.text, candidate.score, candidate.document_index,
                                    candidate.start_char, candidate.end_char)
    answers = list(merged.values())
    if null_score is not None:
        answers.append(Candidate("", null_score, -1, 0, 0))
    answers.sort(key=lambda c: c.score, reverse=True)
    return answers[:top_k]


@dataclass
class Answer:
    """One answer of a request: its text, score, where it stands (its document's characters, and its `location` as
    people find it: page, heading, line; None for no answer), and its confidence in words ("high", "medium",
    "low": `longqa_core.no_answer.confidence`, set once the request's verdict is known)."""

    text: str
    score: float
    document: str | None
    document_index: int
    start_char: int
    end_char: int
    confidence: str | None = None
    location: Location | None = None

    def to_json(self) -> dict:
        """Its fields, the location as its fields and its `text` for people ("report.pdf, page 37")."""
        out = vars(self).copy()
        if self.location is not None:
            out["location"] = {**vars(self.location), "marks": [mark.to_json() for mark in self.location.marks],
                               "text": format_location(self.location)}
        return out


@dataclass
class Decoded:
    """A request's answers, best first, and the lowest "<s>" (null) score of the windows read (None: no window)."""

    answers: list[Answer]
    null_score: float | None


def decode_window(window: Window, logits, documents: list[Document], settings: EngineSettings,
                  should_stop: Callable[[], bool] | None = None) -> tuple[list[Candidate], float]:
    """One window's word-aligned candidates (`window_candidates`) and its null score; `logits` its (start, end)."""
    start, end = logits
    return window_candidates(start, end, window.context, window.offsets, documents[window.document_index].text,
                             window.document_index, settings.top_k, settings.max_answer_len, should_stop=should_stop)


def merged_answers(per_window: list[tuple[list[Candidate], float]], documents: list[Document],
                   top_k: int) -> Decoded:
    """The windows' candidates and null scores (`decode_window`, in document order) merged into a request's
    answers, each with its location."""
    found = [candidate for candidates, _ in per_window for candidate in candidates]
    null_score = min((null for _, null in per_window), default=None)
    return Decoded([Answer(c.text, c.score, documents[c.document_index].name, c.document_index, c.start_char,
                           c.end_char, location=locate(documents[c.document_index], c.start_char, c.end_char))
                    for c in merge_candidates(found, top_k)], null_score)


def decode(windows: list[Window], logits, documents: list[Document], settings: EngineSettings,
           should_stop: Callable[[], bool] | None = None, top_k: int | None = None) -> Decoded:
    """Every window's word-aligned candidates, merged across windows, the best `top_k` (default the settings')
    kept; never an empty or punctuation answer. `should_stop` ends decoding with Cancelled (see
    `window_candidates`)."""
    return merged_answers([decode_window(window, pair, documents, settings, should_stop)
                           for window, pair in zip(windows, logits)], documents, top_k or settings.top_k)


def decode_answers(windows: list[Window], logits, documents: list[Document],
                   settings: EngineSettings) -> list[Answer]:
    """`decode`'s answers alone."""
    return decode(windows, logits, documents, settings).answers
