"""The fact-finding task the bundled demo model learns: random facts hidden in ordinary English prose.

Generates documents, questions and answers from a seed (training, evaluation, tests and bundled samples all
use it). It is not a model and does no tokenization: callers decide how text becomes tokens. The broad task the
bundled demo model trains on builds on this one's `FactWriter`: `broad_task`.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from longqa.demo_model.fact import Fact

NOUNS_PATH = Path(__file__).parent / "data" / "nouns.txt"
PROSE_PATH = Path(__file__).parent / "data" / "prose.txt"

# Syllable pieces for made-up names; combined at random they give millions of distinct words.
_ONSETS = ["b", "br", "c", "ch", "d", "dr", "f", "fl", "g", "gr", "h", "j", "k", "kl", "l", "m", "n", "p", "pr",
           "qu", "r", "s", "sh", "st", "t", "th", "tr", "v", "w", "z", "zh", ""]
_VOWELS = ["a", "e", "i", "o", "u", "ae", "ai", "ea", "ei", "ia", "io", "ou", "y"]
_CODAS = ["", "", "", "n", "r", "l", "s", "th", "m", "x", "nd", "rk", "st", "v"]

_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


@dataclass
class Example:
    """A document with one asked-about fact; `answer_start` is the value's character offset in `text`."""

    text: str
    question: str
    answer: str
    answer_start: int
    facts: list[Fact] = field(default_factory=list)

    @property
    def answer_end(self) -> int:
        return self.answer_start + len(self.answer)


@lru_cache(maxsize=1)
def load_nouns() -> tuple[str, ...]:
    return tuple(NOUNS_PATH.read_text().split())


def make_word(rng: random.Random, min_syllables: int = 1, max_syllables: int = 3) -> str:
    """A pronounceable made-up lowercase word."""
    parts = []
    for _ in range(rng.randint(min_syllables, max_syllables)):
        parts.append(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS))
    word = "".join(parts)
    return word if len(word) >= 2 else word + rng.choice(_VOWELS)


def make_entity(rng: random.Random) -> str:
    """A made-up capitalised name of one to three words."""
    return " ".join(make_word(rng, 1, 3).capitalize() for _ in range(rng.choice([1, 2, 2, 3])))


def make_value(rng: random.Random) -> str:
    """A number of 1 to 6 digits, or a made-up word."""
    if rng.random() < 0.5:
        digits = rng.randint(1, 6)
        return str(rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1))
    return make_word(rng, 1, 3)


def make_attribute(rng: random.Random) -> str:
    return rng.choice(load_nouns())


def _is_prose(sentence: str) -> bool:
    words = sentence.split()
    if not 5 <= len(words) <= 45 or not sentence[0].isupper() or sentence[-1] not in ".!?":
        return False
    letters = sum(ch.isalpha() or ch == " " for ch in sentence)
    return letters / len(sentence) > 0.85 and ">>>" not in sentence and "::" not in sentence


@lru_cache(maxsize=1)
def prose_sentences() -> tuple[str, ...]:
    """Real English sentences from the Python standard library's docstrings, in a fixed order: read from
    data/prose.txt, frozen once by scripts/freeze_prose.py (retired after commit 16a8273). Not extracted at run
    time: which members a module has depends on the Python version and on what was imported before (some packages
    replace standard-library functions), and every seeded document must read the same in every process and on every
    Python."""
    return tuple(PROSE_PATH.read_text(encoding="utf-8").splitlines())


def license_sentences(folder: str = "/usr/share/common-licenses") -> tuple[str, ...]:
    """Sentences of the licence texts Debian ships, where present (training only: not every machine has them)."""
    out: dict[str, None] = {}
    root = Path(folder)
    if not root.is_dir():
        return ()
    for path in sorted(root.iterdir()):
        if path.is_file():
            flat = " ".join(path.read_text(errors="ignore").split())
            for sentence in _SENTENCE_RE.split(flat):
                if _is_prose(sentence):
                    out.setdefault(sentence, None)
    return tuple(out)


_SUBJECTS = ["The committee", "Our team", "The report", "Each visitor", "The old map", "A careful reader",
             "The museum", "Most travellers", "The council", "This chapter", "The village", "Every engineer",
             "The survey", "Her brother", "The gardener", "A local guide", "The archive", "The new policy"]
