"""The engine on a tiny random model: windows, offsets, batching, back-off, and the pipeline's answers."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from longqa import demo_task
from longqa.documents import Document
from longqa.engine import (BatchState, EngineSettings, ModelRunner, answer, collate, make_windows,
                           truncate_question)
from longqa.errors import InputError, OutOfMemoryError
from longqa.spans import is_answer_text
from tests.reference_qa import cuts_a_word, reference_answers


def prose(seed: int, n_chars: int) -> str:
    rng = random.Random(seed)
    pool = demo_task.filler_pool("train")
    out = []
    while sum(map(len, out)) < n_chars:
        out.append(rng.choice(pool))
    return " ".join(out)


SETTINGS = EngineSettings(max_seq_len=128, doc_stride=32, batch_size=3)


def test_windows_cover_every_character_and_overlap_by_the_stride(tiny_tokenizer):
    text = prose(1, 6000)
    settings = SETTINGS.resolved(tiny_tokenizer)
    windows, stats = make_windows(tiny_tokenizer, "What is it?", [Document("a.txt", text)], settings)
    assert len(windows) == stats[0].windows > 5
    covered = np.zeros(len(text), dtype=bool)
    token_spans = []
    for window in windows:
        spans = [window.offsets[i] for i in np.flatnonzero(window.context)]
        token_spans.append(spans)
        for start, end in spans:
            covered[start:end] = True
            assert start == end or not text[start:end].isspace()  # a bare-space token has an empty span
    assert all(covered[i] for i, ch in enumerate(text) if not ch.isspace())
    for before, after in zip(token_spans, token_spans[1:]):
        assert before[-32:] == after[:32]  # exactly `doc_stride` tokens shared
    unique = sorted({span for spans in token_spans for span in spans})
    assert stats[0].tokens == len(unique)
    assert all(len(w.input_ids) <= 128 for w in windows)


def test_question_comes_first_and_is_the_only_global_part(tiny_tokenizer):
    settings = SETTINGS.resolved(tiny_tokenizer)
    question = "Where is the harbor?"
    windows, _ = make_windows(tiny_tokenizer, question, [Document("a", prose(2, 2000))], settings)
    question_ids = tiny_tokenizer(question, add_special_tokens=False)["input_ids"]
    batch = collate(windows[:2], tiny_tokenizer.pad_token_id)
    for row, window in enumerate(windows[:2]):
        assert window.input_ids[: len(question_ids) + 3] == [0, *question_ids, 2, 2]
        expected = torch.zeros(len(batch["input_ids"][row]), dtype=torch.long)
        expected[: len(question_ids) + 1] = 1
        assert torch.equal(batch["global_attention_mask"][row], expected)


def test_long_questions_are_cut_with_a_notice(tiny_tokenizer):
    question = "What is the weight of the bridge " + "in the old town " * 40 + "?"
    cut, notice = truncate_question(tiny_tokenizer, question, 16)
    assert len(tiny_tokenizer(cut, add_special_tokens=False)["input_ids"]) <= 16
    assert question.startswith(cut) and notice and "16" in notice
    assert truncate_question(tiny_tokenizer, "Short?", 16) == ("Short?", None)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_top_answers_match_the_reference_pipeline(tiny_model, tiny_tokenizer, seed):
    text = prose(seed, 3000)
    question = "What is the colour of the house?"
    ours = answer(ModelRunner(tiny_model), tiny_tokenizer, [Document("doc", text)], question,
                  EngineSettings(max_seq_len=128, doc_stride=32, top_k=5, batch_size=4))
    ref = reference_answers(tiny_model, tiny_tokenizer, question, text, 128, 32, top_k=5)
    assert [(a.text, a.start_char, a.end_char) for a in ours.answers] == \
        [(r["answer"], r["start"], r["end"]) for r in ref]
    np.testing.assert_allclose([a.score for a in ours.answers], [r["score"] for r in ref], rtol=1e-3)


AWKWARD = ["It's the 1990s' best-known VX-2291 code.", "O'Hara Mills  had 4,102 metres;\n\nthe  St. Ives\tUnit 7!",
           "'stop' said he -- ok?? 12:30pm __init__ x_y", "e.g. 'test.log.1'. Removes...",
           "Naïve café №5 ½ price — “quoted” text…", "The capital of Freedonia is Fredville.\n\n...\n\n"]


def awkward_prose(seed: int, n_chars: int) -> str:
    """Prose with hyphens, apostrophes, numbers, runs of punctuation and white space spliced in."""
    rng = random.Random(seed)
    sentences = prose(seed, n_chars).split(". ")
    for sentence in AWKWARD:
        sentences.insert(rng.randint(0, len(sentences)), sentence)
    return ". ".join(sentences)


@pytest.mark.parametrize("seed", range(6))
def test_word_aligned_answers_match_the_reference_pipeline(tiny_model, tiny_tokenizer, seed):
    """Small windows, so that words are cut by window edges; the tiny tokenizer splits most words in pieces."""
    text = awkward_prose(seed, 1500)
    question = "What is the code of the house?"
    for top_k in (1, 4):
        ours = answer(ModelRunner(tiny_model), tiny_tokenizer, [Document("doc", text)], question,
                      EngineSettings(max_seq_len=96, doc_stride=24, top_k=top_k, batch_size=8))
        ref = reference_answers(tiny_model, tiny_tokenizer, question, text, 96, 24, top_k=top_k)
        assert [(a.text, a.start_char, a.end_char) for a in ours.answers] == \
            [(r["answer"], r["start"], r["end"]) for r in ref]


def test_no_answer_is_empty_blank_punctuation_or_part_of_a_word(tiny_model, tiny_tokenizer):
    """A random model's top 30 answers are spans of every kind; each one is made a whole-word answer or dropped."""
    text = awkward_prose(11, 2500)
    result = answer(ModelRunner(tiny_model), tiny_tokenizer, [Document("doc", text)], "What is it?",
                    EngineSettings(max_seq_len=96, doc_stride=24, top_k=30, batch_size=8))
    assert len(result.answers) == 30
    for item in result.answers:
        assert is_answer_text(item.text) and item.text == item.text.strip()
        assert text[item.start_char:item.end_char] == item.text
        assert not cuts_a_word(text, item.start_char, item.end_char), item.text


