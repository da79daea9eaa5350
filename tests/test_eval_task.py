"""The evaluation-only generator: independent of the training generator's vocabulary and prose, the lengths it
declares, and facts and answer offsets that are right."""

from __future__ import annotations

import ast
import json
import random
import re
from pathlib import Path

import pytest

from evals import eval_task
from training import broad_task, demo_task

SEEDS = range(300)
HANDWRITTEN = Path(__file__).parent / "data" / "handwritten_qa.json"


def words_of(phrase: str) -> list[str]:
    """Lowercase words of a name or attribute: split at spaces and hyphens, surrounding punctuation dropped."""
    return [w.strip(".,'&").lower() for w in re.split(r"[\s-]+", phrase) if w.strip(".,'&")]


FUNCTION_WORDS = {"the", "a", "an", "of", "in", "at", "on", "for", "with", "as", "to", "each", "every", "most",
                  "our", "her", "this", "after", "before", "during", "without", "much", "some", "my", "is", "up", "and",
                  "st", "o"}  # "st" and "o" are the shape markers of "St. Ives" and "O'Hara", in both on purpose
MONTHS = {"january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december"}


def word_lists(module) -> dict[str, list[str]]:
    """Every module-level list or tuple of strings of a module (its word lists and sentence templates)."""
    return {name: list(value) for name, value in vars(module).items()
            if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value)
            and name not in ("VALUE_KINDS", "_PROSE_MODULES")}  # labels and module names, not words


PROSE_LISTS = ("_SUBJECTS", "_VERBS", "_ENDINGS", "_TRAIN_REGISTERS", "_TRAIN_FACTLIKE", "_TRAIN_MENTIONS",
               "_TRAIN_QUOTES", "_TRAIN_NUMERIC")
SYLLABLE_LISTS = ("_ONSETS", "_VOWELS", "_CODAS", "_OPEN_ONSETS", "_OPEN_VOWELS", "_OPEN_CODAS")


def training_vocabulary(names_and_values_only: bool = False) -> set[str]:
    """Every word of the training generator's lists (classic and broad): attributes, names, values and prose
    templates; or only the lists its names and values are made of. Syllables are checked apart, initials not."""
    words = set() if names_and_values_only else set(demo_task.load_nouns())
    for name, phrases in (word_lists(demo_task) | word_lists(broad_task)).items():
        if name in SYLLABLE_LISTS or (names_and_values_only and name in PROSE_LISTS + ("_ATTRIBUTE_MODIFIERS",)):
            continue
        for phrase in phrases:
            words.update(words_of(phrase))
    return {w for w in words if len(w) > 1} - FUNCTION_WORDS - MONTHS


def training_syllables() -> list[re.Pattern]:
    """Every word the training generator's made-up names and values can spell, one pattern per inventory."""
    def alternatives(pieces):
        return "|".join(sorted((re.escape(p) for p in pieces), key=len, reverse=True))

    return [re.compile(f"(?:(?:{alternatives(onsets)})(?:{alternatives(vowels)})(?:{alternatives(codas)}))+")
            for onsets, vowels, codas in [(demo_task._ONSETS, demo_task._VOWELS, demo_task._CODAS),
                                          (broad_task._OPEN_ONSETS, broad_task._OPEN_VOWELS, broad_task._OPEN_CODAS)]]


def imported_names(tree: ast.Module) -> set[str]:
    """Every module and name a module's imports mention."""
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}
    return imported


def test_the_module_does_not_import_the_training_generator():
    tree = ast.parse(Path(eval_task.__file__).read_text())
    assert not any("demo_task" in name or "broad_task" in name or "nouns" in name for name in imported_names(tree))
    docstring = ast.get_docstring(tree, clean=False)
    strings = [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
               and node.value != docstring]
    assert not [s for s in strings if "nouns" in s or "licenses" in s or "demo_task" in s or "broad_task" in s]


