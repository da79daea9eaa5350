"""Whether the documents hold the answer: the "not found" rules, and an answer's confidence in words.

A rule is data (which test, which threshold, where the threshold was measured, whether the answer's sentence must
name what the question asks about); the registry of models says which rule each model has, and the engine applies it
to the best answer, the windows' null scores and the documents' text (`Evidence`). It does not decide how much to
read, and it never formats numbers for people.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from longqa_core.errors import InputError
from longqa_core.ranker import content_words

NULL_SCORE = "null-score"  # SQuAD 2.0 checkpoints: the best span must beat the lowest "<s>" score of the windows read
THRESHOLD = "threshold"  # a best-span score measured on held-out data, under which nothing is found
UNCALIBRATED = "uncalibrated"  # no rule: `found` is None and nothing is claimed
KINDS = (NULL_SCORE, THRESHOLD, UNCALIBRATED)
HIGH_CONFIDENCE = 0.5  # a span at least this likely is "high"; between the rule's threshold and this, "medium"


@dataclass(frozen=True)
class NoAnswerRule:
    """How a model's answers are judged. `threshold` is a best-span score (p_start × p_end, summed over identical
    answers) in (0, 1); `source` says where it was measured, or that the user gave it. With `needs_evidence`, an
    answer is found only where its neighbourhood names every word of the question that the document uses
    (`Evidence`): for a model whose score cannot tell the asked entity's fact from another entity's."""

    kind: str
    threshold: float | None = None
    source: str = ""
    needs_evidence: bool = False

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown no-answer rule {self.kind!r}; expected one of {', '.join(KINDS)}")
        if self.kind == THRESHOLD:
            check_threshold(self.threshold)


NO_RULE = NoAnswerRule(UNCALIBRATED, source="not calibrated for this model")  # what a model outside the registry has


def check_threshold(value) -> float:
    """`value` (a number or a numeric string) as a score threshold strictly between 0 and 1, or InputError saying
    so."""
    try:
        threshold = float(value)
    except (TypeError, ValueError):
        raise InputError(f"The no-answer threshold must be a number between 0 and 1 (exclusive), not {value!r}.")
    if not 0.0 < threshold < 1.0:
        raise InputError(f"The no-answer threshold must be between 0 and 1 (exclusive), not {value!r}.")
    return threshold


def user_rule(threshold) -> NoAnswerRule:
    """The rule a user opts in to with `--no-answer-below SCORE` (or the page's and the API's field)."""
    return NoAnswerRule(THRESHOLD, check_threshold(threshold), "given by the user")


def effective_rule(model_rule: NoAnswerRule, below: float | None) -> NoAnswerRule:
    """The rule a request is judged by: the user's threshold when given (`below`), else the model's."""
    return model_rule if below is None else user_rule(below)


# The answer's neighbourhood: its own sentence, and while the first sentence taken speaks of someone by a pronoun, the
# one before it too, up to PRONOUN_SENTENCES more ("The laptop is a Vantage 14. It was bought in March. Its serial
# number is VT14-88231."). Sentences end at . ! ? before white space, and at line breaks; not after an initial
# ("P. Albrecht") or a title ("St. Olave's"). docs/no-answer.md measures the choice: taking the sentence before as
# well kept one more right answer of 74 and let six more unanswerable questions of 242 through.
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|\n")
_ABBREVIATION = re.compile(r"(?:\b[A-Za-z]|\b(?:St|Dr|Mr|Mrs|Ms|Mt|Prof|Rev|Capt|Col|Gen|Lt|Sgt|Fr|Jr|Sr|No|Nos|"
                           r"vs|etc|approx|Inc|Ltd|Co))\.$")
_PRONOUN = re.compile(r"\b(?:it|its|he|him|his|she|her|they|them|their)\b", re.IGNORECASE)
EVIDENCE_SENTENCES_BEFORE = 0
PRONOUN_SENTENCES = 3
_REACH_CHARS = 4_000  # no sentence is looked for further than this from the answer
_WORD = re.compile(r"(?u)\b\w\w+\b")  # the ranker's words: two or more letters or digits


def answer_neighbourhood(text: str, start: int, end: int, sentences_before: int | None = None) -> str:
    """The sentence holding text[start:end], the `sentences_before` sentences before it (default
    EVIDENCE_SENTENCES_BEFORE) and those its pronouns reach back to, the answer itself left out (a value that shares a
    word with the question is no evidence)."""
    sentences_before = EVIDENCE_SENTENCES_BEFORE if sentences_before is None else sentences_before
    reach = max(0, start - _REACH_CHARS)
    starts = [reach] + [m.end() for m in _SENTENCE_BREAK.finditer(text, reach, start) if _ends_sentence(text, m)]
    first = max(0, len(starts) - 1 - sentences_before)  # index in `starts` of the first sentence taken
    for _ in range(PRONOUN_SENTENCES):
        if first == 0 or not _PRONOUN.search(text, starts[first], starts[first + 1] if first + 1 < len(starts)
                                             else start):
            break
        first -= 1
    after = next((m for m in _SENTENCE_BREAK.finditer(text, end, end + _REACH_CHARS) if _ends_sentence(text, m)),
                 None)
    return text[starts[first]:start] + " " + text[end:after.start() if after else min(len(text), end + _REACH_CHARS)]


def _ends_sentence(text: str, brk: re.Match) -> bool:
    """Whether a break `_SENTENCE_BREAK` found ends a sentence: a line break does, a full stop after an initial or
    a title does not."""
    return "\n" in brk.group() or not _ABBREVIATION.search(text, max(0, brk.start() - 8), brk.start())


@dataclass
class Evidence:
    """Whether an answer's neighbourhood names what the question asks about: every content word (stemmed) of the
    question that its document uses must be in the answer's sentence (with the sentences its pronouns point back
    to, `answer_neighbourhood`). Words the document never uses (a paraphrase's, general knowledge's) ask for
    nothing. Built once per request; which words a document uses is looked up once, when an answer from it is first
    checked."""

    question: str
    texts: list[str]
    _asked: dict[str, str] | None = field(default=None, init=False, repr=False)  # stem -> the question's word
    _used: dict[int, set[str]] = field(default_factory=dict, init=False, repr=False)
    _lowered: dict[int, str] = field(default_factory=dict, init=False, repr=False)
    _missing: dict[tuple[int, int, int], list[str]] = field(default_factory=dict, init=False, repr=False)

    def asked(self) -> dict[str, str]:
        """The question's stems and the words it writes them as: found at the first answer checked (a request whose
        rule needs no evidence never splits its question)."""
        if self._asked is None:
            self._asked = {}
            for word in _WORD.findall(self.question):
                for stem in content_words(word):
                    self._asked.setdefault(stem, word)
        return self._asked

    def _document_words(self, index: int) -> set[str]:
        """The question's stems that document `index` uses somewhere: each looked for by the letters it shares with
        the question's word, the first word found with that stem ends the search (no tokenizing the whole text)."""
        if index not in self._used:
            self._used[index] = {stem for stem, word in self.asked().items() if self._uses(index, stem, word)}
        return self._used[index]

    def _uses(self, index: int, stem: str, word: str) -> bool:
        if index not in self._lowered:
            self._lowered[index] = self.texts[index].lower()
        text = self._lowered[index]
        # the letters the stem shares with the question's word, less one: a stem may end in a letter its other
        # words do not have ("countri": "countries", "country")
        shared = len(os.path.commonprefix([stem, word.lower()]))
        prefix = word.lower()[:max(min(shared, 2), shared - 1)]
        tried = set()  # each distinct word is stemmed once
        at = text.find(prefix)
        while at >= 0:
            whole = _WORD.match(text, at) if at == 0 or not text[at - 1].isalnum() else None
            if whole and whole.group() not in tried:
                if stem in content_words(whole.group()):
                    return True
                tried.add(whole.group())
            at = text.find(prefix, at + 1)
        return False

    def missing(self, document_index: int, start: int, end: int) -> list[str]:
        """The question's words (as the question writes them) that the document uses but that are not near the
        answer at text[start:end]; every place the answer's text occurs is tried, and the best one counts. Asked
        once per span: a guided round's best answer is often the request's."""
        span = (document_index, start, end)
        if span not in self._missing:
            self._missing[span] = self._find_missing(document_index, start, end)
        return list(self._missing[span])

    def _find_missing(self, document_index: int, start: int, end: int) -> list[str]:
        wanted = self._document_words(document_index)
        if not wanted:
            return []
        text = self.texts[document_index]
        places = [(start, end)] + [(m.start(), m.end()) for m in
                                   re.finditer(re.escape(text[start:end]), text, re.IGNORECASE)][:50]
        best = None
        for at, to in places:
            lacking = wanted - content_words(answer_neighbourhood(text, at, to))
            if best is None or len(lacking) < len(best):
                best = lacking
            if not best:
                break
        return sorted(self.asked()[stem] for stem in best)