def test_null_answer_matches_the_reference_pipeline(tiny_model, tiny_tokenizer):
    text = prose(5, 1500)
    ours = answer(ModelRunner(tiny_model), tiny_tokenizer, [Document("doc", text)], "Who?",
                  EngineSettings(max_seq_len=128, doc_stride=32, top_k=3, handle_impossible_answer=True))
    ref = reference_answers(tiny_model, tiny_tokenizer, "Who?", text, 128, 32, top_k=3,
                            handle_impossible_answer=True)
    assert [a.text for a in ours.answers] == [r["answer"] for r in ref]


def test_answers_point_into_the_right_document(tiny_model, tiny_tokenizer):
    documents = [Document("one.txt", prose(7, 1500)), Document("two.md", prose(8, 2500)),
                 Document("three.txt", prose(9, 800))]
    result = answer(ModelRunner(tiny_model), tiny_tokenizer, documents, "What is it?",
                    EngineSettings(max_seq_len=128, doc_stride=32, top_k=10, batch_size=5))
    assert len(result.answers) == 10
    for item in result.answers:
        document = documents[item.document_index]
        assert item.document == document.name
        assert document.text[item.start_char:item.end_char] == item.text
    assert [s.name for s in result.documents] == ["one.txt", "two.md", "three.txt"]
    assert result.windows == sum(s.windows for s in result.documents)
    assert result.tokens == sum(s.tokens for s in result.documents)
    assert result.latency_s["total"] >= result.latency_s["forward"] > 0
    assert result.memory["host_peak_rss_bytes"] >= result.memory["host_rss_bytes"] * 0.5 > 0
    assert result.memory["peak_allocated_bytes"] is None  # no CUDA here


class FlakyRunner:
    """Runs the real model, but raises a simulated CUDA out-of-memory above `fits` windows per batch."""

    def __init__(self, model, fits: int):
        self.inner = ModelRunner(model)
        self.devices = self.inner.devices
        self.fits = fits
        self.batch_sizes: list[int] = []
        self.rows_run = 0

    def __call__(self, batch):
        size = batch["input_ids"].shape[0]
        self.batch_sizes.append(size)
        if size > self.fits:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        self.rows_run += size
        return self.inner(batch)


