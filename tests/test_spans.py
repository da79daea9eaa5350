"""Span decoding on hand-made logits, and against the pipeline's own algorithm on random logits; answers aligned
to words, and never empty, blank or punctuation."""

import numpy as np
import pytest

from longqa_core import spans as spans_module
from longqa_core.errors import Cancelled
from longqa_core.spans import (Candidate, align_to_words, answer_reach, best_spans, is_answer_text, merge_candidates,
                               spans_per_window, window_candidates)
from tests.reference_qa import get_indices, project_span, select_starts_ends

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


QUESTION_TOKENS = 4  # `<s>`, two question tokens, `</s>`: positions 0-3 of every hand-made window


def layout(pieces: list[str]):
    """A window laid out as a byte-level BPE tokenizer would: the text, each token's trimmed character span (a
    bare-space token has none, like "Ġ" before a word) and the context mask."""
    text, offsets = "", [(0, 0)] * QUESTION_TOKENS
    for piece in pieces:
        start = len(text)
        text += piece
        while start < len(text) and text[start].isspace():
            start += 1
        offsets.append((start, len(text)))
    offsets.append((0, 0))  # the final `</s>`
    context = np.zeros(len(offsets), dtype=bool)
    context[QUESTION_TOKENS:-1] = True
    return text, offsets, context


def peaked(length: int, peaks: dict[int, float]) -> np.ndarray:
    logits = np.full(length, -5.0)
    for index, value in peaks.items():
        logits[index] = value
    return logits


FREEDONIA = ["Freedonia", " is", " small", ".", " The", " capital", " of", " Freedonia", " is", " Fred", "ville", ".",
             " ", "The", " anthem", " is", " Hail", " Freedonia", "!", "\n\n", " ...", " --"]
T = {piece.strip() + str(i): QUESTION_TOKENS + i for i, piece in enumerate(FREEDONIA)}  # "Fred9" -> its position


def test_a_span_inside_a_word_widens_to_the_whole_word():
    text, offsets, context = layout(FREEDONIA)
    start = peaked(len(offsets), {T["ville10"]: 9.0})
    end = peaked(len(offsets), {T["ville10"]: 9.0})
    found, _ = window_candidates(start, end, context, offsets, text, 0, top_k=1, max_answer_len=15)
    assert found[0].text == "Fredville"
    assert text[found[0].start_char:found[0].end_char] == "Fredville"
    start = peaked(len(offsets), {T["Fred9"]: 9.0})
    end = peaked(len(offsets), {T["Fred9"]: 9.0})
    assert window_candidates(start, end, context, offsets, text, 0, 1, 15)[0][0].text == "Fredville"


def test_a_punctuation_span_falls_through_to_the_next_candidate():
    text, offsets, context = layout(FREEDONIA)
    start = peaked(len(offsets), {T[".3"]: 12.0, T["Fred9"]: 6.0})  # "." by far the likeliest
    end = peaked(len(offsets), {T[".3"]: 12.0, T["ville10"]: 6.0})
    spans, _ = best_spans(start, end, context, 0, top_k=1, max_answer_len=3)
    assert text[offsets[spans[0].start_token][0]:offsets[spans[0].end_token][1]] == "."  # what the model says
    found, _ = window_candidates(start, end, context, offsets, text, 0, top_k=1, max_answer_len=3)
    assert found[0].text == "Fredville"
    assert found[0].score == pytest.approx(spans_after_the_first(start, end, context)[0].score)
    assert all(is_answer_text(c.text) for c in found)


def spans_after_the_first(start, end, context):
    return best_spans(start, end, context, 0, top_k=2, max_answer_len=3)[0][1:]


