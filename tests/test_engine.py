"""The engine on a tiny random model: windows, offsets, batching, back-off, and the pipeline's answers."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from training import demo_task
from longqa_core.documents import Document
from longqa_core.answering import answer
from longqa_core.batching import BatchState, ModelRunner, collate
from longqa_core.no_answer import NULL_SCORE, NoAnswerRule
from longqa_core.errors import InputError, OutOfMemoryError
from longqa_core.limits import EngineSettings, truncate_question, written_as_documents
from longqa_core.windows import make_windows
from longqa_core.spans import is_answer_text
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
        spans = [tuple(window.offsets[i].tolist()) for i in np.flatnonzero(window.context)]
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
        assert window.input_ids[: len(question_ids) + 3].tolist() == [0, *question_ids, 2, 2]
        expected = torch.zeros(len(batch["input_ids"][row]), dtype=torch.long)
        expected[: len(question_ids) + 1] = 1
        assert torch.equal(batch["global_attention_mask"][row], expected)


def test_long_questions_are_cut_with_a_notice(tiny_tokenizer):
    question = "What is the weight of the bridge " + "in the old town " * 40 + "?"
    cut, notice = truncate_question(tiny_tokenizer, question, 16)
    assert len(tiny_tokenizer(cut, add_special_tokens=False)["input_ids"]) <= 16
    assert question.startswith(cut) and notice and "16" in notice
    assert truncate_question(tiny_tokenizer, "Short?", 16) == ("Short?", None)


CASED = ("Library hours changed in May. The bridge of Kelmoor is 412 metres long; the Kelmoor council paid for it.\n"
         "Kelmoor lies north of the river. Visitors to the library of Kelmoor need a card, and NASA once measured "
         "the bridge; a survey of the BRIDGE was framed. The Kelmoor Council, O'Hara and J. K. Moss signed it.")


@pytest.mark.parametrize("question, read", [
    # a name written in lower case or in capitals: as the documents write it inside a sentence
    ("what is the length of the bridge of kelmoor?", "what is the length of the bridge of Kelmoor?"),
    ("What is the length of the bridge of KELMOOR?", "What is the length of the bridge of Kelmoor?"),
    # a question all in capitals: sentence case first, then the documents' forms
    ("WHAT IS THE LENGTH OF THE BRIDGE OF KELMOOR?", "What is the length of the bridge of Kelmoor?"),
    # the form the documents use most inside sentences ("bridge" twice, "BRIDGE" once), and an acronym kept
    ("who measured the Bridge, nasa?", "who measured the Bridge, NASA?"),
    # words after a name as the documents write them after it, though "council" stands alone too; initials
    ("who paid the kelmoor council?", "who paid the Kelmoor Council?"),
    ("what did o'hara and j. k. moss sign?", "what did O'Hara and J. K. Moss sign?"),
])
def test_a_question_reads_its_words_as_the_documents_write_them(question, read):
    assert written_as_documents(question, [CASED]) == (
        read, f"The question was read as \u201c{read}\u201d: its words written as the documents write them.")


@pytest.mark.parametrize("question", [
    "What is the length of the bridge of Kelmoor?",  # written as the documents write it
    "when does the library open?",  # "Library" starts a sentence: its capital says nothing, and "library" is there
    "What are the hours of the museum of zanthor?",  # words the documents do not have stay as written
    "Where is Kelmoor?",  # a first capital stays
    "",
])
def test_a_question_the_documents_write_no_otherwise_is_read_as_written(question):
    assert written_as_documents(question, [CASED]) == (question, None)


def test_a_plan_reads_the_question_as_the_documents_write_it_and_says_so(tiny_tokenizer):
    from longqa_core.plan import plan_request

    documents = [Document("kelmoor.txt", CASED)]
    plan = plan_request(tiny_tokenizer, documents, "what is the length of the bridge of kelmoor?", EngineSettings())
    assert plan.question == "what is the length of the bridge of Kelmoor?"  # what the windows carry
    assert plan.notices == [written_as_documents("what is the length of the bridge of kelmoor?", [CASED])[1]]
    cut = plan_request(tiny_tokenizer, documents, "who paid the kelmoor council " + "and the bridge " * 30 + "?",
                       EngineSettings(max_question_len=16))
    assert len(tiny_tokenizer(cut.question, add_special_tokens=False)["input_ids"]) <= 16
    assert cut.question.startswith("who paid the Kelmoor")
    assert "was cut to its first 16 tokens" in cut.notices[0] and cut.question in cut.notices[1]  # both told


def test_a_word_the_documents_write_only_at_sentence_starts_keeps_the_question_s_form():
    texts = ["Harbour fees rose. Harbour dues fell."]
    assert written_as_documents("what are the harbour fees?", texts) == ("what are the harbour fees?", None)
    assert written_as_documents("WHAT ARE THE HARBOUR FEES?", texts)[0] == "What are the harbour fees?"


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_null_answer_matches_the_reference_pipeline(tiny_model, tiny_tokenizer):
    """A SQuAD 2.0 checkpoint's rule says "not found" exactly where the pipeline's handle_impossible_answer put the
    empty answer first; the spans stay the answers, in the pipeline's order."""
    for seed, question in ((5, "Who?"), (6, "What is it?"), (7, "Where?")):
        text = prose(seed, 1500)
        ours = answer(ModelRunner(tiny_model), tiny_tokenizer, [Document("doc", text)], question,
                      EngineSettings(max_seq_len=128, doc_stride=32, top_k=3, no_answer=NoAnswerRule(NULL_SCORE)))
        ref = reference_answers(tiny_model, tiny_tokenizer, question, text, 128, 32, top_k=3,
                                handle_impossible_answer=True)
        spans = [r["answer"] for r in ref if r["answer"]]
        assert [a.text for a in ours.answers][:len(spans)] == spans
        assert ours.found is (ref[0]["answer"] != "")
        assert ours.to_json()["found"] is ours.found


