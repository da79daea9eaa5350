"""The items of the not-found evaluation (`evals.no_answer_eval`): each kind holds or lacks its answer as it says,
the same seed gives the same items, and issue 38's rule is counted against the engine's. What the demo model's
rule finds on them is a measurement: `python -m evals no-answer` (docs/results/no-answer-eval-seed49.json,
docs/no-answer.md; tests/test_evals_command.py runs it on two items)."""

import json
import re
from pathlib import Path

import pytest

from evals import no_answer_eval

NOTES = json.loads((Path(__file__).parent / "data" / "handwritten_qa.json").read_text())
_ASKED = re.compile(r"What is the (.+) of (.+)\?")


@pytest.mark.parametrize("seed", range(6))
def test_answerable_items_hold_their_answer_where_they_say(seed):
    for kind in no_answer_eval.ANSWERABLE_KINDS:
        item = no_answer_eval.generated_item(kind, seed)
        assert item.is_answerable
        assert item.text[item.answer_start:item.answer_start + len(item.answer)] == item.answer


@pytest.mark.parametrize("seed", range(6))
def test_other_entity_items_state_the_attribute_only_for_other_entities(seed):
    item = no_answer_eval.generated_item("other_entity", seed)
    attribute, entity = _ASKED.fullmatch(item.question).groups()
    assert not item.is_answerable
    assert f"The {attribute} of {entity} is" not in item.text
    assert entity in item.text  # the entity is still named, with its other attributes
    assert f"The {attribute} of " in item.text  # and the attribute is stated for someone else


@pytest.mark.parametrize("seed", range(6))
def test_absent_entity_items_ask_about_a_name_the_text_never_uses(seed):
    item = no_answer_eval.generated_item("absent_entity", seed)
    entity = _ASKED.fullmatch(item.question).group(2)
    assert entity.lower() not in item.text.lower()


def test_notes_are_asked_three_ways_and_only_their_own_question_is_answerable():
    items = no_answer_eval.note_items(NOTES, seed=1)
    assert len(items) == 3 * len(NOTES)
    assert {i.kind for i in items if i.is_answerable} == {"answerable"}
    for item in items:
        if item.kind == "absent_entity":
            entity = item.question.rstrip("?").split(" of ", 1)[1]
            assert entity.lower() not in item.text.lower()
        if item.kind == "general":
            assert item.question in no_answer_eval.GENERAL_QUESTIONS


PROSE = json.loads((Path(__file__).parent / "data" / "handwritten_prose_qa.json").read_text())


def test_prose_notes_are_asked_five_ways_and_hold_their_answers_where_they_say():
    items = no_answer_eval.prose_items(PROSE, seed=1)
    assert len(items) == 5 * len(PROSE)
    assert {i.kind for i in items} == set(no_answer_eval.KINDS)
    for item in items:
        if item.is_answerable:
            assert item.kind in no_answer_eval.ANSWERABLE_KINDS
            assert item.text[item.answer_start:item.answer_start + len(item.answer)] == item.answer
    for note in PROSE:  # the absent entity's name (after "of the"/"of") appears nowhere in the note
        absent = re.search(r" of (?:the )?(.+?)(?:'s first paper)?\?$", note["absent_question"]).group(1)
        assert absent.lower() not in note["text"].lower()


def test_items_are_the_same_for_the_same_seed():
    assert no_answer_eval.make_items(2, 5, NOTES[:3]) == no_answer_eval.make_items(2, 5, NOTES[:3])
    assert no_answer_eval.make_items(2, 5) != no_answer_eval.make_items(2, 6)


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown kind"):
        no_answer_eval.generated_item("nonsense", 1)


def test_before_and_after_counts_issue_38s_rule_against_the_engines_found():
    def record(kind, gold, score, missing, found, right=False, absent=(), outside=False):
        return {"kind": kind, "source": "generated", "gold": gold, "score": score, "missing_words": list(missing),
                "found": found, "right": right, "absent_words": list(absent), "outside_form": outside}

    records = [record("paraphrased", "x", 1e-3, [], None, right=True, absent=["shut"], outside=True),
               record("paraphrased", "x", 1e-3, ["crest"], False, outside=True),
               record("answerable", "x", 1e-9, [], False),
               record("general", None, 1e-3, [], None, outside=True)]
    table = no_answer_eval.before_and_after(records, 4.2e-8)
    assert table["paraphrased (generated)"] == {
        "n": 2, "right": 1, "found_before": 1, "found_now": 0, "not_found_before": 1, "not_found_now": 1,
        "no_verdict_now": 1, "right_found_before": 1, "right_found_now": 0, "attribute_absent": 1, "outside_form": 2}
    answerable = table["answerable (generated)"]
    assert answerable["not_found_before"] == 1 and answerable["found_now"] == 0
    assert table["general (generated)"]["found_before"] == 1 and table["general (generated)"]["no_verdict_now"] == 1
    assert "other_entity (generated)" not in table  # kinds without records are left out
