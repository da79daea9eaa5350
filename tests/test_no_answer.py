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


NOTE = ("Freedonia is a small country. Its goats are famous. The capital of Sylvania is Brisk, a river town.\n"
        "Every school day begins with a song. The capital of Freedonia is Fredville. It rains there in May.")


def span(text, value):
    start = text.index(value)
    return start, start + len(value)


def test_evidence_wants_every_question_word_the_document_uses_near_the_answer():
    evidence = no_answer.Evidence("What is the capital of Freedonia?", [NOTE])
    assert evidence.missing(0, *span(NOTE, "Fredville")) == []
    # another entity's capital: the asked entity is in the document, but not in that sentence or the one before
    assert evidence.missing(0, *span(NOTE, "Brisk")) == ["Freedonia"]
    # the asked entity's sentence, but another attribute: "capital" is missing
    assert no_answer.Evidence("What is the anthem of Freedonia?", [NOTE + " The anthem of Zembla is Hail."]) \
        .missing(0, *span(NOTE, "Fredville")) == ["anthem"]


def test_evidence_ignores_words_the_document_never_uses_and_the_answer_itself():
    # a paraphrase: "born", "town" do not occur in the text, so only the entity is asked for
    text = "Edith Marlow grew up by the sea. Her birthplace is Penzance, a harbour."
    assert no_answer.Evidence("Which town was Edith Marlow born in?", [text]).missing(0, *span(text, "Penzance")) == []
    # the answer's own words are no evidence that its sentence is about the question
    named = "The founder of the Guild is Rosa Marlow. She also paints."
    assert no_answer.Evidence("What is the founder of Rosa Marlow?", [named]).missing(0, *span(named, "Rosa Marlow")) \
        == ["Marlow", "Rosa"]


def test_evidence_follows_pronouns_back_and_keeps_initials_in_their_sentence():
    text = ("Edith Marlow grew up on a farm. She was born in Penzance. Arthur was born in Truro.\n"
            "The laptop is a Vantage 14. It was bought in March. Its serial number is VT14-88231.")
    evidence = no_answer.Evidence("What is the birthplace of Edith Marlow?", [text])
    assert evidence.missing(0, *span(text, "Penzance")) == []  # "She": the sentence before names Edith Marlow
    assert evidence.missing(0, *span(text, "Truro")) == ["Edith", "Marlow"]  # no pronoun: Truro's sentence alone
    laptop = no_answer.Evidence("What is the serial number of the Vantage 14?", [text])
    assert laptop.missing(0, *span(text, "VT14-88231")) == []  # "Its", then "It": two sentences back
    initials = "Nothing else here. The berth of St. Wauwskonspoat is 3885, says P. J. Hale."
    near = no_answer.answer_neighbourhood(initials, *span(initials, "3885"), sentences_before=0)
    assert "Wauwskonspoat" in near and "Hale" in near and "3885" not in near


def test_a_rule_that_needs_evidence_finds_nothing_while_a_word_is_missing():
    rule = NoAnswerRule(no_answer.THRESHOLD, 1e-5, "measured", needs_evidence=True)
    assert no_answer.is_found(rule, 0.9, None, []) is True
    assert no_answer.is_found(rule, 0.9, None, ["Freedonia"]) is False
    assert no_answer.is_found(rule, 1e-6, None, []) is False
    assert no_answer.confidence(rule, 0.9, missing=["Freedonia"]) == "low"
    verdict = no_answer.judge(rule, 0.9, None, True, ["Freedonia"])
    assert verdict.message == no_answer.NOT_FOUND and "'Freedonia'" in verdict.basis
    assert verdict.to_json()["missing_words"] == ["Freedonia"]
    # a rule without it ignores what evidence says
    plain = NoAnswerRule(no_answer.THRESHOLD, 1e-5, "measured")
    assert no_answer.is_found(plain, 0.9, None, ["Freedonia"]) is True


