"""Questions the documents answer and questions they do not, for measuring a "not found" rule (issue 38).

Five kinds, each over documents of the independent evaluation generator (`eval_task`, `long_eval`: never used for
training) or over the hand-written notes, and general-knowledge questions written here by hand:
- `answerable`: the template question of a fact the document states;
- `paraphrased`: the same fact asked in other words (`long_eval.PARAPHRASES`);
- `absent_entity`: the asked attribute of an entity the document never names;
- `other_entity`: an attribute the document states only for other entities (the asked entity's own fact removed,
  its other attributes and mentions kept);
- `general`: general knowledge ("What is the capital of France?") over a document about other things.
The hand-written notes come in two sets: template notes (`tests/data/handwritten_qa.json`, "What is the X of Y?",
asked three ways) and prose notes (`tests/data/handwritten_prose_qa.json`: pronouns, lists and headings, each with
its question, a paraphrase, an attribute the note gives only for someone else and an entity it never names).
It writes text and knows the answers; it loads no model and reads no file (the notes are passed in).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from evals import eval_task, long_eval
from longqa.demo_model.fact import Fact

KINDS = ("answerable", "paraphrased", "absent_entity", "other_entity", "general")
ANSWERABLE_KINDS = ("answerable", "paraphrased")
DOCUMENT_CHARS = (600, 40_000)  # drawn log-uniformly: one to about four windows of 4,096 tokens
_KIND_SALT = {kind: i + 1 for i, kind in enumerate(KINDS)}

GENERAL_QUESTIONS = (
    "What is the capital of France?",
    "Who wrote Hamlet?",
    "What is the boiling point of water?",
    "How many legs does a spider have?",
    "Who painted the Mona Lisa?",
    "What is the largest planet in the solar system?",
    "What is the chemical symbol for gold?",
    "When did the Second World War end?",
    "What is the speed of light?",
    "Who is the CEO of Acme?",
    "What is the tallest mountain on Earth?",
    "Which ocean is the largest?",
    "What currency is used in Japan?",
    "Who discovered penicillin?",
    "What is the square root of 144?",
    "What language is spoken in Brazil?",
    "What is the population of Tokyo?",
    "Who was the first person to walk on the Moon?",
    "Which planet is known as the red planet?",
    "What is the main ingredient of guacamole?",
)


@dataclass(frozen=True)
class NoAnswerItem:
    """One question over one document; `answer` and `answer_start` are None where the document does not hold it."""

    kind: str
    source: str  # "generated" or "handwritten"
    name: str
    text: str
    question: str
    answer: str | None = None
    answer_start: int | None = None

    @property
    def is_answerable(self) -> bool:
        return self.answer is not None


def _chars(rng: random.Random, chars: tuple[int, int] = DOCUMENT_CHARS) -> int:
    lo, hi = chars
    return int(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def absent_entity(rng: random.Random, text: str) -> str:
    """An entity of the evaluation generator's shapes that `text` never names."""
    while True:
        entity = eval_task.make_entity(rng)
        if entity.lower() not in text.lower():
            return entity


def generated_item(kind: str, seed: int, chars: tuple[int, int] = DOCUMENT_CHARS) -> NoAnswerItem:
    """One item of `kind` over a document of `long_eval`'s literal category (the fact among distractors that share
    its attribute or its entity, the entity named a dozen times more), of `chars` characters (drawn log-uniformly
    between the two)."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
    rng = random.Random(seed * 10 + _KIND_SALT[kind])
    item = long_eval.fact_document(seed, _chars(rng, chars), paraphrased=kind == "paraphrased")
    name = f"{kind} seed {seed}"
    attribute, entity = item.detail["attribute"], item.detail["entity"]
    if kind in ANSWERABLE_KINDS:
        return NoAnswerItem(kind, "generated", name, item.text, item.question, item.answer, item.answer_start)
    if kind == "other_entity":  # the asked fact cut out; the same attribute of other entities stays
        text = (item.text[:item.fact_start] + item.text[item.fact_end:]).replace("  ", " ")
        return NoAnswerItem(kind, "generated", name, text, Fact(attribute, entity, "").question)
    if kind == "absent_entity":
        return NoAnswerItem(kind, "generated", name, item.text,
                            Fact(attribute, absent_entity(rng, item.text), "").question)
    return NoAnswerItem(kind, "generated", name, item.text, rng.choice(GENERAL_QUESTIONS))


def _note_entity(question: str) -> str:
    """The entity of a hand-written note's template question ("What is the X of Y?" -> "Y")."""
    return question.rstrip("?").split(" of ", 1)[1]