def is_found(rule: NoAnswerRule, best_score: float | None, min_null_score: float | None,
             missing: list[str] | None = None) -> bool | None:
    """True when the best answer passes `rule`, False when it does not (or there is no answer), None when the rule
    claims nothing. `missing` is what `Evidence.missing` says of the best answer (a rule that needs evidence finds
    nothing while it names a word)."""
    if rule.kind == UNCALIBRATED:
        return None
    if best_score is None:
        return False
    if rule.needs_evidence and missing:
        return False
    if rule.kind == NULL_SCORE:
        return min_null_score is None or best_score > min_null_score
    return best_score >= rule.threshold


def confidence(rule: NoAnswerRule, score: float, min_null_score: float | None = None,
               missing: list[str] | None = None) -> str:
    """"high", "medium" or "low" for one answer's score. Under the rule's bar (the threshold, or the lowest null
    score of the windows read) "low"; from the bar up to HIGH_CONFIDENCE "medium"; above both "high". Without a
    rule, the same words from the span's probability alone (bar 0.01), which the readout marks as not calibrated.
    Under a rule that needs evidence, an answer whose neighbourhood lacks a word of the question (`missing`) is
    "low"."""
    if rule.needs_evidence and missing:
        return "low"
    if rule.kind == THRESHOLD:
        passes = score >= rule.threshold
    elif rule.kind == NULL_SCORE:
        passes = min_null_score is None or score > min_null_score
    else:
        passes = score >= 0.01
    if not passes:
        return "low"
    return "high" if score >= HIGH_CONFIDENCE else "medium"