def test_the_engine_judges_the_best_answer_with_the_evidence_its_document_gives():
    from longqa_core.answering import judge_answers
    from longqa_core.limits import EngineSettings
    from longqa_core.spans import Answer, Decoded

    rule = NoAnswerRule(no_answer.THRESHOLD, 1e-5, "measured", needs_evidence=True)
    settings = EngineSettings(no_answer=rule)
    evidence = no_answer.Evidence("What is the capital of Freedonia?", [NOTE])

    def decoded(*values):
        return Decoded([Answer(v, 0.9, "note", 0, *span(NOTE, v)) for v in values], 1e-6)

    answers, verdict = judge_answers(decoded("Brisk"), settings, True, evidence)
    assert verdict.found is False and verdict.missing == ["Freedonia"]  # another entity's capital, however likely
    assert [a.confidence for a in answers] == ["low"]
    answers, verdict = judge_answers(decoded("Fredville", "Brisk"), settings, True, evidence)
    assert verdict.found is True and verdict.missing == [] and [a.text for a in answers] == ["Fredville"]
    # a user's threshold replaces the model's rule, evidence check included
    _, verdict = judge_answers(decoded("Brisk"), EngineSettings(no_answer=rule, no_answer_below=0.5), True, evidence)
    assert verdict.found is True


def test_under_a_rule_that_needs_evidence_the_answer_is_the_best_span_whose_sentence_names_what_was_asked():
    from longqa_core.answering import judge_answers
    from longqa_core.limits import EngineSettings
    from longqa_core.spans import Answer, Decoded

    rule = NoAnswerRule(no_answer.THRESHOLD, 1e-5, "measured", needs_evidence=True)
    evidence = no_answer.Evidence("What is the capital of Freedonia?", [NOTE])
    decoded = Decoded([Answer("Brisk", 0.6, "note", 0, *span(NOTE, "Brisk")),
                       Answer("Fredville", 0.3, "note", 0, *span(NOTE, "Fredville"))], 1e-6)
    # the model's best span stands in another entity's sentence: the one in the asked entity's sentence answers
    answers, verdict = judge_answers(decoded, EngineSettings(no_answer=rule), True, evidence)
    assert [a.text for a in answers] == ["Fredville"] and verdict.found is True and verdict.missing == []
    # asked for two, the other follows, "low" though it scores higher: no answer before it is less sure
    answers, verdict = judge_answers(decoded, EngineSettings(no_answer=rule, top_k=2), True, evidence)
    assert [(a.text, a.confidence) for a in answers] == [("Fredville", "medium"), ("Brisk", "low")]
    # a rule that needs no evidence keeps the model's order
    plain = NoAnswerRule(no_answer.THRESHOLD, 1e-5, "measured")
    answers, verdict = judge_answers(decoded, EngineSettings(no_answer=plain, top_k=2), True, evidence)
    assert [a.text for a in answers] == ["Brisk", "Fredville"] and verdict.found is True
    assert no_answer.answer_pool(rule, 1) == no_answer.EVIDENCE_POOL and no_answer.answer_pool(plain, 1) == 1
    # a lower span under the rule's bar is no answer to promote: the best is judged, and its missing word said
    weak = Decoded([Answer("Brisk", 0.6, "note", 0, *span(NOTE, "Brisk")),
                    Answer("Fredville", 1e-6, "note", 0, *span(NOTE, "Fredville"))], 1e-6)
    answers, verdict = judge_answers(weak, EngineSettings(no_answer=rule, top_k=2), True, evidence)
    assert [a.text for a in answers] == ["Brisk", "Fredville"] and verdict.found is False
    assert verdict.missing == ["Freedonia"]
    # nor one past the best EVIDENCE_POOL, however many answers were asked for
    crowd = [Answer("Brisk", 0.6 - i * 0.01, "note", 0, *span(NOTE, "Brisk")) for i in range(no_answer.EVIDENCE_POOL)]
    late = Decoded(crowd + [Answer("Fredville", 0.3, "note", 0, *span(NOTE, "Fredville"))], 1e-6)
    answers, verdict = judge_answers(late, EngineSettings(no_answer=rule, top_k=6), True, evidence)
    assert answers[0].text == "Brisk" and verdict.found is False


