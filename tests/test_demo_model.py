"""The bundled demo model: loads offline, finds a fact that straddles a window edge and the document that holds it,
answers in whole words, and says what it cannot answer, each on one constructed case. How often it answers right
is a measurement, not a test: `python -m evals demo-model` (docs/results/demo-model-eval.json, docs/demo-model.md;
tests/test_evals_command.py runs it on one note)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from training import demo_task
from longqa.loader import load_model
from longqa.models import DEMO_MODEL_DIR
from longqa_core.documents import Document
from longqa_core.answering import answer
from longqa_core.limits import EngineSettings
from longqa_core.windows import make_windows
from longqa_core.spans import is_answer_text
from tests.reference_qa import cuts_a_word

SETTINGS = EngineSettings(max_seq_len=4096, doc_stride=128, batch_size=2)


@pytest.fixture(scope="module")
def baseline_fp32():
    """The demo model as the loader gives it, once for the module: no test here changes it."""
    return load_model("demo", "baseline-fp32")


def test_bundled_files_are_small_safetensors():
    files = {p.name: p.stat().st_size for p in DEMO_MODEL_DIR.iterdir()}
    assert "model.safetensors" in files and "pytorch_model.bin" not in files
    assert sum(files.values()) <= 30 * 1024 * 1024


@pytest.mark.slow
def test_answers_a_fact_that_straddles_a_window_boundary(baseline_fp32):
    runner, tokenizer = baseline_fp32.runner, baseline_fp32.tokenizer
    writer = demo_task.FactWriter(4242, "test")
    target = writer.target()
    base = writer.document(90_000, target, writer.distractors(target, 3, 2, 3), include_target=False)
    settings = SETTINGS.resolved(tokenizer)
    windows, stats = make_windows(tokenizer, target.question, [Document("d", base.text)], settings)
    assert stats[0].tokens >= 20_000
    first = windows[0]
    context_tokens = [i for i, c in enumerate(first.context) if c]
    boundary_char = first.offsets[context_tokens[-1]][1]  # where the first window's context ends
    # Put the fact so that the boundary falls in its middle: window 0 sees only its first half.
    cut = boundary_char - len(target.sentence) // 2
    while base.text[cut] != " ":
        cut += 1
    text = base.text[:cut] + " " + target.sentence + base.text[cut:]
    result = answer(runner, tokenizer, [Document("long.txt", text)], target.question, settings)
    assert result.windows >= 5
    best = result.answers[0]
    assert best.text == target.value
    assert text[best.start_char:best.end_char] == target.value
    assert best.start_char == text.index(target.sentence) + len(target.sentence) - len(target.value) - 1


@pytest.mark.slow
def test_finds_the_document_that_holds_the_fact(baseline_fp32):
    runner, tokenizer = baseline_fp32.runner, baseline_fp32.tokenizer
    example = demo_task.make_example(3_000_000_001, 12_000, split="test")
    other = demo_task.make_example(3_000_000_002, 12_000, split="test")
    documents = [Document("other.txt", other.text), Document("facts.md", example.text)]
    result = answer(runner, tokenizer, documents, example.question, SETTINGS)
    assert (result.answers[0].document, result.answers[0].text) == ("facts.md", example.answer)


FREEDONIA = ("Freedonia is a small country in the mountains. Most families there keep goats and grow barley.\n"
             "The capital of Freedonia is Fredville. Its old market still opens every Tuesday morning.\n"
             "The anthem of Freedonia is Hail Freedonia. Crowds sing it, loudly, before every football match!\n"
             "The population of Freedonia is 48,213 (as of 1998). Visitors need no visa -- only a smile.\n")


@pytest.mark.parametrize("question", ["What is the capital of Freedonia?", "What is the anthem of Freedonia?",
                                      "What is the population of Freedonia?", "What is the currency of Freedonia?"])
@pytest.mark.slow
def test_freedonia_answers_are_whole_words_never_empty_or_punctuation(baseline_fp32, question):
    """The note from issue 15, where the page showed '', 'ville' and 'he capital of Freedonia is Fredville'."""
    loaded = baseline_fp32
    settings = replace(loaded.settings, top_k=5)
    result = answer(loaded.runner, loaded.tokenizer, [Document("freedonia.txt", FREEDONIA)], question, settings)
    assert len(result.answers) == 5
    for item in result.answers:
        assert item.text == FREEDONIA[item.start_char:item.end_char]
        assert is_answer_text(item.text) and item.text == item.text.strip(), item
        assert not cuts_a_word(FREEDONIA, item.start_char, item.end_char), item


BRINDLEWICK = (Path(__file__).parent / "data" / "brindlewick_history.txt").read_text()  # written by hand for issue 49
FORM_NOTICE = "The demo model answers questions of the form \u201cWhat is the <attribute> of <name>?\u201d"


@pytest.mark.parametrize("question, found, best, confidence", [
    # issue 49's three: an attribute the text never names, and two questions of another shape (the text answers
    # the third: 3,412, which the demo model cannot find)
    ("What is the stock ticker of Brindlewick Instruments?", False, None, "high"),
    ("Who founded Brindlewick Instruments?", False, None, "low"),
    ("How many Kestrel barometers were sold in 1978?", False, None, "low"),
    # the demo model's own form
    ("What is the headquarters of Brindlewick Instruments?", True, "Coldharbour Mill", "medium"),
    ("What is the chief engineer of Brindlewick Instruments?", True, "Hester Calloway", "high"),
    ("What is the curator of the centenary exhibition?", True, "Rowan Ashdown", "medium"),
    ("What is the founder of Brindlewick Instruments?", False, None, "medium"),  # "founder" names nobody's fact
])
@pytest.mark.slow
def test_a_hand_written_company_history_outside_and_inside_the_demo_form(baseline_fp32, question, found, best,
                                                                         confidence):
    """Issue 49: "ticker" appears nowhere, so never "Found"; a question of another shape says which shape the demo
    model answers and is never "Found" (here its weak answers are not found, with low confidence); questions of its
    form are answered and found."""
    loaded = baseline_fp32
    result = answer(loaded.runner, loaded.tokenizer, [Document("history.txt", BRINDLEWICK)], question,
                    loaded.settings, batch_state=loaded.batch_state, reading_mode="auto")
    verdict = result.verdict
    assert verdict.found is found and verdict.confidence == confidence
    assert verdict.explanation.count(".") >= 1 and f"({confidence} confidence)" in verdict.explanation
    outside = not question.startswith("What is the ")
    assert any(notice.startswith(FORM_NOTICE) for notice in result.notices) is outside is verdict.outside_form
    if outside:
        assert "\u201cWhat is the <attribute> of <name>?\u201d" in verdict.explanation
    if best is not None:
        assert result.answers[0].text == best
    else:
        assert all(a.confidence == "low" for a in result.answers)
    if "ticker" in question:
        assert verdict.absent == ["ticker"] and "no document mentions 'ticker'" in verdict.explanation


@pytest.mark.slow
def test_the_answer_and_the_best_so_far_come_from_the_sentence_that_states_what_was_asked(baseline_fp32):
    """Issue 57's layout misses: the model's best span stands in "The favourite dish of Dwuendveemmolf Blimsnauwkuck
    is twelve wooden spoons.", the right value second, in the sentence about the headquarters. Under the demo
    model's rule (the evidence check) the answer, and the best so far streamed before it, is the stated one."""
    from evals.layouts import make_item
    from longqa_core.documents import from_text
    from longqa_core.no_answer import THRESHOLD, NoAnswerRule

    item = make_item("one-line-txt", 570_000_012)
    documents = [from_text(item.data.decode(), item.name)]
    settings = baseline_fp32.settings
    heard = []
    result = answer(baseline_fp32.runner, baseline_fp32.tokenizer, documents, item.question, settings,
                    on_candidate=heard.append)
    assert (result.answers[0].text, result.found) == ("Mumscrot-Quartermaine", True)
    assert heard and heard[-1].answer.text == "Mumscrot-Quartermaine"
    score_alone = replace(settings, no_answer=NoAnswerRule(THRESHOLD, settings.no_answer.threshold, "test"))
    best_span = answer(baseline_fp32.runner, baseline_fp32.tokenizer, documents, item.question, score_alone)
    assert best_span.answers[0].text == "twelve wooden spoons"  # what the best span alone would say


@pytest.mark.slow
def test_a_code_the_tokenizer_splits_is_answered_whole(baseline_fp32):
    """Issue 57's seed-8 miss, in the one-line text control and three broken layouts: the model's best span is
    "90337" of "GGJ90337" (letters and digits are separate tokens); the whole code, lower in its pool, answers."""
    from evals.layouts import make_item
    from longqa_core.documents import from_text

    item = make_item("one-line-txt", 570_000_008)
    result = answer(baseline_fp32.runner, baseline_fp32.tokenizer, [from_text(item.data.decode(), item.name)],
                    item.question, baseline_fp32.settings)
    assert (result.answers[0].text, result.found) == ("GGJ90337", True)