def test_an_empty_span_falls_through_to_the_next_candidate():
    text, offsets, context = layout(["Hello", ".", "\n\n", "\n\n", " The", " capital", " is", " Fredville", "."])
    blank = QUESTION_TOKENS + 2
    assert offsets[blank][0] == offsets[blank][1]  # a white-space token: no characters once trimmed
    start = peaked(len(offsets), {blank: 12.0, blank + 1: 12.0, QUESTION_TOKENS + 7: 5.0})
    end = peaked(len(offsets), {blank: 12.0, blank + 1: 12.0, QUESTION_TOKENS + 7: 5.0})
    spans, _ = best_spans(start, end, context, 0, top_k=3, max_answer_len=2)
    assert all(not text[offsets[s.start_token][0]:offsets[s.end_token][1]].strip() for s in spans)  # all blank
    found, _ = window_candidates(start, end, context, offsets, text, 0, top_k=3, max_answer_len=2)
    assert found[0].text == "Fredville"
    assert all(c.text.strip() == c.text and is_answer_text(c.text) for c in found)


def test_a_window_whose_every_top_span_is_punctuation_still_offers_a_word():
    pieces = [" ..."] * 20 + [" Fredville"] + [" --"] * 20
    text, offsets, context = layout(pieces)
    word = QUESTION_TOKENS + 20
    punctuation = {QUESTION_TOKENS + i: 10.0 for i in range(len(pieces)) if i != 20}
    start = peaked(len(offsets), {**punctuation, word: 1.0})
    end = peaked(len(offsets), {**punctuation, word: 1.0})
    spans, _ = best_spans(start, end, context, 0, top_k=spans_per_window(1), max_answer_len=1)
    assert not any(is_answer_text(text[offsets[s.start_token][0]:offsets[s.end_token][1]]) for s in spans)
    found, _ = window_candidates(start, end, context, offsets, text, 0, top_k=1, max_answer_len=1)
    assert [c.text for c in found] == ["Fredville"]


def test_a_window_of_punctuation_alone_gives_no_answer_rather_than_an_empty_one():
    text, offsets, context = layout([" ...", " --", " !", "\n\n", " ?"])
    rng = np.random.default_rng(3)
    found, _ = window_candidates(rng.normal(size=len(offsets)), rng.normal(size=len(offsets)), context, offsets, text,
                                 0, top_k=5, max_answer_len=15)
    assert found == []


def test_spans_that_align_to_the_same_words_merge_their_scores():
    text, offsets, context = layout(FREEDONIA)
    start = peaked(len(offsets), {T["Fred9"]: 8.0, T["ville10"]: 8.0})
    end = peaked(len(offsets), {T["ville10"]: 8.0})
    found, _ = window_candidates(start, end, context, offsets, text, 0, top_k=1, max_answer_len=15)
    fredville = [c for c in found if c.text == "Fredville"]
    # "Fred…ville" and "ville" both become "Fredville"; a third alignment, a million times weaker, is kept or not by
    # the last bit of the CPU's exp (kept on an AVX2-only CPU)
    assert len([c for c in fredville if c.score > 1e-3]) == 2
    merged = merge_candidates(found, top_k=1)
    assert merged[0].text == "Fredville"
    assert merged[0].score == pytest.approx(sum(c.score for c in fredville))


@pytest.mark.parametrize(("text", "first", "last", "expected"), [
    ("The capital is Fredville.", (19, 24), (19, 24), "Fredville"),  # "ville" inside a word
    ("The capital is Fredville.", (15, 19), (24, 25), "Fredville"),  # the sentence's full stop is not the answer's
    ("It has 48,213 people.", (9, 10), (9, 10), "48,213"),  # a number is one word
    ("It has 48,213 people.", (9, 10), (10, 13), "48,213"),  # ",213" is no answer
    ("Signed, J. K. Smith.", (8, 9), (12, 13), "J. K."),  # an initial's full stop stays
    ("Ask the clerk (room 4), then go.", (15, 19), (21, 22), "room 4"),  # a bracket without its partner goes
    ("Its code is VX-2291 now.", (15, 19), (15, 19), "2291"),  # "-" separates words, as in the tokenizer
    ("It is the 1990s.", (12, 14), (12, 14), "1990"),  # digits and letters are different words
    ("Ask O'Hara Mills.", (6, 8), (11, 16), "Hara Mills"),
    ("Hail Freedonia!\n\nNext", (5, 9), (17, 17), "Freedonia"),  # ends on a white-space token: trimmed
    ("The anthem is Hail Freedonia.", (9, 10), (14, 14), "anthem is Hail"),  # a bare "Ġ" belongs to the word after
    ("   ", (1, 1), (2, 2), ""),
])
def test_align_to_words(text, first, last, expected):
    start, end = align_to_words(text, first, last)
    assert text[start:end] == expected