def test_a_lower_span_that_runs_past_its_sentence_never_passes_the_best():
    from longqa_core.answering import judge_answers
    from longqa_core.limits import EngineSettings
    from longqa_core.spans import Answer, Decoded

    text = "The default value of the timeout flag is 30 seconds. The default value of the retry flag is False. It is."
    rule = NoAnswerRule(no_answer.THRESHOLD, 1e-5, "measured", needs_evidence=True)
    evidence = no_answer.Evidence("What is the default value of the retry flag?", [text])
    long_span = "False. It is"
    decoded = Decoded([Answer(v, s, "note", 0, *span(text, v)) for v, s in
                       (("30 seconds", 0.9), (long_span, 0.05), ("False", 0.01))], 1e-6)
    answers, verdict = judge_answers(decoded, EngineSettings(no_answer=rule, top_k=3), True, evidence)
    assert [a.text for a in answers] == ["False", "30 seconds", long_span] and verdict.found is True
    assert no_answer.within_sentence("Dr. J. Smith lives here. Yes.", 0, 12)
    assert not no_answer.within_sentence(text, text.index("False"), len(text))


def test_a_span_cut_inside_a_written_word_gives_way_to_a_whole_one_that_covers_it():
    """Issue 57's seed-8 layout miss: the tokenizer splits "GGJ90337" into letters and digits, and the model's best
    span starts between them. Under a rule that needs evidence, a lower span of the pool that passes, covers it and
    is whole answers; without one, or under another rule, the best span stands."""
    from longqa_core.answering import judge_answers
    from longqa_core.limits import EngineSettings
    from longqa_core.spans import Answer, Decoded

    text = "The toll of Brannigan Cooperative is 91 kilometres. The blood type of Brannigan Cooperative is GGJ90337."
    rule = NoAnswerRule(no_answer.THRESHOLD, 1e-5, "measured", needs_evidence=True)
    evidence = no_answer.Evidence("What is the blood type of Brannigan Cooperative?", [text])

    def decoded(*pairs):
        return Decoded([Answer(v, s, "note", 0, *span(text, v)) for v, s in pairs], 1e-6)

    two = EngineSettings(no_answer=rule, top_k=2)
    answers, verdict = judge_answers(decoded(("90337", 0.6), ("GGJ90337", 0.3)), two, True, evidence)
    assert [a.text for a in answers] == ["GGJ90337", "90337"] and verdict.found is True
    assert [a.confidence for a in answers] == ["medium", "medium"]  # the part no surer than the answer above it
    # a whole span elsewhere is no cover, and one under the bar does not pass: the cut span stands
    for pairs in ((("90337", 0.6), ("91 kilometres", 0.3)), (("90337", 0.6), ("GGJ90337", 1e-6))):
        answers, _ = judge_answers(decoded(*pairs), two, True, evidence)
        assert answers[0].text == "90337"
    # a rule that needs no evidence keeps the model's order
    plain = NoAnswerRule(no_answer.THRESHOLD, 1e-5, "measured")
    answers, _ = judge_answers(decoded(("90337", 0.6), ("GGJ90337", 0.3)), EngineSettings(no_answer=plain, top_k=2),
                               True, evidence)
    assert answers[0].text == "90337"
    assert no_answer.cut_in_word(text, text.index("90337"), len(text) - 1)
    assert not no_answer.cut_in_word(text, text.index("GGJ"), len(text) - 1)
    assert not no_answer.cut_in_word("a self-contained unit", 7, 16)  # "contained" after a hyphen is whole


FORM = no_answer.QuestionForm("What is the <attribute> of <name>?", "This model answers one form only.")


def test_a_question_form_fits_its_shape_only():
    assert FORM.fits("What is the stock ticker of Brindlewick Instruments?")
    assert FORM.fits("  what is the  capital of Freedonia ")  # case, white space and the question mark free
    assert not FORM.fits("Who founded Brindlewick Instruments?")
    assert not FORM.fits("How many Kestrel barometers were sold in 1978?")
    assert not FORM.fits("What is the balance reported by the treasurer?")