def test_attributes_share_no_word_with_training():
    training = training_vocabulary()
    assert len(eval_task.ATTRIBUTES) >= 40
    assert any(" " in a for a in eval_task.ATTRIBUTES) and any(" " not in a for a in eval_task.ATTRIBUTES)
    shared = {a: w for a in eval_task.ATTRIBUTES for w in words_of(a) if w in training}
    assert not shared


@pytest.mark.slow
def test_entities_share_no_word_with_training_and_no_made_up_word_is_one_training_could_spell():
    """Real-world-like names come from the evaluation's own lists; its made-up words end in letters neither training
    syllable inventory ever ends a word with, so the two generators can never make the same made-up name."""
    training = training_vocabulary()
    inventories = training_syllables()
    rng = random.Random(1)
    assert all(p.fullmatch(w) for p, w in zip(inventories, [demo_task.make_word(rng), broad_task.make_open_word(rng)]))
    rng = random.Random(7)
    entities = [eval_task.make_entity(rng) for _ in range(3000)]
    for entity in entities:
        for word in words_of(entity):
            assert len(word) == 1 or word not in training, (entity, word)
    made_up = [eval_task.made_up_word(rng) for _ in range(3000)]
    assert not [w for w in made_up if any(p.fullmatch(w) for p in inventories)]
    training_names = {demo_task.make_entity(random.Random(seed)) for seed in range(3000)}
    training_names |= {broad_task.make_broad_entity(random.Random(seed)) for seed in range(3000)}
    assert not training_names & set(entities)


def test_value_and_name_lists_share_no_word_with_training():
    """Every list the evaluation draws names and values from shares no word with the lists the training generator
    draws names and values from (month names are the calendar, not a list: the only words both know)."""
    training = training_vocabulary(names_and_values_only=True)
    shared = {}
    for name, phrases in word_lists(eval_task).items():
        if name in ("_ONSETS", "_NUCLEI", "_MEDIALS", "_FINALS", "_MONTHS", "_CURRENCIES") or \
                name.startswith("_SLOT") or name in ("_FACTLIKE", "_MENTIONS"):
            continue
        for phrase in phrases:
            words = [w for w in words_of(phrase) if w in training]
            if words:
                shared[(name, phrase)] = words
    assert not shared


def test_entities_come_in_every_declared_shape():
    rng = random.Random(11)
    entities = [eval_task.make_entity(rng) for _ in range(2000)]
    assert any(e.startswith("St. ") for e in entities)
    assert any("'" in e for e in entities)
    assert any("-" in e for e in entities)
    assert any(re.search(r"\b[A-Z]\. ", e) for e in entities)  # initials
    assert any(re.search(r"\d", e) for e in entities)
    assert any(e.startswith("the ") for e in entities)
    assert {len(e.split()) for e in entities} >= {1, 2, 3, 4}


def test_values_come_in_every_declared_shape():
    rng = random.Random(12)
    values = [eval_task.make_value(rng, kind) for kind in sorted({k for ks in eval_task.ATTRIBUTES.values() for k in ks})
              for _ in range(200)]
    assert any(re.fullmatch(r"\d{1,3}(,\d{3})+", v) for v in values)  # thousands separators
    assert any(re.fullmatch(r"1\d{3}|20[0-2]\d", v) for v in values)  # years
    assert any(re.fullmatch(r"\d{1,2} [A-Z][a-z]+ \d{4}", v) for v in values)  # 12 March 1998
    assert any(re.fullmatch(r"[\d,.]+ [a-z]+", v) for v in values)  # 4,102 metres
    assert any(re.fullmatch(r"[A-Z]{1,3}-\d+", v) for v in values)  # VX-2291
    assert any(re.fullmatch(r"[a-z]+( [a-z-]+)+", v) for v in values)  # a red fox
    assert any(re.fullmatch(r"[A-Z][a-z]+( [A-Z][a-z]+)+", v) for v in values)  # multiword names


