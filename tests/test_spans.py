"""Span decoding on hand-made logits, and against the pipeline's own algorithm on random logits."""

import numpy as np
import pytest

from longqa.spans import Candidate, best_spans, merge_candidates
from tests.reference_qa import select_starts_ends

NEG = -1e4


def window(context_from: int, length: int):
    context = np.zeros(length, dtype=bool)
    context[context_from: length - 1] = True  # last token is `</s>`
    return context


def test_best_span_is_the_peak_of_start_and_end():
    context = window(4, 20)
    start = np.full(20, NEG)
    end = np.full(20, NEG)
    start[7], end[9] = 10.0, 10.0
    spans, _ = best_spans(start, end, context, 0, top_k=1, max_answer_len=15)
    assert (spans[0].start_token, spans[0].end_token) == (7, 9)
    assert spans[0].score == pytest.approx(1.0, abs=1e-6)


def test_end_before_start_is_never_chosen():
    context = window(4, 20)
    start = np.zeros(20)
    end = np.zeros(20)
    start[12], end[6] = 20.0, 20.0  # the most likely end lies before the most likely start
    spans, _ = best_spans(start, end, context, 0, top_k=5, max_answer_len=15)
    assert spans and all(s.end_token >= s.start_token for s in spans)
    assert all(not (s.start_token == 12 and s.end_token == 6) for s in spans)


def test_spans_longer_than_max_answer_len_are_dropped():
    context = window(4, 40)
    start = np.full(40, NEG)
    end = np.full(40, NEG)
    start[5], end[30] = 10.0, 10.0  # 26 tokens long
    start[20], end[22] = 2.0, 2.0
    spans, _ = best_spans(start, end, context, 0, top_k=3, max_answer_len=10)
    assert all(s.end_token - s.start_token < 10 for s in spans)
    assert (5, 30) not in [(s.start_token, s.end_token) for s in spans]


def test_question_and_special_tokens_never_answer():
    context = window(6, 20)
    start = np.zeros(20)
    end = np.zeros(20)
    start[2], end[3] = 50.0, 50.0  # inside the question
    start[19], end[19] = 50.0, 50.0  # the final `</s>`
    spans, _ = best_spans(start, end, context, 0, top_k=10, max_answer_len=15)
    assert all(context[s.start_token] and context[s.end_token] for s in spans)


def test_cls_takes_probability_mass_and_gives_the_null_score():
    context = window(4, 20)
    start = np.zeros(20)
    end = np.zeros(20)
    start[0] = end[0] = 8.0  # the model says "not in this window"
    spans, null = best_spans(start, end, context, 0, top_k=1, max_answer_len=15)
    assert null > 0.9
    assert spans[0].score < 0.01


def test_top_k_is_sorted_and_limited():
    rng = np.random.default_rng(0)
    context = window(5, 60)
    spans, _ = best_spans(rng.normal(size=60), rng.normal(size=60), context, 0, top_k=7, max_answer_len=15)
    assert len(spans) == 7
    scores = [s.score for s in spans]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("top_k", [1, 3, 10])
def test_matches_the_pipeline_algorithm_on_random_logits(seed, top_k):
    rng = np.random.default_rng(seed)
    length = int(rng.integers(30, 200))
    context = window(int(rng.integers(3, 12)), length)
    start, end = rng.normal(scale=3, size=length), rng.normal(scale=3, size=length)
    spans, null = best_spans(start, end, context, 0, top_k=top_k, max_answer_len=15)
    p_mask = (~context).astype(int)[None]
    p_mask[0, 0] = 0
    ref_starts, ref_ends, ref_scores, ref_null = select_starts_ends(
        start[None].astype(np.float32), end[None].astype(np.float32), p_mask, np.ones((1, length), dtype=int),
        top_k=top_k, handle_impossible_answer=True)
    assert [(s.start_token, s.end_token) for s in spans] == list(zip(ref_starts.tolist(), ref_ends.tolist()))
    np.testing.assert_allclose([s.score for s in spans], ref_scores, rtol=1e-4)
    assert null == pytest.approx(ref_null, rel=1e-4)


def test_identical_answers_merge_by_summing_case_insensitively():
    found = [Candidate("Paris", 0.3, 0, 10, 15), Candidate("London", 0.4, 0, 30, 36),
             Candidate("paris", 0.2, 1, 5, 10)]
    merged = merge_candidates(found, top_k=2)
    assert [c.text for c in merged] == ["Paris", "London"]
    assert merged[0].score == pytest.approx(0.5)
    assert (merged[0].document_index, merged[0].start_char) == (0, 10)  # first occurrence keeps its place


def test_null_answer_competes_when_asked():
    found = [Candidate("Paris", 0.1, 0, 10, 15)]
    merged = merge_candidates(found, top_k=2, null_score=0.8)
    assert merged[0].text == "" and merged[0].score == pytest.approx(0.8)
    assert merged[1].text == "Paris"
    assert [c.text for c in merge_candidates(found, top_k=2)] == ["Paris"]