def test_out_of_memory_halves_the_batch_and_keeps_finished_windows(tiny_model, tiny_tokenizer):
    documents = [Document("doc", prose(3, 8000))]
    settings = EngineSettings(max_seq_len=128, doc_stride=32, batch_size=8, adaptive_batching=True)
    state = BatchState(8)
    runner = FlakyRunner(tiny_model, fits=2)
    result = answer(runner, tiny_tokenizer, documents, "What is it?", settings, batch_state=state)
    assert runner.rows_run == result.windows  # no window ran twice
    assert runner.batch_sizes[:3] == [8, 4, 2]
    assert state.size == 2 and result.batch_size == 2 and result.backoffs == 2
    expected = answer(ModelRunner(tiny_model), tiny_tokenizer, documents, "What is it?",
                      EngineSettings(max_seq_len=128, doc_stride=32, batch_size=1))
    assert [a.text for a in result.answers] == [a.text for a in expected.answers]

    again = FlakyRunner(tiny_model, fits=2)
    second = answer(again, tiny_tokenizer, documents, "What is it?", settings, batch_state=state)
    assert again.batch_sizes[0] == 2 and second.backoffs == 0  # the size that worked is remembered


def test_out_of_memory_at_batch_one_names_profiles_that_fit(tiny_model, tiny_tokenizer):
    settings = EngineSettings(max_seq_len=128, doc_stride=32, batch_size=4, adaptive_batching=True)
    with pytest.raises(OutOfMemoryError, match="consumer-gpu"):
        answer(FlakyRunner(tiny_model, fits=0), tiny_tokenizer, [Document("d", prose(4, 3000))], "Why?",
               settings, batch_state=BatchState(4))


def test_out_of_memory_without_dynamic_batching_is_a_clear_error(tiny_model, tiny_tokenizer):
    runner = FlakyRunner(tiny_model, fits=1)
    with pytest.raises(OutOfMemoryError, match="batch size 4"):
        answer(runner, tiny_tokenizer, [Document("d", prose(4, 3000))], "Why?",
               EngineSettings(max_seq_len=128, doc_stride=32, batch_size=4))
    assert runner.batch_sizes == [4]


def test_other_errors_are_not_mistaken_for_out_of_memory(tiny_model, tiny_tokenizer):
    def broken(batch):
        raise RuntimeError("shape mismatch")

    broken.devices = [torch.device("cpu")]
    with pytest.raises(RuntimeError, match="shape mismatch"):
        answer(broken, tiny_tokenizer, [Document("d", "Some text here.")], "Why?",
               EngineSettings(adaptive_batching=True), batch_state=BatchState(4))


def test_bad_requests_are_refused_before_any_model_work(tiny_tokenizer):
    def must_not_run(batch):
        raise AssertionError("the model ran")

    must_not_run.devices = [torch.device("cpu")]
    documents = [Document("d", prose(6, 4000))]
    with pytest.raises(InputError, match="empty"):
        answer(must_not_run, tiny_tokenizer, documents, "   ", EngineSettings())
    with pytest.raises(InputError, match="limit"):
        answer(must_not_run, tiny_tokenizer, documents, "Why?", EngineSettings(max_total_tokens=100))
    with pytest.raises(InputError, match="No document"):
        answer(must_not_run, tiny_tokenizer, [], "Why?", EngineSettings())
    with pytest.raises(InputError):
        answer(must_not_run, tiny_tokenizer, documents, "Why?", EngineSettings(max_seq_len=100, doc_stride=90))


def test_default_window_is_the_model_limit_and_stride_the_pipeline_default(tiny_tokenizer):
    settings = EngineSettings().resolved(tiny_tokenizer)
    assert (settings.max_seq_len, settings.doc_stride) == (4096, 128)


def test_a_question_longer_than_the_document_is_fine(tiny_model, tiny_tokenizer):
    """Question tokens' offsets point into the question: they must not be trimmed against the document's text."""
    from longqa.documents import from_text
    from longqa.engine import EngineSettings, make_windows

    windows, _ = make_windows(tiny_tokenizer, "What is the colour of Zorbin? " * 5, [from_text("teal")],
                              EngineSettings().resolved(tiny_tokenizer))
    assert len(windows) == 1 and windows[0].context.sum() >= 1