@pytest.mark.parametrize("question, words", [
    ("What is the stock ticker of Brindlewick Instruments?", ["ticker"]),  # the attribute's last word
    ("What is the opening date of the Harbour Lights festival?", ["opening"]),  # "date" names only a value's kind
    ("What is the name of the grey cat?", []),
    ("How many Kestrel barometers were sold in 1978?", ["barometers", "sold"]),  # names and numbers left out
    ("Who founded Brindlewick Instruments?", ["founded"]),
])
def test_attribute_words_name_what_the_question_asks_for(question, words):
    assert no_answer.attribute_words(question) == words


HISTORY = ("Elsbeth Marrow founded Brindlewick Instruments in 1921. Kept in stock, the Wren sold well. "
           "Ben Torran is 1,034 metres high. The Corner Loaf's owner is Ada. The festival will open on 14 August.")


@pytest.mark.parametrize("question, absent", [
    ("What is the stock ticker of Brindlewick Instruments?", ["ticker"]),  # "stock" is used, "ticker" never
    ("What is the share price of Brindlewick Instruments?", ["price"]),
    ("What is the height of Ben Torran?", []),  # "high" gives a height
    ("Who owns the Corner Loaf?", []),  # "owner" starts with "own"
    ("What is the opening date of the festival?", []),  # "open"
    ("Who founded Brindlewick Instruments?", []),
    ("Who wrote Hamlet?", ["wrote"]),
])
def test_evidence_says_when_no_document_uses_the_asked_attribute(question, absent):
    evidence = no_answer.Evidence(question, ["Nothing to see.", HISTORY])
    assert evidence.absent() == absent


def test_an_absent_attribute_is_never_found_under_any_rule():
    threshold = NoAnswerRule(no_answer.THRESHOLD, 1e-5, "measured", needs_evidence=True)
    null = NoAnswerRule(no_answer.NULL_SCORE)
    free = NoAnswerRule(no_answer.UNCALIBRATED)
    assert no_answer.judge(threshold, 0.9, None, True, [], ["ticker"]).found is False
    assert no_answer.judge(null, 0.9, 0.1, True, [], ["ticker"]).found is False
    loose = no_answer.judge(free, 0.9, None, True, [], ["ticker"])  # claims nothing, but not "Found" either
    assert loose.found is None and loose.confidence == "low" and "'ticker'" in loose.explanation
    verdict = no_answer.judge(threshold, 0.9, None, True, [], ["ticker"])
    assert verdict.confidence == "high"
    assert verdict.explanation == "Not found in the documents (high confidence): no document mentions 'ticker'."
    assert verdict.to_json()["absent_words"] == ["ticker"]
    # absence is the whole text's: a guided read cut short still says "not found in the documents"
    assert no_answer.judge(threshold, 0.9, None, False, [], ["ticker"]).message == no_answer.NOT_FOUND
    # a question of another shape names its attribute less surely (a paraphrase's verb): never found, not "not found"
    paraphrase = no_answer.judge(null, 0.9, 0.1, True, [], ["established"], "Who established the Guild?")
    assert paraphrase.found is None and paraphrase.confidence == "low"
    assert paraphrase.explanation == "A guess (low confidence): no document mentions 'established'."
    assert no_answer.judge(null, 0.05, 0.1, True, [], ["established"], "Who established the Guild?").found is False


def test_a_question_outside_the_rules_form_is_never_found_and_says_so():
    rule = NoAnswerRule(no_answer.THRESHOLD, 1e-5, "measured", needs_evidence=True, question_form=FORM)
    outside = no_answer.judge(rule, 0.9, None, True, [], [], "Who founded Brindlewick Instruments?")
    assert outside.found is None and outside.outside_form and outside.confidence == "low"
    assert outside.notices == [FORM.notice] and "What is the <attribute> of <name>?" in outside.explanation
    # the same answer to a question of the form is found
    assert no_answer.judge(rule, 0.9, None, True, [], [], "What is the founder of Brindlewick?").found is True
    # what the rule does not find stays not found, with low confidence and the form named
    unlikely = no_answer.judge(rule, 1e-9, None, True, [], ["wrote"], "Who wrote Hamlet?")
    assert unlikely.found is False and unlikely.confidence == "low" and "<attribute>" in unlikely.explanation
    # a user's threshold replaces the score rule, not the model's form
    assert no_answer.effective_rule(rule, 0.5).question_form is FORM