@pytest.mark.slow
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
    assert result.memory.host_peak_rss_bytes >= result.memory.host_rss_bytes * 0.5 > 0
    assert result.memory.peak_allocated_bytes is None  # no CUDA here


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


@pytest.mark.slow
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


@pytest.mark.slow
def test_out_of_memory_at_batch_one_names_profiles_that_fit(tiny_model, tiny_tokenizer):
    settings = EngineSettings(max_seq_len=128, doc_stride=32, batch_size=4, adaptive_batching=True)
    with pytest.raises(OutOfMemoryError, match="consumer-gpu"):
        answer(FlakyRunner(tiny_model, fits=0), tiny_tokenizer, [Document("d", prose(4, 3000))], "Why?",
               settings, batch_state=BatchState(4))


@pytest.mark.slow
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


@pytest.mark.slow
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
    from longqa_core.documents import from_text
    from longqa_core.limits import EngineSettings
    from longqa_core.windows import make_windows

    windows, _ = make_windows(tiny_tokenizer, "What is the colour of Zorbin? " * 5, [from_text("teal")],
                              EngineSettings().resolved(tiny_tokenizer))
    assert len(windows) == 1 and windows[0].context.sum() >= 1


# ---------------------------------------------------------------------------------------------------------------
# Limits before model work, incremental token counting, the time budget, cancellation and progress (issue 20).
# Hostile inputs are generated here; times are generous bounds for a shared 2-core machine.

import threading  # noqa: E402
import time  # noqa: E402

import psutil  # noqa: E402

from longqa_core.files import read_document  # noqa: E402
from longqa_core.batching import WindowProgress, run_windows  # noqa: E402
from longqa_core.errors import Cancelled, RequestTooLongError  # noqa: E402
from longqa_core.limits import CHARS_PER_TOKEN_BOUND, max_chars_for, validate_request  # noqa: E402
from longqa_core import plan as planning  # noqa: E402
from longqa_core.plan import plan_request  # noqa: E402
from longqa_core.windows import count_tokens, count_windows  # noqa: E402

COMBINING_ACUTE = "\u0301"  # a combining mark: about one token a character (two with the tiny tokenizer)