_VERBS = ["describes", "mentions", "questions", "explains", "records", "ignores", "reviews", "celebrates",
          "compares", "follows", "changes", "protects", "measures", "supports", "examines", "remembers"]
_ENDINGS = ["in great detail", "before the winter", "with some care", "during the long meeting",
            "for the second time", "after a short delay", "without much fuss", "as the rules require",
            "in the northern districts", "at the end of each season", "on most afternoons", "with quiet pride"]


def generated_sentence(rng: random.Random) -> str:
    """A plain English sentence built from a small grammar, with a real noun for variety."""
    noun = rng.choice(load_nouns())
    article = "an" if noun[0] in "aeiou" else "the"
    return f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {article} {noun} {rng.choice(_ENDINGS)}."


def _split_of(sentence: str) -> str:
    """Stable train/test split of filler sentences, so evaluation prose is never seen in training."""
    return "test" if hashlib.sha1(sentence.encode()).digest()[0] < 26 else "train"


@lru_cache(maxsize=4)
def filler_pool(split: str = "train", with_licenses: bool = False) -> tuple[str, ...]:
    pool = [s for s in prose_sentences() if _split_of(s) == split]
    if with_licenses:
        pool.extend(s for s in license_sentences() if _split_of(s) == split)
    return tuple(pool)


class FactWriter:
    """Draws facts, distractors and filler from one seeded random generator."""

    def __init__(self, seed: int, split: str = "train", with_licenses: bool = False):
        self.rng = random.Random(seed)
        self.pool = filler_pool(split, with_licenses)

    def filler(self) -> str:
        if self.rng.random() < 0.15 or not self.pool:
            return generated_sentence(self.rng)
        return self.rng.choice(self.pool)

    def target(self) -> Fact:
        return Fact(make_attribute(self.rng), make_entity(self.rng), make_value(self.rng))

    def join(self, sentences: list[str]) -> str:
        return " ".join(sentences)

    def prose(self, n_chars: int, extra: list[str] = ()) -> list[str]:
        """Filler sentences until about `n_chars`, with the `extra` sentences at random places among them."""
        sentences: list[str] = []
        size = 0
        while size < n_chars:
            sentences.append(self.filler())
            size += len(sentences[-1]) + 1
        for sentence in extra:
            sentences.insert(self.rng.randint(0, len(sentences)), sentence)
        return sentences

    def distractors(self, target: Fact, same_attribute: int, same_entity: int, unrelated: int) -> list[Fact]:
        facts = [Fact(target.attribute, make_entity(self.rng), make_value(self.rng)) for _ in range(same_attribute)]
        other_attributes = [a for a in load_nouns() if a != target.attribute]
        facts += [Fact(self.rng.choice(other_attributes), target.entity, make_value(self.rng))
                  for _ in range(same_entity)]
        facts += [self.target() for _ in range(unrelated)]
        return [f for f in facts if f.value != target.value]

    def document(self, n_chars: int, target: Fact, others: list[Fact], include_target: bool = True,
                 extra: list[str] = ()) -> Example:
        """About `n_chars` of filler with the `extra` sentences and the facts placed at random sentence boundaries."""
        sentences = self.prose(n_chars, extra)
        placed = list(others) + ([target] if include_target else [])
        slots = sorted(self.rng.randint(0, len(sentences)) for _ in placed)
        self.rng.shuffle(placed)
        for offset, (slot, fact) in enumerate(zip(slots, placed)):
            sentences.insert(slot + offset, fact.sentence)
        text = self.join(sentences)
        answer_start = -1
        if include_target:
            answer_start = text.index(target.sentence) + len(target.sentence) - len(target.value) - 1
        return Example(text, target.question, target.value if include_target else "", answer_start,
                       facts=placed)


def make_example(seed: int, n_chars: int, split: str = "test", n_distractors: tuple[int, int, int] = (3, 2, 3),
                 with_licenses: bool = False) -> Example:
    """One evaluation-style document: a target fact, same-attribute, same-entity and unrelated distractors."""
    writer = FactWriter(seed, split, with_licenses)
    target = writer.target()
    others = writer.distractors(target, *n_distractors)
    return writer.document(n_chars, target, others)
