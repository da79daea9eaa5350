"""The training generator: the classic task unchanged, and the broad task's shapes, placements and offsets."""

from __future__ import annotations

import random
import re

import pytest

from training import broad_task, demo_task


def test_the_classic_task_draws_what_it_always_drew():
    """The bundled samples, the bench, the tests and the training-generator evaluation are built from it: the broad
    task must not change it. (Its facts are drawn before any filler, so they pin it on any Python's docstrings.)"""
    example = demo_task.make_example(7, 3000)
    assert (example.question, example.answer) == ("What is the pain of Chevfaex Kla?", "3")
    assert {(f.attribute, f.entity, f.value) for f in example.facts} >= {
        ("pain", "Mymex Aerkwux", "trist"), ("basement", "Chevfaex Kla", "raerk")}
    example = demo_task.make_example(1_000_000_000, 3000)
    assert (example.question, example.answer) == ("What is the winter of Neakar?", "46")


@pytest.mark.parametrize("seed", range(200))
def test_broad_examples_hold_their_fact_once_with_the_right_offset(seed):
    rng = random.Random(seed)
    placement = rng.choice(["first", "last", "near", "anywhere", None])
    example = broad_task.make_broad_example(seed, rng.choice([60, 400, 3000]), placement=placement)
    sentence = example.question.replace("What is the ", "The ", 1)[:-1] + f" is {example.answer}."
    assert example.text.count(sentence) == 1
    assert example.text[example.answer_start:example.answer_end] == example.answer
    assert example.answer_end == example.text.index(sentence) + len(sentence) - 1
    if placement == "first":  # the first sentence, under a heading or after a bullet where the note has them
        assert re.match(r"([A-Z][a-z]+:?\n)?([-*•] )?" + re.escape(sentence), example.text)
    if placement == "last":
        assert example.text.endswith(sentence)


def test_broad_entities_come_in_the_shapes_of_issue_15():
    rng = random.Random(3)
    entities = [broad_task.make_broad_entity(rng) for _ in range(3000)]
    assert any(e.startswith("St. ") for e in entities)
    assert any(re.match(r"O'[A-Z]", e) for e in entities)
    assert any("-" in e for e in entities)
    assert any(re.match(r"([A-Z]\. )+[A-Z]", e) for e in entities)  # initials
    assert any(re.search(r"\b\d+[A-Z]?$", e) for e in entities)  # "Unit 7"
    assert any(e.startswith("the ") for e in entities)
    assert {len(e.split()) for e in entities} >= {1, 2, 3, 4}
    open_words = [broad_task.make_open_word(rng) for _ in range(200)]
    assert all(re.fullmatch(r"([ksthmnyrwgzdbpc]*[aiueo])+n?", w) for w in open_words)  # the second inventory


def test_broad_attributes_and_values_come_in_every_shape():
    rng = random.Random(4)
    attributes = [broad_task.make_broad_attribute(rng) for _ in range(500)]
    assert any(" " in a for a in attributes) and any(" " not in a for a in attributes)
    values = [broad_task.make_broad_value(rng) for _ in range(3000)]
    assert any(re.fullmatch(r"\d{1,3}(,\d{3})+", v) for v in values)
    assert any(re.fullmatch(r"\d{4}", v) for v in values)
    assert any(re.fullmatch(r"\d{1,2} [A-Z][a-z]+ \d{4}", v) for v in values)
    assert any(re.fullmatch(r"[\d,.]+ [a-z ]+", v) for v in values)  # amounts with units
    assert any(re.fullmatch(r"[A-Z]{1,4}-\d+", v) for v in values)  # codes
    assert any(re.fullmatch(r"[a-z]+( [a-z]+)+", v) for v in values)  # lowercase phrases
    assert any(re.fullmatch(r"[A-Z][a-z]+( [A-Z][a-z]+)+", v) for v in values)  # multiword names


def test_same_attribute_distractors_take_the_targets_kind_of_value():
    for seed in range(100):
        writer = broad_task.BroadFactWriter(seed, "test")
        target = writer.target()
        others = [f for f in writer.distractors(target, 3, 0, 0) if f.attribute == target.attribute]
        assert all(writer.kinds[f] == writer.kinds[target] for f in others), seed
        if target.value.isdigit():
            assert all(f.value.isdigit() for f in others), seed
        assert all(f.value != target.value and f.entity != target.entity for f in others)


def test_near_placement_puts_distractors_beside_the_fact():
    writer = broad_task.BroadFactWriter(5, "test")
    target = writer.target()
    others = writer.distractors(target, 3, 2, 0)
    example = writer.document(6000, target, others, placement="near")
    sentences = re.split(r"(?<=\.)\s+", example.text)
    at = next(i for i, s in enumerate(sentences) if s == target.sentence)
    for fact in others:
        where = next(i for i, s in enumerate(sentences) if fact.sentence[:-1] in s)
        assert abs(where - at) <= 3 + len(others)


def test_broad_documents_come_as_running_text_paragraphs_and_lines():
    texts = [broad_task.make_broad_example(seed, 1500).text for seed in range(200)]
    assert any("\n\n" in t for t in texts)
    assert any("\n" in t and "\n\n" not in t for t in texts)
    assert any("\n" not in t for t in texts)


def test_mentions_name_the_asked_fact_without_its_value():
    writer = broad_task.BroadFactWriter(9, "test")
    target = writer.target()
    example = writer.document(3000, target, [], mentions=3)
    mentions = writer.mentions(target, 20)
    assert all(target.entity in m and target.attribute in m and target.value not in m for m in mentions)
    assert all(f" of {target.entity} is " not in m for m in mentions)  # never the fact's own shape
    assert example.text.count(target.sentence) == 1


def test_near_names_differ_from_the_entity_by_one_word_or_number():
    rng = random.Random(2)
    for _ in range(500):
        entity = broad_task.make_broad_entity(rng)
        near = broad_task.near_name(rng, entity)
        assert near != entity
        assert len(set(near.split()) ^ set(entity.split())) <= 3, (entity, near)
    writer = broad_task.BroadFactWriter(4, "test")
    found = 0
    for _ in range(200):
        target = writer.target()
        others = writer.distractors(target, 1, 0, 0)
        found += any(set(f.entity.split()) & set(target.entity.split()) - {"the"} for f in others)
    assert found > 40  # about half the time, the first same-attribute distractor is a near name


def test_letter_values_have_no_syllable_code():
    rng = random.Random(6)
    values = [broad_task.make_broad_value(rng, "letters") for _ in range(300)]
    assert all(re.fullmatch(r"[A-Za-z]+([ -][A-Za-z]+)*", v) for v in values)
    assert {len(re.split(r"[ -]", v)) for v in values} >= {1, 2, 3, 4}
    assert any(v.isupper() for v in values) and any(v.islower() for v in values)
