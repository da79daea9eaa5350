"""Whether the documents hold the answer: the "not found" rules, and an answer's confidence in words.

A rule is data (which test, which threshold, where the threshold was measured); the registry of models says which
rule each model has, and the engine applies it to the best answer and the windows' null scores. It does not decide
how much to read, and it never formats numbers for people.
"""

from __future__ import annotations

from dataclasses import dataclass

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


def check_threshold(value) -> float:
    """`value` as a score threshold strictly between 0 and 1, or ValueError saying so."""
    try:
        threshold = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"The no-answer threshold must be a number between 0 and 1 (exclusive), not {value!r}.")
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"The no-answer threshold must be between 0 and 1 (exclusive), not {value!r}.")
    return threshold


def user_rule(threshold) -> NoAnswerRule:
    """The rule a user opts in to with `--no-answer-below SCORE` (or the page's and the API's field)."""
    return NoAnswerRule(THRESHOLD, check_threshold(threshold), "given by the user")


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