# What the readouts say, written once.
NOT_FOUND = "Not found in the documents"
NOT_FOUND_IN_PART = "Not found in the part read"
NOT_CALIBRATED = "confidence not calibrated for this model"


@dataclass
class Verdict:
    """Whether the documents hold the answer, by which rule, and over what: `read_whole` is False when a time budget
    ended a guided read before every window was read, so "not found" covers only the part read."""

    found: bool | None
    rule: NoAnswerRule
    null_score: float | None  # the lowest "<s>" score of the windows read (SQuAD 2.0 checkpoints compare with it)
    read_whole: bool
    missing: list[str] = field(default_factory=list)  # the question's words the best answer's sentence lacks

    @property
    def message(self) -> str:
        """The verdict in words: "Found", a not-found message, or that nothing is claimed."""
        if self.found is None:
            return f"No verdict: {NOT_CALIBRATED}"
        if self.found:
            return "Found"
        return NOT_FOUND if self.read_whole else NOT_FOUND_IN_PART

    @property
    def basis(self) -> str:
        """The rule that gave the verdict, in words."""
        rule = self.rule
        if rule.needs_evidence and self.missing:
            words = ", ".join(f"'{word}'" for word in self.missing)
            return f"the best span's sentence does not name {words}, which the question asks about ({rule.source})"
        if rule.kind == THRESHOLD:
            named = " and its sentence names what the question asks about" if rule.needs_evidence and self.found \
                else ""
            return f"best score {'at or above' if self.found else 'under'} {rule.threshold:g}{named} ({rule.source})"
        if rule.kind == NULL_SCORE:
            return "the best span against the lowest null score of the windows read (a SQuAD 2.0 checkpoint)"
        return "no rule for this model; a not-found threshold opts in"

    def to_json(self) -> dict:
        return {"verdict": self.message, "rule": self.rule.kind, "threshold": self.rule.threshold,
                "source": self.rule.source, "null_score": self.null_score, "read_whole": self.read_whole,
                "needs_evidence": self.rule.needs_evidence, "missing_words": list(self.missing)}


def judge(rule: NoAnswerRule, best_score: float | None, null_score: float | None, read_whole: bool,
          missing: list[str] | None = None) -> Verdict:
    """The verdict on a request's best answer under `rule` (`missing`: what `Evidence.missing` says of it)."""
    return Verdict(is_found(rule, best_score, null_score, missing), rule, null_score, read_whole, list(missing or []))
