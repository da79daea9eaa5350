"""The full read's windows cut from a document's tokens kept once (longqa_core.windows: `tokenize_document`,
`window_cuts`, `cut_windows`) against the tokenizer's own overflow (`make_windows`): token for token, offset for
offset, for messy text, chunk boundaries anywhere and several window settings."""

from __future__ import annotations

import random

import pytest

from longqa.models import DEMO_MODEL_DIR
from longqa_core.documents import Document
from longqa_core.limits import EngineSettings, document_room
from longqa_core.windows import count_tokens, cut_windows, make_windows, tokenize_document, window_cuts, window_span

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
    expected, stats = make_windows(tokenizer, question, documents, settings)
    return cut_windows(tokenizer, question, documents, tokens, cuts), expected, cuts, tokens, stats


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


def test_a_text_with_no_space_to_cut_at_is_tokenized_whole(tiny_tokenizer):
    text = "x" * 3_000 + " then words " * 50
    whole = tiny_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenize_document(tiny_tokenizer, text, chunk_chars=500).ids.tolist() == whole