def test_a_word_cut_by_the_window_edge_is_completed_from_the_document():
    text = "Ministers found it appropriate to process requests."
    start, end = align_to_words(text, (21, 30), (35, 41))  # the window began at "propriate"
    assert text[start:end] == "appropriate to process"


WORDS_TEXT = ("It's the 1990s' best-known VX-2291 code. O'Hara Mills  had 4,102 metres;\n\nthe  St. Ives\tUnit 7! "
              "'stop' said he -- ok?? 12:30pm __init__ x_y e.g. 'test.log.1'. Naïve café №5 ½ price — “quoted” "
              "text… The capital of Freedonia is Fredville. \n The anthem of Freedonia is Hail Freedonia.")


@pytest.mark.slow
def test_words_are_the_tokenizers_own_words(tiny_tokenizer):
    """Every span of up to 15 tokens aligns exactly as the pipeline's word_to_chars does with a real tokenizer (the
    tiny one splits most words into pieces), plus the project's trimming."""
    encoding = tiny_tokenizer(WORDS_TEXT, add_special_tokens=False, return_offsets_mapping=True)
    words = encoding
    enc = encoding[0]
    n = len(enc.ids)
    assert n > 2 * len(WORDS_TEXT.split())  # many words are several tokens
    for s in range(n):
        for e in range(s, min(n, s + 15)):
            ours = align_to_words(WORDS_TEXT, enc.offsets[s], enc.offsets[e])
            pipeline = project_span(WORDS_TEXT, words, *get_indices(enc, s, e, 0, True))
            assert ours == pipeline or ours[0] == ours[1] and pipeline[0] == pipeline[1], (s, e, WORDS_TEXT[ours[0]:ours[1]], WORDS_TEXT[pipeline[0]:pipeline[1]])


@pytest.mark.parametrize(("text", "is_answer"), [("", False), ("  \n", False), (".", False), ("...", False),
                                                 ("—", False), ("“”", False), ("7", True), ("a.", True), ("½", True)])
def test_what_counts_as_an_answer(text, is_answer):
    assert is_answer_text(text) is is_answer


EMOJI = ["😀", "🎉", "🧪", " ", "...", " —", "\n\n"]


