"""The full read's windows cut from a document's tokens, tokenized a chunk at a time (longqa_core.windows:
`tokenize_document`, `window_cuts`, `cut_windows`, and `make_windows` built on them) against the tokenizer's own
overflow over the whole document in one call (tests/reference_windows.py): token for token, offset for offset, for
messy text, chunk boundaries anywhere (inside runs without spaces too) and several window settings; and Stop asked
between chunks."""

from __future__ import annotations

import random

import numpy as np
import pytest

from longqa.models import DEMO_MODEL_DIR
from longqa_core.documents import Document
from longqa_core.limits import EngineSettings, document_room
from longqa_core.errors import Cancelled
from longqa_core.windows import (count_tokens, cut_windows, make_windows, plan_chunks, tokenize_document, trim_offset,
                                 trimmed_offsets, window_cuts, window_span)
from tests.reference_windows import windows_by_overflow

WORDS = ["budget", "Quarrowby", "crowns", "the", "of", "é", "ü", "漢字", "😀", "naïve", "x", "12", "4.5", "—", "(a)",
         "don't", "   ", "\n", "\n\n", "\t", " \n ", "..."]


def messy_text(seed: int, n_words: int) -> str:
    """Words, punctuation, emoji, CJK and runs of every kind of white space, joined by one or more spaces."""
    rng = random.Random(seed)
    return "".join(rng.choice(WORDS) + rng.choice([" ", " ", " ", "  ", "", "\n", " \t"]) for _ in range(n_words))


@pytest.fixture(scope="module")
def demo_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(DEMO_MODEL_DIR)


def cut_like_make_windows(tokenizer, question: str, documents: list[Document], settings: EngineSettings,
                          chunk_chars: int):
    settings = settings.resolved(tokenizer)
    room = document_room(tokenizer, settings, len(tokenizer(question, add_special_tokens=False)["input_ids"]))
    tokens = [tokenize_document(tokenizer, d.text, chunk_chars=chunk_chars) for d in documents]
    cuts = [cut for i, d in enumerate(documents) for cut in window_cuts(i, d.text, tokens[i], room,
                                                                          settings.doc_stride)]
    expected, stats = windows_by_overflow(tokenizer, question, documents, settings)
    return cut_windows(tokenizer, question, documents, tokens, cuts), expected, cuts, tokens, stats


@pytest.mark.slow
@pytest.mark.parametrize("which", ["tiny", "demo"])
@pytest.mark.parametrize("seed, settings, chunk_chars", [
    (0, EngineSettings(max_seq_len=512), 1_000),
    (1, EngineSettings(max_seq_len=300, doc_stride=64), 333),
    (2, EngineSettings(max_seq_len=1024, doc_stride=0), 1 << 16),
])
def test_cut_windows_are_the_full_reads_windows_token_for_token(request, tiny_tokenizer, which, seed, settings,
                                                                chunk_chars):
    tokenizer = tiny_tokenizer if which == "tiny" else request.getfixturevalue("demo_tokenizer")
    documents = [Document("a.txt", messy_text(seed, 4_000)), Document("b.txt", "  \n leading white space, short"),
                 Document("c.txt", messy_text(seed + 10, 900))]
    question = "What is the  budget of Quarrowby? é"
    windows, expected, cuts, tokens, stats = cut_like_make_windows(tokenizer, question, documents, settings,
                                                                   chunk_chars)
    assert len(windows) == len(expected) > 10
    for window, reference, cut in zip(windows, expected, cuts):
        assert window.input_ids.dtype == reference.input_ids.dtype and window.offsets.dtype == reference.offsets.dtype
        assert window.input_ids.tolist() == reference.input_ids.tolist()
        assert window.offsets.tolist() == reference.offsets.tolist()
        assert window.context.tolist() == reference.context.tolist()
        assert (window.n_global, window.document_index) == (reference.n_global, reference.document_index)
        span = window_span(reference)
        assert (cut.document_index, cut.start_char, cut.end_char) == (span["document_index"], span["start_char"],
                                                                      span["end_char"])
    assert [len(t) for t in tokens] == [s.tokens for s in stats]
    assert [len(t) for t in tokens] == [count_tokens(tokenizer, d.text).tokens for d in documents]


@pytest.mark.slow
def test_offsets_trimmed_at_once_are_those_trimmed_one_by_one():
    spaces = [chr(c) for c in range(0x110000) if chr(c).isspace()]
    assert max(map(ord, spaces)) <= 0x3000  # the white space `trimmed_offsets` knows is all there is
    solid = ["a", "é", "\U0001F600", "\ud800", "\udc00", "x"]  # lone surrogates too, as a careless decode leaves
    rng = random.Random(5)
    for _ in range(2000):
        text = "".join(rng.choice(spaces if rng.random() < 0.5 else solid) for _ in range(rng.randint(0, 40)))
        offsets = [(a, rng.randint(a, len(text))) for a in (rng.randint(0, len(text)) for _ in range(rng.randint(0, 12)))]
        trimmed = trimmed_offsets(text, np.array(offsets, dtype=np.int64).reshape(-1, 2))
        assert [tuple(map(int, row)) for row in trimmed] == [trim_offset(text, a, b) for a, b in offsets], text