def note_items(notes: list[dict], seed: int) -> list[NoAnswerItem]:
    """Each hand-written note asked three ways: its own question, its attribute of an entity it never names, and a
    general-knowledge question."""
    rng = random.Random(f"notes {seed}")
    items = []
    for note in notes:
        text, question = note["text"], note["question"]
        items.append(NoAnswerItem("answerable", "handwritten", note["id"], text, question, note["answer"],
                                  note["answer_start"]))
        entity = _note_entity(question)
        items.append(NoAnswerItem("absent_entity", "handwritten", f"{note['id']} absent", text,
                                  question.replace(entity, absent_entity(rng, text))))
        items.append(NoAnswerItem("general", "handwritten", f"{note['id']} general", text,
                                  rng.choice(GENERAL_QUESTIONS)))
    return items


def prose_items(notes: list[dict], seed: int) -> list[NoAnswerItem]:
    """Each hand-written prose note asked five ways: its question, its paraphrase, an attribute it gives only for
    someone else, an entity it never names, and a general-knowledge question."""
    rng = random.Random(f"prose {seed}")
    items = []
    for note in notes:
        text, name = note["text"], note["id"]
        items += [NoAnswerItem("answerable", "handwritten", name, text, note["question"], note["answer"],
                               note["answer_start"]),
                  NoAnswerItem("paraphrased", "handwritten", f"{name} paraphrased", text, note["paraphrase"],
                               note["answer"], note["answer_start"]),
                  NoAnswerItem("other_entity", "handwritten", f"{name} other", text, note["other_question"]),
                  NoAnswerItem("absent_entity", "handwritten", f"{name} absent", text, note["absent_question"]),
                  NoAnswerItem("general", "handwritten", f"{name} general", text, rng.choice(GENERAL_QUESTIONS))]
    return items


def make_items(n: int, seed: int, notes: list[dict] | None = None, prose_notes: list[dict] | None = None,
               chars: tuple[int, int] = DOCUMENT_CHARS) -> list[NoAnswerItem]:
    """`n` generated items of each kind (documents of `chars` characters), then the hand-written template notes' and
    prose notes' items (when given)."""
    items = [generated_item(kind, seed * 100_000 + i, chars) for kind in KINDS for i in range(n)]
    return items + (note_items(notes, seed) if notes else []) + (prose_items(prose_notes, seed) if prose_notes else [])


def before_and_after(records: list[dict], threshold: float) -> dict:
    """Per kind and source, from `python -m evals no-answer`'s records: how many questions the rule of issue 38
    (best score at least `threshold`, the best answer's sentence naming the question's words) said "Found", and how
    many the engine's rule now says found (True), not found (False) or nothing (None: outside the demo model's
    question form), with the answerable questions' right answers counted apart. Issue 49 added the question form
    and the asked attribute's absence."""
    table = {}
    for kind in KINDS:
        for source in ("generated", "handwritten"):
            chosen = [r for r in records if r["kind"] == kind and r["source"] == source]
            if not chosen:
                continue
            before = [(r["score"] or 0.0) >= threshold and not r["missing_words"] for r in chosen]
            table[f"{kind} ({source})"] = {
                "n": len(chosen), "right": sum(r["right"] for r in chosen),
                "found_before": sum(before), "found_now": sum(r["found"] is True for r in chosen),
                "not_found_before": len(chosen) - sum(before),
                "not_found_now": sum(r["found"] is False for r in chosen),
                "no_verdict_now": sum(r["found"] is None for r in chosen),
                "right_found_before": sum(b and r["right"] for b, r in zip(before, chosen)),
                "right_found_now": sum(r["found"] is True and r["right"] for r in chosen),
                "attribute_absent": sum(bool(r["absent_words"]) for r in chosen),
                "outside_form": sum(r["outside_form"] for r in chosen)}
    return table