def count_alignments(monkeypatch) -> list[int]:
    calls = []
    real = spans_module.align_to_words

    def counting(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(spans_module, "align_to_words", counting)
    return calls


def test_a_window_of_emoji_and_punctuation_aligns_no_span(monkeypatch):
    text, offsets, context = layout(EMOJI * 300)
    rng = np.random.default_rng(4)
    calls = count_alignments(monkeypatch)
    found, null = window_candidates(rng.normal(size=len(offsets)), rng.normal(size=len(offsets)), context, offsets,
                                    text, 0, top_k=3, max_answer_len=15)
    assert found == [] and len(calls) == 1  # before: each of its ~30,000 spans was aligned, then rejected
    assert 0 < null < 1


def test_one_word_among_emoji_is_still_found_after_few_alignments(monkeypatch):
    pieces = EMOJI * 100 + [" Fredville"] + EMOJI * 100
    text, offsets, context = layout(pieces)
    word = QUESTION_TOKENS + len(EMOJI) * 100
    emoji_peaks = {QUESTION_TOKENS + i: 10.0 for i in range(len(pieces)) if i != len(EMOJI) * 100}
    start = peaked(len(offsets), {**emoji_peaks, word: 1.0})
    end = peaked(len(offsets), {**emoji_peaks, word: 1.0})
    calls = count_alignments(monkeypatch)
    found, _ = window_candidates(start, end, context, offsets, text, 0, top_k=1, max_answer_len=1)
    assert [c.text for c in found] == ["Fredville"]
    # the best span, then the word and the three emoji written against it ("Fredville😀🎉🧪"), of 1,400 tokens
    assert len(calls) <= 5


def allowing_every_span(text, offsets, context):
    return np.zeros(len(offsets), dtype=np.int64), np.ones(len(offsets), dtype=np.int64)


MIXED_TEXT = WORDS_TEXT + " 😀🎉🧪 ... 😀🎉🧪 -- x 😀🎉" + "😀…" * 110 + "z" + "—" * 210 + " 7 ¡¿ 🧪🧪"


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_leaving_out_hopeless_spans_changes_no_answer(tiny_tokenizer, monkeypatch, seed):
    """The same candidates, scores and places as aligning every span and rejecting those without a letter or digit
    (what decoding did before `answer_reach`), on real tokens of prose, emoji and long runs without white space."""
    encoding = tiny_tokenizer(MIXED_TEXT, add_special_tokens=False, return_offsets_mapping=True)
    offsets = [(0, 0)] * QUESTION_TOKENS + list(encoding["offset_mapping"]) + [(0, 0)]
    context = np.zeros(len(offsets), dtype=bool)
    context[QUESTION_TOKENS:-1] = True
    rng = np.random.default_rng(seed)
    no_word = np.array([not is_answer_text(MIXED_TEXT[a:b]) for a, b in offsets]) & context
    start = rng.normal(scale=4, size=len(offsets)) + 6 * no_word  # the model favours emoji and punctuation
    end = rng.normal(scale=4, size=len(offsets)) + 6 * no_word
    reaches = []
    monkeypatch.setattr(spans_module, "answer_reach", lambda *args: reaches.append(1) or answer_reach(*args))
    ours = window_candidates(start, end, context, offsets, MIXED_TEXT, 0, top_k=5, max_answer_len=15)
    assert reaches == [1]
    monkeypatch.setattr(spans_module, "answer_reach", allowing_every_span)
    assert ours == window_candidates(start, end, context, offsets, MIXED_TEXT, 0, top_k=5, max_answer_len=15)


@pytest.mark.slow
def test_reach_never_rules_out_a_span_that_aligns_to_an_answer(tiny_tokenizer):
    encoding = tiny_tokenizer(MIXED_TEXT, add_special_tokens=False, return_offsets_mapping=True)
    offsets = list(encoding["offset_mapping"])
    before_first, through_last = answer_reach(MIXED_TEXT, offsets, np.ones(len(offsets), dtype=bool))
    ruled_out = 0
    for s in range(len(offsets)):
        for e in range(s, min(len(offsets), s + 6)):  # widening depends on the end tokens, not the length
            start, end = align_to_words(MIXED_TEXT, offsets[s], offsets[e])
            if through_last[e] <= before_first[s]:
                ruled_out += 1
                assert not is_answer_text(MIXED_TEXT[start:end]), (s, e, MIXED_TEXT[start:end])
    assert ruled_out > 500  # the emoji and punctuation runs are left out


def test_should_stop_ends_decoding_with_cancelled():
    text, offsets, context = layout(FREEDONIA * 40)
    rng = np.random.default_rng(5)
    start, end = rng.normal(size=len(offsets)), rng.normal(size=len(offsets))
    with pytest.raises(Cancelled):
        window_candidates(start, end, context, offsets, text, 0, top_k=1, max_answer_len=15,
                          should_stop=lambda: True)
    asked = []

    def stop_on_third_look():
        asked.append(1)
        return len(asked) >= 3

    with pytest.raises(Cancelled):  # looked at while spans are aligned, not only before
        window_candidates(start, end, context, offsets, text, 0, top_k=200, max_answer_len=15,
                          should_stop=stop_on_third_look)
    assert len(asked) == 3
    never = window_candidates(start, end, context, offsets, text, 0, top_k=200, max_answer_len=15,
                              should_stop=lambda: False)
    assert never == window_candidates(start, end, context, offsets, text, 0, top_k=200, max_answer_len=15)
    assert len(never[0]) == spans_per_window(200)
