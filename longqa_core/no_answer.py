"""Whether the documents hold the answer: the "not found" rules, and an answer's confidence in words.

A rule is data (which test, which threshold, where the threshold was measured); the registry of models says which
rule each model has, and the engine applies it to the best answer and the windows' null scores. It does not decide
how much to read, and it never formats numbers for people.
"""

from __future__ import annotations

from dataclasses import dataclass

from longqa_core.errors import InputError

NULL_SCORE = "null-score"  # SQuAD 2.0 checkpoints: the best span must beat the lowest "<s>" score of the windows read
THRESHOLD = "threshold"  # a best-span score measured on held-out data, under which nothing is found
UNCALIBRATED = "uncalibrated"  # no rule: `found` is None and nothing is claimed
KINDS = (NULL_SCORE, THRESHOLD, UNCALIBRATED)
HIGH_CONFIDENCE = 0.5  # a span at least this likely is "high"; between the rule's threshold and this, "medium"


@dataclass(frozen=True)
class NoAnswerRule:
    """How a model's answers are judged. `threshold` is a best-span score (p_start × p_end, summed over identical
    answers) in (0, 1); `source` says where it was measured, or that the user gave it."""

    kind: str
    threshold: float | None = None
    source: str = ""

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


def is_found(rule: NoAnswerRule, best_score: float | None, min_null_score: float | None) -> bool | None:
    """True when the best answer passes `rule`, False when it does not (or there is no answer), None when the rule
    claims nothing."""
    if rule.kind == UNCALIBRATED:
        return None
    if best_score is None:
        return False
    if rule.kind == NULL_SCORE:
        return min_null_score is None or best_score > min_null_score
    return best_score >= rule.threshold


def confidence(rule: NoAnswerRule, score: float, min_null_score: float | None = None) -> str:
    """"high", "medium" or "low" for one answer's score. Under the rule's bar (the threshold, or the lowest null
    score of the windows read) "low"; from the bar up to HIGH_CONFIDENCE "medium"; above both "high". Without a
    rule, the same words from the span's probability alone (bar 0.01), which the readout marks as not calibrated."""
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
        if rule.kind == THRESHOLD:
            return f"best score {'at or above' if self.found else 'under'} {rule.threshold:g} ({rule.source})"
        if rule.kind == NULL_SCORE:
            return "the best span against the lowest null score of the windows read (a SQuAD 2.0 checkpoint)"
        return "no rule for this model; a not-found threshold opts in"

    def to_json(self) -> dict:
        return {"verdict": self.message, "rule": self.rule.kind, "threshold": self.rule.threshold,
                "source": self.rule.source, "null_score": self.null_score, "read_whole": self.read_whole}


def judge(rule: NoAnswerRule, best_score: float | None, null_score: float | None, read_whole: bool) -> Verdict:
    """The verdict on a request's best answer under `rule`."""
    return Verdict(is_found(rule, best_score, null_score), rule, null_score, read_whole)
