"""The product bench's question/document pairs (longqa/bench/documents.py): the same seed gives the same pair, the
asked fact stands in the text, the question does not depend on the length, and only the samples' prose surrounds it."""

from __future__ import annotations

from longqa.bench.documents import FACTS_PER_DOCUMENT, make_document, sample_sentences

SAMPLE_SET = set(sample_sentences())


def test_a_seed_gives_the_same_document_and_another_seed_another():
    assert make_document(7, 3_000) == make_document(7, 3_000)
    assert make_document(7, 3_000) != make_document(8, 3_000)


def test_the_asked_fact_stands_in_the_text_among_the_samples_sentences():
    for seed in range(20):
        text, question = make_document(seed, 2_000)
        attribute, entity = question.removeprefix("What is the ").removesuffix("?").split(" of ")
        assert f"The {attribute} of {entity} is " in text and len(text) >= 2_000
        others = [s for s in text.replace(". ", ".\n").splitlines() if s not in SAMPLE_SET]
        assert 1 <= len(others) <= FACTS_PER_DOCUMENT, others  # the made-up facts, and nothing else new


def test_the_question_is_the_same_at_any_length():
    assert make_document(3, 500)[1] == make_document(3, 50_000)[1]
    assert len(make_document(3, 50_000)[0]) >= 50_000


def test_the_samples_give_prose_sentences_without_markup():
    sentences = sample_sentences()
    assert len(sentences) > 50
    assert all(s[:1].isupper() and s.endswith(".") and not set(s) & set("#|*<>") for s in sentences)
