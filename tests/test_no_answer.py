import pytest

from longqa_core import no_answer
from longqa_core.no_answer import NoAnswerRule


def test_threshold_rule_finds_at_or_above_the_threshold_only():
    rule = NoAnswerRule(no_answer.THRESHOLD, 1e-4, "measured")
    assert no_answer.is_found(rule, 2e-4, None) is True
    assert no_answer.is_found(rule, 1e-4, None) is True
    assert no_answer.is_found(rule, 9e-5, None) is False
    assert no_answer.is_found(rule, None, None) is False  # no answer at all


def test_null_score_rule_compares_the_best_span_with_the_lowest_null_score():
    rule = NoAnswerRule(no_answer.NULL_SCORE)
    assert no_answer.is_found(rule, 0.3, 0.2) is True
    assert no_answer.is_found(rule, 0.2, 0.3) is False
    assert no_answer.is_found(rule, 0.2, 0.2) is False  # a tie goes to "no answer", as the pipeline sorted it


def test_uncalibrated_models_claim_nothing():
    rule = NoAnswerRule(no_answer.UNCALIBRATED)
    assert no_answer.is_found(rule, 0.99, None) is None
    assert no_answer.is_found(rule, 1e-12, None) is None


@pytest.mark.parametrize("bad", [0, 1, -0.1, 1.5, "x", None, float("nan")])
def test_a_threshold_outside_zero_one_is_refused_with_a_clear_message(bad):
    with pytest.raises(ValueError, match="between 0 and 1"):
        no_answer.user_rule(bad)


def test_a_numeric_string_threshold_is_read_as_its_number():
    assert no_answer.user_rule("0.001").threshold == pytest.approx(0.001)


def test_confidence_words_follow_the_rule():
    rule = NoAnswerRule(no_answer.THRESHOLD, 1e-4, "measured")
    assert no_answer.confidence(rule, 0.9) == "high"
    assert no_answer.confidence(rule, 0.01) == "medium"
    assert no_answer.confidence(rule, 1e-5) == "low"
    null = NoAnswerRule(no_answer.NULL_SCORE)
    assert no_answer.confidence(null, 0.6, 0.7) == "low"  # likely, but less than "no answer"
    assert no_answer.confidence(null, 0.6, 0.1) == "high"
    free = NoAnswerRule(no_answer.UNCALIBRATED)
    assert [no_answer.confidence(free, s) for s in (0.7, 0.05, 0.001)] == ["high", "medium", "low"]


def test_an_unknown_rule_kind_is_refused():
    with pytest.raises(ValueError, match="unknown no-answer rule"):
        NoAnswerRule("magic")