def test_a_not_found_verdict_is_one_short_sentence_and_keeps_the_rule_for_a_disclosure():
    rule = NoAnswerRule(no_answer.THRESHOLD, 4.2e-8, "docs/no-answer.md: python -m evals no-answer")
    far, near = no_answer.judge(rule, 1e-12, None, True), no_answer.judge(rule, 2e-8, None, True)
    assert far.explanation == ("Not found in the documents (high confidence): no passage answers the question "
                               "clearly enough.")
    assert near.confidence == "medium" and "4.2e-08" not in near.explanation
    assert "4.2e-08" in near.details and near.evaluation == "docs/no-answer.md"
    assert no_answer.judge(NoAnswerRule(no_answer.THRESHOLD, 1e-5, "given by the user"), 1e-9, None,
                           True).evaluation is None
    shown = far.to_json()
    assert shown["verdict"] == no_answer.NOT_FOUND and shown["explanation"] == far.explanation
    assert shown["details"] == far.details and shown["confidence"] == "high"


def test_confidence_words_never_rise_down_an_answer_list():
    """Issue 49: rank 2 (1.3e-06, its sentence lacking a word) was "low" while rank 3 (1.1e-07) was "medium". Under a
    rule that needs evidence the answers whose sentence names the question's words come first (in score order, their
    words monotone in the score), those lacking one after them, "low"."""
    from longqa_core.answering import judge_answers
    from longqa_core.limits import EngineSettings
    from longqa_core.spans import Answer, Decoded

    rule = NoAnswerRule(no_answer.THRESHOLD, 4.2e-8, "measured", needs_evidence=True)
    evidence = no_answer.Evidence("What is the capital of Freedonia?", [NOTE])
    answers = [Answer(v, s, "note", 0, *span(NOTE, v)) for v, s in
               (("Fredville", 0.6), ("Brisk", 1.3e-6), ("Fredville. It rains", 1.1e-7))]
    judged, _ = judge_answers(Decoded(answers, None), EngineSettings(no_answer=rule, top_k=3), True, evidence)
    # the third runs past its sentence: it never passes the best, and no answer below one that does not pass is
    # surer than "low"
    assert [(a.text, a.confidence) for a in judged] == [("Fredville", "high"), ("Brisk", "low"),
                                                         ("Fredville. It rains", "low")]
    answers = [Answer(v, s, "note", 0, *span(NOTE, v)) for v, s in
               (("Brisk", 0.6), ("Fredville", 1.3e-6), ("Fredville", 1.1e-7))]
    judged, _ = judge_answers(Decoded(answers, None), EngineSettings(no_answer=rule, top_k=3), True, evidence)
    assert [(a.text, a.confidence) for a in judged] == [("Fredville", "medium"), ("Fredville", "medium"),
                                                         ("Brisk", "low")]
    assert no_answer.in_score_order(["low", "medium", "high"], [0.1, 0.1, 0.01]) == ["low", "medium", "low"]


@pytest.mark.parametrize("score, found", [(1e-12, False), (0.5, None)])
def test_the_demo_model_s_form_notice_never_contradicts_the_verdict(score, found):
    """Outside the question form, "not found" (a best score under the bar) and a guess each say so in the verdict;
    the notice only names the form, never "the answer shown is a guess" beside "Not found"."""
    from longqa.models import NO_ANSWER_RULES

    verdict = no_answer.judge(NO_ANSWER_RULES["demo"], score, None, True, [], [], "Who painted the lighthouse?")
    assert verdict.outside_form and verdict.found is found
    assert verdict.notices and not any("guess" in notice for notice in verdict.notices)
    assert ("A guess" in verdict.explanation) is (found is None)