def test_a_text_with_no_space_to_cut_at_is_tokenized_whole(tiny_tokenizer):
    text = "x" * 3_000 + " then words " * 50
    whole = tiny_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenize_document(tiny_tokenizer, text, chunk_chars=500).ids.tolist() == whole


RUNS = ["abc.def,ghi;", "x1y2z3", "...!!!", "漢字。漢字、", "😀🎉🧪", "e\u0301te\u0301", "don't'll've", "12.5%", "(a)[b]{c}",
        "naïve—café", "αβγ123", "'''s", "x" * 40, "\u200b", "tab\there", "a_b-c", "\u00a0nbsp\u3000"]


def runs_text(seed: int, n: int) -> str:
    """Stretches without spaces (classes changing every few characters, apostrophes, marks, emoji, CJK, format and
    no-break spaces), joined by one or more of every kind of white space, or by nothing."""
    rng = random.Random(seed)
    return "".join("".join(rng.choice(RUNS) for _ in range(rng.randint(1, 30)))
                   + rng.choice([" ", "  ", "", "\n", "\n\n", " \t ", "   "]) for _ in range(n))


@pytest.mark.slow
@pytest.mark.parametrize("which", ["tiny", "demo"])
@pytest.mark.parametrize("seed, chunk_chars", [(0, 40), (1, 97), (2, 500)])
def test_chunks_cut_inside_runs_without_spaces_give_the_whole_texts_tokens_and_windows(request, tiny_tokenizer, which,
                                                                                      seed, chunk_chars):
    tokenizer = tiny_tokenizer if which == "tiny" else request.getfixturevalue("demo_tokenizer")
    text = runs_text(seed, 300)
    chunks = list(plan_chunks(tokenizer, text, chunk_chars))
    assert len(chunks) > 5 and any(c.encode_from < c.start for c in chunks)  # cut inside runs, with context
    assert all(not text[c.start - 1].isspace() and not text[c.start].isspace()
               for c in chunks if c.encode_from < c.start)
    whole = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenize_document(tokenizer, text, chunk_chars=chunk_chars).ids.tolist() == whole
    documents = [Document("runs.txt", text), Document("short.txt", " \n a"), Document("x.txt", "x" * 700)]
    settings = EngineSettings(max_seq_len=128, doc_stride=16)
    windows, _ = make_windows(tokenizer, "What is the  budget? é", documents, settings)
    expected, expected_stats = windows_by_overflow(tokenizer, "What is the  budget? é", documents, settings)
    assert len(windows) == len(expected) > 10
    for window, reference in zip(windows, expected):
        assert window.input_ids.tolist() == reference.input_ids.tolist()
        assert window.offsets.tolist() == reference.offsets.tolist()
        assert window.context.tolist() == reference.context.tolist()
        assert (window.n_global, window.document_index) == (reference.n_global, reference.document_index)


def test_a_chunk_boundary_falls_inside_a_long_run_without_spaces(tiny_tokenizer):
    run = "Harrowgate's.tide:4100;" * 200  # 4,600 characters without a space
    text = "words before it " * 20 + run + " and words after it" * 20
    chunks = list(plan_chunks(tiny_tokenizer, text, 1_000))
    inside = [c for c in chunks if text.index(run) < c.start < text.index(run) + len(run)]
    assert len(inside) >= 3
    assert tokenize_document(tiny_tokenizer, text, chunk_chars=1_000).ids.tolist() == \
        tiny_tokenizer(text, add_special_tokens=False)["input_ids"]


def test_a_run_of_one_class_longer_than_a_chunk_is_one_chunk_to_its_end(tiny_tokenizer):
    text = "a few words " + "x" * 3_000 + " then words " * 50
    chunks = list(plan_chunks(tiny_tokenizer, text, 500))
    run = [c for c in chunks if c.start <= text.index("x") < c.end]
    assert len(run) == 1 and run[0].end == text.index(" then")  # no cut inside the run of x: its chunk reaches its end
    assert sum(c.end - c.start > 500 for c in chunks) == 1


@pytest.mark.slow
def test_tokenizing_asks_stop_between_calls_and_ends_there(tiny_tokenizer):
    text = messy_text(5, 120_000)  # about 670,000 characters
    asked = []
    tokenize_document(tiny_tokenizer, text, should_stop=lambda: asked.append(1) and False)
    assert len(asked) >= len(text) // (1 << 18)  # at least every 256K characters
    with pytest.raises(Cancelled):
        tokenize_document(tiny_tokenizer, text, should_stop=lambda: len(asked) > 3 or asked.append(1))
    with pytest.raises(Cancelled):
        make_windows(tiny_tokenizer, "What?", [Document("a.txt", text)], EngineSettings(max_seq_len=512),
                     should_stop=lambda: True)
