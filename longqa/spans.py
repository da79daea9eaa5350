"""Answer-span decoding from start/end logits, as transformers' removed question-answering pipeline did it.

Per window: softmax over context tokens and `<s>`, score = p_start × p_end, spans with end < start or longer
than `max_answer_len` dropped, top-k. Across windows: identical answers (case-insensitive) merge by summing
scores, optional null answer. Pure numpy; knows nothing of models or documents.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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
               top_k: int, max_answer_len: int) -> tuple[list[Span], float]:
    """Top-k spans of one window and its null score p_start(<s>) × p_end(<s>).

    `context` (L,) marks the tokens an answer may use; `<s>` at `cls_index` joins the softmax (so a model can
    say "not in this window") but never starts or ends a span.
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
    valid = inside & context[:, None] & context[np.minimum(ends, length - 1)]
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
