"""The long evaluation documents of question-guided reading: deterministic, the gold answer where they say, the
distractors that fool a ranking really there, paraphrases that avoid the attribute's words, notes placed whole,
nothing taken from the training generator. Whether guided reading keeps the full read's answers on them is a
measurement: `python -m evals reading` (docs/results/reading-eval.json, docs/reading.md; tests/test_evals_command.py
runs it on one item)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from evals import eval_task, long_eval
from training import demo_task
from longqa.demo_model.fact import Fact
from tests.test_eval_task import imported_names

HANDWRITTEN = Path(__file__).parent / "data" / "handwritten_qa.json"
CI_TOKENS = 15_000  # about four windows of the demo model: small enough for CI, long enough to skip some
FACT_CATEGORIES = ("literal", "paraphrased")


@pytest.fixture(scope="module")
def notes() -> list[dict]:
    return json.loads(HANDWRITTEN.read_text())


@pytest.fixture(scope="module")
def fact_items() -> list[long_eval.LongItem]:
    return [item for category in FACT_CATEGORIES for item in long_eval.make_items(category, 12, 5, CI_TOKENS)]


def outside(item: long_eval.LongItem, needle: str) -> list[int]:
    """Where `needle` occurs in the item's text (any case), leaving out the gold fact's sentence."""
    return [m.start() for m in re.finditer(re.escape(needle), item.text, re.IGNORECASE)
            if not item.fact_start <= m.start() < item.fact_end]


# The question words and glue a paraphrase may share with anything; the rest are its content words.
FUNCTION_WORDS = {"what", "who", "whom", "where", "when", "which", "how", "is", "are", "was", "does", "did", "do",
                  "the", "a", "an", "of", "to", "in", "on", "at", "for", "from", "by", "with", "over", "through",
                  "up", "go", "can", "must", "you", "it", "its", "much", "many", "each", "other"}


def stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "er", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def content_stems(text: str) -> set[str]:
    return {stem(w) for w in re.findall(r"[a-z]+", text.lower()) if w not in FUNCTION_WORDS}


def shares_a_word(a: set[str], b: set[str]) -> bool:
    """Same stem, or one a prefix of the other ("wing" and "wingspan")."""
    return any(x == y or (min(len(x), len(y)) >= 4 and (x.startswith(y) or y.startswith(x))) for x in a for y in b)


# --- determinism and the gold span --------------------------------------------------------------------------------

@pytest.mark.parametrize("category", long_eval.CATEGORIES)
def test_the_same_seed_gives_the_same_items_and_another_seed_others(category, notes):
    first = long_eval.make_items(category, 3, 11, CI_TOKENS, notes=notes)
    again = long_eval.make_items(category, 3, 11, CI_TOKENS, notes=notes)
    other = long_eval.make_items(category, 3, 12, CI_TOKENS, notes=notes)
    assert first == again
    assert [i.text for i in first] != [i.text for i in other]
    assert len({i.text for i in first}) == 3


@pytest.mark.parametrize("category", long_eval.CATEGORIES)
def test_the_gold_span_holds_the_answer_inside_the_fact_sentence(category, notes):
    for item in long_eval.make_items(category, 10, 3, CI_TOKENS, notes=notes):
        assert item.text[item.answer_start:item.answer_end] == item.answer
        assert item.fact_start <= item.answer_start < item.answer_end <= item.fact_end
        sentence = item.text[item.fact_start:item.fact_end]
        assert sentence.endswith((".", "!", "?")) and "\n" not in sentence, sentence
        assert len(sentence) < 300  # short enough that one window of 128 tokens' overlap holds it whole
        if category in FACT_CATEGORIES:
            fact = Fact(item.detail["attribute"], item.detail["entity"], item.answer)
            assert sentence == fact.sentence
            assert item.text.count(fact.sentence) == 1


@pytest.mark.parametrize("tokens", [5_000, CI_TOKENS, 60_000])
def test_documents_have_the_length_asked_for(tokens, notes):
    for category in long_eval.CATEGORIES:
        guessed = long_eval.make_items(category, 1, 1, tokens, notes=notes)[0]
        assert abs(len(guessed.text) - 4 * tokens) <= 0.05 * 4 * tokens
        # A counter that sees three characters a token (as the demo model's tokenizer does on this prose)
        counted = long_eval.make_items(category, 1, 1, tokens, lambda text: len(text) // 3, notes)[0]
        assert abs(len(counted.text) // 3 - tokens) <= 0.05 * tokens


# --- the distractors ----------------------------------------------------------------------------------------------

def test_other_entities_have_the_asked_attribute_and_the_entity_other_attributes(fact_items):
    for item in fact_items:
        attribute, entity = item.detail["attribute"], item.detail["entity"]
        same_attribute = [m for m in re.finditer(rf"The {re.escape(attribute)} of (.+?) is ", item.text)
                          if m.group(1) != entity]
        same_entity = [m for m in re.finditer(rf"The ([a-z ]+) of {re.escape(entity)} is ", item.text)
                       if m.group(1) != attribute]
        assert len(same_attribute) >= 2, item.name  # at least 3 drawn; one may be dropped for sharing the value
        assert len(same_entity) >= 2, item.name
        assert item.text.count(f"The {attribute} of {entity} is ") == 1  # no second gold fact


def test_the_entity_is_named_a_dozen_times_outside_the_fact_in_many_windows(fact_items):
    for item in fact_items:
        places = outside(item, item.detail["entity"])
        assert len(places) >= 12, item.name
        # Spread: at least ten of twelve equal stretches of the document name the entity
        stretches = {12 * place // len(item.text) for place in places}
        assert len(stretches) >= 10, (item.name, sorted(stretches))


def test_entity_mentions_carry_no_value_and_are_not_training_sentences():
    training = set(demo_task.prose_sentences())
    writer = eval_task.EvalWriter(1)
    for template in long_eval._ENTITY_MENTIONS:
        assert "{entity}" in template and not template.startswith("{entity}")
        sentence = writer.fill(template, entity="Plooggib Reach")
        assert sentence not in training
        assert not re.search(r"\bThe [a-z ]+ of .+ is ", sentence)


# --- paraphrases --------------------------------------------------------------------------------------------------

def test_every_attribute_has_paraphrases_that_share_no_content_word_with_its_name():
    assert set(long_eval.PARAPHRASES) == set(eval_task.ATTRIBUTES)
    for attribute, questions in long_eval.PARAPHRASES.items():
        assert questions
        for question in questions:
            assert question.count("{entity}") == 1 and question.endswith("?")
            words = content_stems(question.replace("{entity}", " "))
            assert words, question
            assert not shares_a_word(words, content_stems(attribute)), (attribute, question)


def test_paraphrased_items_ask_with_other_words_than_the_document(fact_items):
    for item in fact_items:
        attribute, entity = item.detail["attribute"], item.detail["entity"]
        if item.category == "literal":
            assert item.question == Fact(attribute, entity, item.answer).question
            continue
        assert entity in item.question
        assert item.question in {q.format(entity=entity) for q in long_eval.PARAPHRASES[attribute]}
        assert not shares_a_word(content_stems(item.question.replace(entity, " ")), content_stems(attribute))


def test_the_stemmed_check_catches_a_shared_word():
    assert shares_a_word(content_stems("Who sings for X?"), content_stems("singers"))
    assert shares_a_word(content_stems("How wide are the wings?"), content_stems("wingspan"))
    assert not shares_a_word(content_stems("How heavy is it?"), content_stems("tonnage"))


# --- notes ----------------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_notes_are_placed_whole_as_their_own_paragraph_with_their_own_question(notes):
    by_id = {note["id"]: note for note in notes}
    items = long_eval.make_items("notes", len(notes), 9, CI_TOKENS, notes=notes)
    assert {item.detail["note"] for item in items} == set(by_id)  # every note once before any repeats
    for item in items:
        note = by_id[item.detail["note"]]
        assert item.text.count(note["text"]) == 1
        at = item.text.index(note["text"])
        assert at == item.answer_start - note["answer_start"]
        assert (item.question, item.answer) == (note["question"], note["answer"])
        assert at == 0 or item.text[at - 2: at] == "\n\n"
        end = at + len(note["text"])
        assert end == len(item.text) or item.text[end: end + 2] == "\n\n"
        assert at > 0 or end < len(item.text)


def test_notes_positions_vary():
    fake = [{"id": "n1", "text": "The ferrule of Quibbet Hall is Dorn.", "question": "What is the ferrule of "
             "Quibbet Hall?", "answer": "Dorn", "answer_start": 31}]
    items = long_eval.make_items("notes", 20, 4, 2_000, notes=fake)
    relative = {round(10 * (item.answer_start / len(item.text))) for item in items}
    assert len(relative) >= 5


def test_a_notes_item_needs_the_notes():
    with pytest.raises(ValueError):
        long_eval.make_items("notes", 1, 1, 1_000)
    with pytest.raises(ValueError):
        long_eval.make_items("summaries", 1, 1, 1_000)


# --- independence ---------------------------------------------------------------------------------------------------

def test_the_module_takes_nothing_from_the_training_generator():
    tree = ast.parse(Path(long_eval.__file__).read_text())
    assert not any("demo_task" in name or "broad_task" in name or "nouns" in name for name in imported_names(tree))
    strings = [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)]
    assert not [s for s in strings if "demo_task" in s or "broad_task" in s or "nouns" in s or "prose.txt" in s]
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    names |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert not names & {"open", "read_text", "Path"}  # reads no file: the caller passes the notes