def counting_runner(model, log: list, delay_s: float = 0.0):
    """The real model, logging the size of every batch it is given (and optionally slower)."""
    inner = ModelRunner(model)

    def run(batch):
        log.append(batch["input_ids"].shape[0])
        if delay_s:
            time.sleep(delay_s)
        return inner(batch)

    run.devices = inner.devices
    return run


def must_not_run(batch):
    raise AssertionError("the model ran")


must_not_run.devices = [torch.device("cpu")]


@pytest.mark.parametrize("chunk_chars", [40, 257, 4096, 1 << 16])
def test_counting_in_chunks_gives_the_exact_token_count(tiny_tokenizer, chunk_chars):
    text = awkward_prose(3, 20_000) + "\n\n  indented   spaces\tand tabs  \n" + "x" * 30 + " end"
    expected = len(tiny_tokenizer(text, add_special_tokens=False)["input_ids"])
    count = count_tokens(tiny_tokenizer, text, chunk_chars=chunk_chars)
    assert count == (expected, len(text), 0, False)


def test_text_without_spaces_is_cut_inside_words_within_a_known_error(tiny_tokenizer):
    text = "Zorbin is teal. " + "x" * 300 + COMBINING_ACUTE * 300
    expected = len(tiny_tokenizer(text, add_special_tokens=False)["input_ids"])
    count = count_tokens(tiny_tokenizer, text, chunk_chars=40)
    assert count.hard_cuts == 15
    assert expected <= count.tokens <= expected + 2 * count.hard_cuts


def test_counting_stops_soon_after_the_limit(tiny_tokenizer):
    text = COMBINING_ACUTE * 4_000_000
    began = time.perf_counter()
    count = count_tokens(tiny_tokenizer, text, limit=100_000)
    assert time.perf_counter() - began < 2
    assert count.stopped and 100_000 < count.tokens < 100_000 + 3 * (1 << 16)
    assert count.chars < 3 * (1 << 16)


