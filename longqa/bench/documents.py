"""The bench's question/document pairs: made-up facts placed among the bundled samples' sentences
(`longqa/samples`), all drawn from a seed, so every worker times and compares the same inputs.

Not the demo model's training task (the workshop's `training/`, not installed): any prose serves to time a window
and to compare a profile's answers with the fp32 reference's.
"""

from __future__ import annotations

import random
import re
from functools import lru_cache

from longqa.demo_model.fact import Fact
from longqa.session import SAMPLES_DIR

ATTRIBUTES = ("colour", "motto", "height", "founder", "price", "capital", "weight", "anthem", "harbour", "river")
SYLLABLES = ("ka", "lo", "mi", "ra", "ven", "tor", "sil", "bra", "que", "dun", "el", "thi", "gor", "pa", "zu")
FACTS_PER_DOCUMENT = 4  # the asked one and three others


@lru_cache(maxsize=1)
def sample_sentences() -> tuple[str, ...]:
    """The samples' prose sentences in a fixed order; headings and markup left out."""
    text = " ".join(path.read_text(encoding="utf-8") for path in sorted(SAMPLES_DIR.glob("*.txt")) +
                    sorted(SAMPLES_DIR.glob("*.md")))
    sentences = re.split(r"(?<=[.!?])\s+", " ".join(text.split()))
    return tuple(s for s in sentences if s[:1].isupper() and s.endswith(".") and not set(s) & set("#|*<>"))


class Prose:
    """Sentences and made-up facts from one seeded random generator."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def sentence(self) -> str:
        return self.rng.choice(sample_sentences())

    def word(self) -> str:
        return "".join(self.rng.choice(SYLLABLES) for _ in range(self.rng.randint(2, 3)))

    def fact(self) -> Fact:
        return Fact(self.rng.choice(ATTRIBUTES), self.word().capitalize(), self.word())


def make_document(seed: int, n_chars: int) -> tuple[str, str]:
    """About `n_chars` of prose with the facts at random sentence boundaries: (text, the first fact's question).
    The facts are drawn before any sentence, so the question does not depend on `n_chars`."""
    prose = Prose(seed)
    facts = [prose.fact() for _ in range(FACTS_PER_DOCUMENT)]
    sentences: list[str] = []
    while sum(len(s) + 1 for s in sentences) < n_chars:
        sentences.append(prose.sentence())
    for fact in facts:
        sentences.insert(prose.rng.randint(0, len(sentences)), fact.sentence)
    return " ".join(sentences), facts[0].question