def test_prose_is_never_a_training_sentence():
    training = set(demo_task.prose_sentences()) | set(demo_task.license_sentences())
    writer = eval_task.EvalWriter(3)
    sentences = {writer.prose_sentence(sorted(eval_task.REGISTERS)) for _ in range(5000)}
    assert len(sentences) > 1000
    assert not sentences & training
    assert not any(s.startswith("The ") and " of " in s and " is " in s for s in
                   (t for templates in eval_task.REGISTERS.values() for t in templates))  # no fact-shaped filler


@pytest.mark.parametrize("seed", SEEDS)
def test_the_fact_sentence_is_there_once_and_the_answer_offset_is_right(seed):
    rng = random.Random(seed)
    document = eval_task.make_document(seed, rng.choice([40, 300, 3000]))
    fact = document.facts[0]
    assert document.question == f"What is the {fact.attribute} of {fact.entity}?"
    assert document.text.count(fact.sentence) == 1
    assert document.text[document.answer_start:document.answer_end] == document.answer == fact.value
    sentence_start = document.text.index(fact.sentence)
    assert document.answer_end == sentence_start + len(fact.sentence) - 1  # the value ends the sentence
    if document.placement == "first":
        assert document.text.startswith(fact.sentence)
    if document.placement == "last":
        assert document.text.endswith(fact.sentence)


def test_documents_hold_the_declared_kinds_of_distractor():
    """Long documents always have another entity's value for the asked attribute and another attribute of the
    asked entity (values that differ from the answer), beside sentences shaped like facts."""
    for seed in range(100):
        document = eval_task.make_document(seed, 800)
        fact = document.facts[0]
        assert document.text.count(f"The {fact.attribute} of ") >= 2, seed
        assert document.text.count(f" of {fact.entity} is ") >= 2, seed
        assert document.text.count(f" is {fact.value}.") == 1, seed


@pytest.mark.parametrize("seed", range(40))
def test_notes_are_20_to_100_words(seed):
    note = eval_task.make_note(seed)
    assert eval_task.NOTE_WORDS[0] <= len(note.text.split()) <= eval_task.NOTE_WORDS[1]
    assert note.text[note.answer_start:note.answer_end] == note.answer


@pytest.mark.slow
@pytest.mark.parametrize("target", [1, 300, 5000, 40_000, 90_000])
def test_documents_keep_to_the_declared_token_range(target):
    from transformers import AutoTokenizer

    from longqa.models import DEMO_MODEL_DIR

    tokenizer = AutoTokenizer.from_pretrained(DEMO_MODEL_DIR)

    def count(text):
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    document = eval_task.document_of_tokens(target, target, count)
    lo, hi = eval_task.DOCUMENT_TOKENS
    assert lo <= count(document.text) <= hi
    assert abs(count(document.text) - min(max(target, lo), hi)) <= 0.25 * min(max(target, lo), hi)


def test_the_handwritten_set_is_well_formed():
    """At least 30 hand-written documents; each holds its fact sentence once, and the answer offset points at it."""
    entries = json.loads(HANDWRITTEN.read_text())
    assert len(entries) >= 30
    assert len({e["id"] for e in entries}) == len(entries)
    assert len({e["question"] for e in entries}) == len(entries)
    for entry in entries:
        match = re.fullmatch(r"What is the (.+?) of (.+)\?", entry["question"])
        attribute, entity = match.groups()
        sentence = f"The {attribute} of {entity} is {entry['answer']}."
        assert entry["text"].count(sentence) == 1, entry["id"]
        start = entry["answer_start"]
        assert entry["text"][start:start + len(entry["answer"])] == entry["answer"]
        assert entry["text"].index(sentence) + len(sentence) - 1 == start + len(entry["answer"])
    lengths = [len(e["text"].split()) for e in entries]
    assert min(lengths) < 25 and max(lengths) > 55
    assert len({e["text"].split()[0] for e in entries}) >= 20  # documents that open in many ways
    assert any(e["text"].startswith("The ") and e["answer_start"] < 80 for e in entries)  # a fact first