@pytest.mark.parametrize("max_seq_len, stride, question, n_chars", [
    (128, 32, "What is it?", 6000),
    (128, 0, "What is the colour of the house by the harbour in the old town?", 3000),
    (200, 64, "Who?", 150),  # one short window
    (4096, 128, "Where?", 30_000),
])
def test_the_plan_predicts_the_windows_and_tokens_that_make_windows_builds(tiny_tokenizer, max_seq_len, stride,
                                                                           question, n_chars):
    documents = [Document("a.txt", awkward_prose(1, n_chars)), Document("b.md", prose(2, n_chars // 3 + 1))]
    settings = EngineSettings(max_seq_len=max_seq_len, doc_stride=stride).resolved(tiny_tokenizer)
    plan = plan_request(tiny_tokenizer, documents, question, settings)
    windows, stats = make_windows(tiny_tokenizer, plan.question, documents, settings)
    assert plan.stats == stats
    assert plan.windows == len(windows) and plan.tokens == sum(s.tokens for s in stats)
    assert plan.window_tokens == sum(len(w.input_ids) for w in windows)
    assert plan.predicted_s is None  # no throughput measured yet


def test_a_refused_plan_hands_the_heap_back_and_an_accepted_one_does_not_trim(tiny_tokenizer, monkeypatch):
    trims = []
    monkeypatch.setattr(planning, "trim_heap", lambda: trims.append(1))
    documents = [Document("a.txt", prose(3, 40_000))]
    with pytest.raises(InputError, match="over the limit of 1,000"):
        plan_request(tiny_tokenizer, documents, "Who?", EngineSettings(max_total_tokens=1_000))
    assert trims == [1]
    plan_request(tiny_tokenizer, documents, "Who?", EngineSettings())
    assert trims == [1]


def test_a_full_read_samples_its_characters_only_when_they_could_reach_the_token_limit(tiny_tokenizer, monkeypatch):
    sampled = []
    real = planning.chars_per_token
    monkeypatch.setattr(planning, "chars_per_token", lambda tok, text: sampled.append(len(text)) or real(tok, text))
    documents = [Document("a.txt", prose(3, 6_000))]
    short = plan_request(tiny_tokenizer, documents, "Who?", EngineSettings(max_total_tokens=20_000))
    assert sampled == [] and short.cuts  # fewer characters than half the limit: tokenized once, its windows cut
    near = plan_request(tiny_tokenizer, documents, "Who?", EngineSettings(max_total_tokens=4_000))
    assert sampled == [len(documents[0].text)] and near.tokens == short.tokens


def test_a_question_that_leaves_no_room_past_the_overlap_is_refused(tiny_tokenizer):
    settings = EngineSettings(max_seq_len=100, doc_stride=32, max_question_len=64)
    question = "What is the colour of the house by the harbour in the old town? " * 8  # cut to 64 tokens
    with pytest.raises(InputError, match="leaves 32 tokens for the document in each 100-token window, not more than "
                                         "the overlap of 32"):
        answer(must_not_run, tiny_tokenizer, [Document("doc", prose(1, 3000))], question, settings)


def test_count_windows_matches_the_tokenizers_overflow():
    assert [count_windows(n, 100, 20) for n in (1, 100, 101, 180, 181, 260, 261)] == [1, 1, 2, 2, 3, 3, 4]


class CountingTokenizer:
    """Delegates to a real tokenizer, counting every call that tokenizes."""

    def __init__(self, tokenizer):
        self._tokenizer, self.calls = tokenizer, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self._tokenizer(*args, **kwargs)

    @property
    def backend_tokenizer(self):
        self.calls += 1
        return self._tokenizer.backend_tokenizer

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)


def test_characters_over_the_implied_cap_are_refused_without_tokenizing(tiny_tokenizer):
    tokenizer = CountingTokenizer(tiny_tokenizer)
    documents = [Document("a.txt", "word " * 100), Document("b.txt", "x" * 301)]  # 801 characters
    with pytest.raises(InputError) as info:
        answer(must_not_run, tokenizer, documents, "Why?", EngineSettings(max_total_tokens=100))
    assert str(info.value) == ("The documents have 801 characters: over the limit of 100 tokens even at 8 characters "
                               "a token (800 characters).")
    assert tokenizer.calls == 0
    assert max_chars_for(2_000_000) == CHARS_PER_TOKEN_BOUND * 2_000_000 == 16_000_000


def test_tokens_over_the_limit_name_where_counting_stopped(tiny_tokenizer):
    documents = [Document("a.txt", prose(1, 2000)), Document("marks.txt", COMBINING_ACUTE * 200_000)]
    with pytest.raises(InputError) as info:
        answer(must_not_run, tiny_tokenizer, documents, "Why?", EngineSettings(max_total_tokens=50_000))
    message = str(info.value)
    assert message.startswith("The documents have more than 50,000 tokens (counting stopped ")
    assert "of 200,000 characters into 'marks.txt'" in message and message.endswith("over the limit of 50,000.")


def rss_bytes() -> int:
    return psutil.Process().memory_info().rss


class PeakRss:
    """Samples this process's RSS every 10 ms while in the block."""

    def __enter__(self):
        self.peak_bytes, self._done = rss_bytes(), threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._done.wait(0.01):
            self.peak_bytes = max(self.peak_bytes, rss_bytes())

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()


@pytest.mark.slow
def test_a_16_mb_file_of_combining_marks_is_refused_fast_and_gives_its_memory_back(tiny_tokenizer, tmp_path):
    # Before: tokenized whole with offsets first (16 million tokens here): 55 s and 6.6 GB of RSS kept.
    path = tmp_path / "marks.txt"
    path.write_bytes((COMBINING_ACUTE * 8_000_000).encode())  # 16 MB, 8 million characters
    documents = [read_document(path)]
    assert documents[0].n_chars == 8_000_000 <= max_chars_for(2_000_000)  # under the character cap: tokens decide
    before = rss_bytes()
    began = time.perf_counter()
    with PeakRss() as peak, pytest.raises(InputError, match="more than 2,000,000 tokens"):
        answer(must_not_run, tiny_tokenizer, documents, "Why?", EngineSettings())
    seconds = time.perf_counter() - began
    after = rss_bytes()
    assert seconds < 5
    assert peak.peak_bytes - before < 400 * 2**20
    assert after - before < 100 * 2**20


def seeded_state(tokens_per_s: float) -> BatchState:
    state = BatchState(1)
    state.record_forward(int(tokens_per_s * 10), 10.0)
    return state


def test_a_request_predicted_to_take_too_long_is_refused_with_the_prediction(tiny_tokenizer):
    documents = [Document("doc", prose(3, 8000))]
    settings = EngineSettings(max_seq_len=128, doc_stride=32, max_request_s=5.0)
    plan = plan_request(tiny_tokenizer, documents, "What is it?", settings, batch_state=seeded_state(10_000.0))
    assert plan.tokens_per_s == pytest.approx(10_000.0)
    assert plan.predicted_s == pytest.approx(plan.window_tokens / 10_000.0) and plan.predicted_s < 5.0
    with pytest.raises(RequestTooLongError) as info:
        answer(must_not_run, tiny_tokenizer, documents, "What is it?", settings, batch_state=seeded_state(100.0))
    error = info.value
    assert isinstance(error, InputError)
    assert error.predicted_s == pytest.approx(plan.window_tokens / 100.0) and error.max_request_s == 5.0
    assert (error.windows, error.window_tokens, error.tokens_per_s) == (plan.windows, plan.window_tokens,
                                                                       pytest.approx(100.0))
    assert str(error).startswith(f"This request would take about {error.predicted_s:,.0f} s ({plan.windows} windows")
    assert "over the limit of 5 s a request" in str(error)


@pytest.mark.slow
def test_without_a_measured_throughput_the_first_batch_measures_it(tiny_model, tiny_tokenizer):
    log: list[int] = []
    runner = counting_runner(tiny_model, log, delay_s=0.2)  # at least 0.2 s a batch of 2
    settings = EngineSettings(max_seq_len=128, doc_stride=32, batch_size=2, max_request_s=1.0)
    state = BatchState(2)
    with pytest.raises(RequestTooLongError, match="measured on its first batch"):
        answer(runner, tiny_tokenizer, [Document("doc", prose(3, 8000))], "What is it?", settings, batch_state=state)
    assert log == [2]  # one batch, then refused
    assert state.tokens_per_s is not None and state.tokens_per_s < 2 * 128 / 0.2


@pytest.mark.slow
def test_a_run_records_the_models_throughput(tiny_model, tiny_tokenizer):
    state = BatchState(4)
    result = answer(ModelRunner(tiny_model), tiny_tokenizer, [Document("doc", prose(3, 4000))], "What is it?",
                    EngineSettings(max_seq_len=128, doc_stride=32, batch_size=4), batch_state=state)
    assert state.forward_tokens > result.tokens  # windows overlap and repeat the question
    assert state.tokens_per_s == pytest.approx(state.forward_tokens / state.forward_s)
    assert 0 < state.forward_s <= result.latency_s["forward"]


@pytest.mark.slow
@pytest.mark.parametrize("as_event", [True, False], ids=["threading.Event", "callable"])
def test_should_stop_cancels_between_batches_and_the_model_stays_usable(tiny_model, tiny_tokenizer, as_event):
    documents = [Document("doc", prose(3, 4000))]
    settings = EngineSettings(max_seq_len=128, doc_stride=32, batch_size=2)
    uncancelled = answer(ModelRunner(tiny_model), tiny_tokenizer, documents, "What is it?", settings)
    log: list[int] = []
    stop = threading.Event()

    def stop_after_two_batches(state: WindowProgress):
        if state.windows_done >= 4:
            stop.set()

    with pytest.raises(Cancelled) as info:
        answer(counting_runner(tiny_model, log), tiny_tokenizer, documents, "What is it?", settings,
               on_window_progress=stop_after_two_batches, should_stop=stop if as_event else stop.is_set)
    assert log == [2, 2]
    total = info.value.windows_total
    assert info.value.windows_done == 4 and total > 4
    assert str(info.value) == f"The request was cancelled after 4 of {total} windows."
    again = answer(ModelRunner(tiny_model), tiny_tokenizer, documents, "What is it?", settings)
    assert [(a.text, a.start_char, a.score) for a in again.answers] == \
        [(a.text, a.start_char, a.score) for a in uncancelled.answers]


def test_a_stop_before_any_batch_runs_no_model_work(tiny_tokenizer):
    with pytest.raises(Cancelled, match="cancelled while its documents were being tokenized"):
        answer(must_not_run, tiny_tokenizer, [Document("doc", prose(3, 8000))], "What is it?",
               EngineSettings(max_seq_len=128, doc_stride=32), should_stop=lambda: True)


@pytest.mark.slow
def test_progress_reports_windows_done_left_and_time_left(tiny_model, tiny_tokenizer):
    reports: list[WindowProgress] = []
    state = seeded_state(5000.0)
    documents, settings = [Document("doc", prose(3, 6000))], EngineSettings(max_seq_len=128, doc_stride=32,
                                                                            batch_size=3)
    plan = plan_request(tiny_tokenizer, documents, "What is it?", settings, batch_state=state)
    result = answer(ModelRunner(tiny_model), tiny_tokenizer, documents, "What is it?", settings, batch_state=state,
                    on_window_progress=reports.append)
    total = result.windows
    assert [r.windows_done for r in reports] == [0, *range(3, total, 3), total]
    assert all(r.windows_total == total and r.windows_left == total - r.windows_done for r in reports)
    assert reports[0].eta_s == pytest.approx(plan.predicted_s)  # before any batch: the seeded throughput
    assert reports[-1].eta_s == 0 and reports[-1].fraction == 1.0
    assert [r.elapsed_s for r in reports] == sorted(r.elapsed_s for r in reports)


@pytest.mark.slow
def test_run_windows_reports_no_eta_before_any_throughput_is_known(tiny_model, tiny_tokenizer):
    settings = EngineSettings(max_seq_len=128, doc_stride=32, batch_size=2).resolved(tiny_tokenizer)
    windows, _ = make_windows(tiny_tokenizer, "Why?", [Document("doc", prose(3, 3000))], settings)
    reports: list[WindowProgress] = []
    run_windows(ModelRunner(tiny_model), windows, tiny_tokenizer.pad_token_id, settings, BatchState(2),
                on_window_progress=reports.append)
    assert reports[0].eta_s is None and reports[1].eta_s is not None


@pytest.mark.parametrize("value", [2.7, "3", True, float("nan")])
def test_top_k_must_be_a_whole_number(tiny_tokenizer, value):
    with pytest.raises(InputError, match=f"top_k must be a whole number, got {value!r}"):
        EngineSettings(top_k=value).resolved(tiny_tokenizer)


def test_whole_numbers_given_as_floats_are_taken(tiny_tokenizer):
    settings = EngineSettings(top_k=3.0, max_seq_len=256.0, batch_size=2.0).resolved(tiny_tokenizer)
    assert (settings.top_k, settings.max_seq_len, settings.batch_size) == (3, 256, 2)
    assert all(type(v) is int for v in (settings.top_k, settings.max_seq_len, settings.batch_size))


def test_max_request_s_must_be_positive(tiny_tokenizer):
    with pytest.raises(InputError, match="max_request_s must be a positive number"):
        EngineSettings(max_request_s=0).resolved(tiny_tokenizer)


def test_questions_lose_bidirectional_controls():
    question = validate_request([Document("d", "text")], "Who \u202epays\u202c the \u2066fee\u2069?")
    assert question == "Who pays the fee?"


def test_a_question_over_the_cap_is_refused_in_words_before_it_is_cleaned(monkeypatch):
    from longqa_core import limits

    assert validate_request([Document("d", "text")], "Why? " * (limits.MAX_QUESTION_CHARS // 5)).endswith("Why?")
    monkeypatch.setattr(limits, "clean_text", lambda text: pytest.fail("cleaned a question over the cap"))
    with pytest.raises(InputError, match=r"The question is 4,001 characters long; a question may have at most "
                                         r"4,000\. Ask in a sentence or a few"):
        validate_request([Document("d", "text")], "x" * (limits.MAX_QUESTION_CHARS + 1))


def test_a_question_the_size_of_a_book_is_cut_without_tokenizing_all_of_it(tiny_tokenizer):
    question = "What is the weight of the bridge in the old town? " * 200_000  # 10 million characters
    began = time.perf_counter()
    cut, notice = truncate_question(tiny_tokenizer, question, 64)
    assert time.perf_counter() - began < 1
    assert question.startswith(cut) and len(tiny_tokenizer(cut, add_special_tokens=False)["input_ids"]) == 64
    assert notice == "The question was 10,000,000 characters long and was cut to its first 64 tokens."


# The best answer so far (issue 50 item 2) --------------------------------------------------------------------
from longqa_core.answering import Provisional  # noqa: E402
from longqa_core.spans import decode  # noqa: E402


@pytest.mark.slow
def test_the_best_so_far_comes_after_each_batch_and_ends_on_the_full_decodes_best(tiny_model, tiny_tokenizer):
    documents = [Document("doc", prose(3, 6000))]
    settings = EngineSettings(max_seq_len=128, doc_stride=32, batch_size=3, top_k=1)
    heard: list[Provisional] = []
    windows_seen: list[int] = []
    result = answer(ModelRunner(tiny_model), tiny_tokenizer, documents, "What is it?", settings,
                    on_candidate=heard.append, on_window_progress=lambda s: windows_seen.append(s.windows_done))
    total = result.windows
    assert [p.windows_read for p in heard] == [n for n in windows_seen if n > 0] == [*range(3, total, 3), total]
    assert all(p.windows_total == total for p in heard)
    # the running best decodes each window once, for one answer: what decoding every window for one answer gives
    assert (heard[-1].answer.text, heard[-1].answer.start_char) == (result.answers[0].text,
                                                                    result.answers[0].start_char)
    assert heard[-1].answer.score == pytest.approx(result.answers[0].score)
    assert heard[-1].answer.confidence is None  # never judged: only the final answer is
    assert heard[-1].to_json()["provisional"] is True


@pytest.mark.slow
def test_the_best_so_far_after_two_batches_is_the_best_of_their_windows(tiny_model, tiny_tokenizer):
    documents = [Document("doc", prose(4, 6000))]
    settings = EngineSettings(max_seq_len=128, doc_stride=32, batch_size=2, top_k=1).resolved(tiny_tokenizer)
    heard: list[Provisional] = []
    answer(ModelRunner(tiny_model), tiny_tokenizer, documents, "What is it?", settings, on_candidate=heard.append)
    windows, _ = make_windows(tiny_tokenizer, "What is it?", documents, settings)
    logits, _, _ = run_windows(ModelRunner(tiny_model), windows[:4], tiny_tokenizer.pad_token_id, settings,
                               BatchState(2))
    first_four = decode(windows[:4], logits, documents, settings).answers[0]
    assert heard[1].windows_read == 4
    assert (heard[1].answer.text, heard[1].answer.score) == (first_four.text, pytest.approx(first_four.score))


@pytest.mark.slow
def test_a_stop_keeps_the_best_so_far_and_how_far_the_read_got(tiny_model, tiny_tokenizer):
    documents = [Document("doc", prose(3, 4000))]
    settings = EngineSettings(max_seq_len=128, doc_stride=32, batch_size=2)
    stop = threading.Event()
    heard: list[Provisional] = []

    def stop_after_two_batches(state: WindowProgress):
        if state.windows_done >= 4:
            stop.set()

    with pytest.raises(Cancelled) as info:
        answer(ModelRunner(tiny_model), tiny_tokenizer, documents, "What is it?", settings, should_stop=stop,
               on_window_progress=stop_after_two_batches, on_candidate=heard.append)
    assert info.value.best is heard[-1] and info.value.best.windows_read == info.value.windows_done == 4
    assert info.value.windows_total == heard[-1].windows_total > 4


@pytest.mark.slow
def test_a_stop_after_the_last_window_gets_the_answer(tiny_model, tiny_tokenizer):
    """Issue 49 item 7: Stop pressed while the progress read "90/90 windows" ended the decoding, and the page said
    "Stopped before any window was read"."""
    documents = [Document("doc", prose(3, 4000))]
    settings = EngineSettings(max_seq_len=128, doc_stride=32, batch_size=2)
    stop = threading.Event()

    def stop_at_the_end(state: WindowProgress):
        if state.windows_done == state.windows_total:
            stop.set()

    result = answer(ModelRunner(tiny_model), tiny_tokenizer, documents, "What is it?", settings, should_stop=stop,
                    on_window_progress=stop_at_the_end)
    assert stop.is_set() and result.answers and result.reading.windows_read == result.windows


def instant_runner(batch):
    """Logits of zeros at once: a forward pass that takes no time."""
    shape = batch["input_ids"].shape  # (B, L)
    return torch.zeros(shape), torch.zeros(shape)


@pytest.mark.slow
def test_the_running_best_is_not_counted_as_forward_time(tiny_tokenizer):
    settings = EngineSettings(max_seq_len=128, doc_stride=32, batch_size=2).resolved(tiny_tokenizer)
    windows, _ = make_windows(tiny_tokenizer, "Why?", [Document("doc", prose(3, 3000))], settings)
    heard: list[int] = []
    began = time.perf_counter()
    _, _, sample = run_windows(instant_runner, windows, tiny_tokenizer.pad_token_id, settings, BatchState(2),
                               on_batch=lambda batch, logits: (heard.append(len(logits)), time.sleep(0.1)))
    assert sum(heard) == len(windows) and time.perf_counter() - began > 0.1 * len(heard)
    assert sample.seconds < 0.05 * len(heard)  # the batches' own time, not the 0.1 s each `on_batch` took


@pytest.mark.slow
def test_a_guided_read_that_goes_on_to_every_window_streams_its_best_so_far_throughout(tiny_model, tiny_tokenizer):
    """The issue's second case: a guided read whose answer stays weak reads the windows left, and its best so far
    keeps coming, counted against the full read's windows."""
    text = prose(5, 9000) + " The colour of Zorbin is teal. " + prose(6, 9000)
    settings = EngineSettings(max_seq_len=128, doc_stride=32, batch_size=2, top_k=1)
    heard: list[Provisional] = []
    result = answer(ModelRunner(tiny_model), tiny_tokenizer, [Document("doc", text)], "What is the colour of Zorbin?",
                    settings, reading_mode="guided", weak_answer_score=1.1, on_candidate=heard.append)
    assert result.reading.mode == "full" and result.reading.code == "weak_after_guided"  # never strong: read on
    assert [p.windows_read for p in heard] == sorted(p.windows_read for p in heard)
    assert heard[-1].windows_read == result.reading.windows_read == result.windows
    assert {p.windows_total for p in heard} == {result.reading.windows_total}
    assert heard[-1].answer.text == result.answers[0].text


@pytest.mark.slow
def test_with_a_listener_the_answers_are_those_of_a_read_without_one_and_no_window_is_decoded_twice(
        tiny_model, tiny_tokenizer, monkeypatch):
    from longqa_core import answering, spans

    documents = [Document("doc", prose(7, 6000))]
    settings = EngineSettings(max_seq_len=128, doc_stride=32, batch_size=3, top_k=3)
    plain = answer(ModelRunner(tiny_model), tiny_tokenizer, documents, "What is it?", settings)
    decoded_windows = []
    real = spans.decode_window
    monkeypatch.setattr(answering, "decode_window", lambda window, *a, **k: decoded_windows.append(id(window)) or
                        real(window, *a, **k))
    monkeypatch.setattr(answering, "decode", lambda *a, **k: pytest.fail("the windows were decoded again"))
    heard = []
    streamed = answer(ModelRunner(tiny_model), tiny_tokenizer, documents, "What is it?", settings,
                      on_candidate=heard.append)
    assert [(a.text, a.start_char, a.score) for a in streamed.answers] == \
        [(a.text, a.start_char, pytest.approx(a.score)) for a in plain.answers]
    assert len(decoded_windows) == len(set(decoded_windows)) == streamed.windows and heard
    assert streamed.latency_s["decode"] > 0 and streamed.latency_s["forward"] > 0
