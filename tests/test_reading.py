"""Question-guided reading: the ranking and its plan (longqa_core.reading), and the engine's guided read with the
demo model on documents of the independent evaluation generator, against the full read."""

from __future__ import annotations

import dataclasses
import time

import pytest
import torch

from evals import eval_task
from longqa.models import DEMO_MODEL_DIR
from longqa.session import read_documents
from longqa_core import answering, batching, limits, no_answer, reading
from longqa_core.documents import Document
from longqa_core.errors import DocumentError, InputError
from longqa_core.index_cache import IndexCache
from longqa_core.plan import plan_request
from longqa_core.windows import WindowCut

FILLER = ("The committee met again in the spring and talked at length about the weather, the roads and the price of "
          "bread, and nobody could agree on anything at all. ")


def long_text(fact: str, at: float, n_chars: int = 200_000, mentions: str = "") -> str:
    """Filler prose of about `n_chars` with `fact` at the relative position `at`."""
    body = FILLER * (n_chars // len(FILLER))
    cut = body.index(". ", int(len(body) * at)) + 2
    return body[:cut] + fact + " " + mentions + body[cut:]


WINDOW_CHARS, OVERLAP_CHARS = 16_000, 500  # about what a 4,096-token window and its 128-token overlap hold


def cuts_of(texts: list[str]) -> list[WindowCut]:
    """Windows over the texts as the full read cuts them (overlapping; the tokens do not matter to the ranking)."""
    cuts = []
    for d, text in enumerate(texts):
        start = 0
        while True:
            end = min(len(text), start + WINDOW_CHARS)
            cuts.append(WindowCut(d, 0, 0, start, end))
            if end == len(text):
                break
            start = end - OVERLAP_CHARS
    return cuts


def index_of(texts: list[str]) -> tuple[reading.DocumentIndex, list[WindowCut]]:
    return reading.build_index([Document(f"d{i}.txt", t) for i, t in enumerate(texts)]), cuts_of(texts)


def windows_holding(cuts: list[WindowCut], document_index: int, char: int) -> set[int]:
    return {i for i, c in enumerate(cuts) if c.document_index == document_index and c.start_char <= char < c.end_char}


def test_a_window_scores_by_the_passages_centred_in_it():
    text = long_text("The budget of Quarrowby is 12 crowns.", 0.5)
    index, cuts = index_of([text, "short one"])
    spans = [reading.window_passages(index, c) for c in cuts]
    for (first, end), cut in zip(spans, cuts):
        centres = index.passage_centres[first:end]
        assert end > first and (index.passage_documents[first:end] == cut.document_index).all()
        assert cut.start_char <= centres.min() and centres.max() < cut.end_char or cut.document_index == 1
    assert spans[-1] == (len(index.passage_centres) - 1, len(index.passage_centres))  # shorter than a passage
    every = set().union(*[range(a, b) for a, b in spans])
    assert every == set(range(len(index.passage_centres)))  # every passage scores for some window


def test_the_passage_with_the_question_words_ranks_its_window_first():
    fact = "The budget of Quarrowby is 12 crowns."
    text = long_text(fact, 0.7)
    index, cuts = index_of([text])
    ranking = reading.rank(index, "What is the budget of Quarrowby?", cuts)
    assert ranking.matched == ["budget", "quarrowbi"] or set(ranking.matched) >= {"budget"}
    assert int(ranking.order[0]) in windows_holding(cuts, 0, text.index(fact))
    plan = reading.plan_reading("guided", index, ranking, "What is the budget of Quarrowby?", len(cuts))
    assert plan.mode == "guided" and plan.decisive
    assert plan.rounds[0][0] == int(ranking.order[0])
    assert plan.rounds == [ranking.matching()[:reading.FIRST_ROUND_WINDOWS]]
    assert plan.reason.startswith(f"ranked the full read's {len(cuts)} windows on budget, Quarrowby:")  # as asked


@pytest.mark.slow
def test_windows_that_tie_on_the_entity_are_all_read_before_stopping():
    """A paraphrased question matches only the entity: every window that names it ties, none is decisive."""
    chunk = FILLER * (40_000 // len(FILLER))
    sentences = ["Quarrowby set aside 12 crowns."] + ["Quarrowby was mentioned in passing."] * 4
    text = "".join(chunk + sentence + " " for sentence in sentences) + chunk
    index, cuts = index_of([text])
    ranking = reading.rank(index, "How much money does Quarrowby have for the year?", cuts)
    plan = reading.plan_reading("guided", index, ranking, "q", len(cuts))
    tied = ranking.tied()
    mentions = [windows_holding(cuts, 0, at) for at in
                [i for i in range(len(text)) if text.startswith("Quarrowby", i)]]
    assert len(mentions) == 5 and all(m & set(tied) for m in mentions) and not plan.decisive
    assert plan.rounds[0] + plan.rounds[1] == tied and len(plan.rounds) == 2  # the first two rounds hold every tie
    assert not plan.should_stop_after(0, 0.99)  # a strong answer does not stop reading before the ties are read
    assert plan.should_stop_after(1, 0.99)
    assert not plan.should_stop_after(0, reading.WEAK_ANSWER_SCORE / 2)  # a weak one reads on
    assert plan.should_stop_after(len(plan.rounds) - 1, None)  # the engine then reads the whole document
    assert plan.is_weak(None) and plan.is_weak(reading.WEAK_ANSWER_SCORE / 2) and not plan.is_weak(0.5)
    plan.weak_answer_score = 0.0  # a model whose scores say nothing (random weights): the ranked rounds only
    assert plan.should_stop_after(1, 1e-12) and not plan.is_weak(0.0)


@pytest.mark.parametrize("question, documents, why", [
    ("What is the of the?", None, "no content word"),
    ("What is the zeugma of Blivvet?", None, "none of the question's content words"),
    ("什么是预算？", None, "script written without spaces"),
    ("What is the budget?", ["预算是十二元。" * 20_000], "script written without spaces"),
])
def test_where_ranking_cannot_serve_guided_reads_everything_and_says_why(question, documents, why):
    texts = documents or [long_text("The budget of Quarrowby is 12 crowns.", 0.5)]
    index, cuts = index_of(texts)
    plan = reading.plan_reading("guided", index, reading.rank(index, question, cuts), question, len(cuts))
    assert plan.mode == "full" and why in plan.reason


def test_scores_too_flat_fall_back_to_the_full_read():
    text = ("The budget was discussed again. " + FILLER) * 3_000  # the question's word in every window
    index, cuts = index_of([text])
    plan = reading.plan_reading("auto", index, reading.rank(index, "What was the budget?", cuts), "q", len(cuts))
    assert plan.mode == "full" and "too flat" in plan.reason


def test_auto_reads_short_documents_whole_and_full_is_full():
    assert reading.plan_reading("auto", None, None, "q", reading.AUTO_MIN_WINDOWS).mode == "full"
    assert "fit in 2 windows" in reading.plan_reading("auto", None, None, "q", 2).reason
    assert "fit in about 2 windows" in reading.plan_reading("auto", None, None, "q", 2, estimated=True).reason
    assert "fit in about 1 window:" in reading.plan_reading("auto", None, None, "q", 1, estimated=True).reason
    assert "fit in 1 window:" in reading.plan_reading("guided", None, None, "q", 1).reason
    assert reading.plan_reading("full", None, None, "q", 500).reason == "the full read was asked for"
    with pytest.raises(ValueError, match="reading mode"):  # checked once, where the request is planned
        plan_request(None, [Document("a", "text")], "q", limits.EngineSettings(), "skim")


def test_a_guided_request_on_a_one_window_document_reads_it_whole():
    index, cuts = index_of(["The budget of Quarrowby is 12 crowns."])
    plan = reading.plan_reading("guided", index, reading.rank(index, "What is the budget of Quarrowby?", cuts), "q",
                                len(cuts))
    assert plan.mode == "full" and "read whole" in plan.reason


# --- the engine's guided read, with the demo model --------------------------------------------------------------

@pytest.fixture(scope="module")
def demo():
    from transformers import AutoTokenizer, LongformerForQuestionAnswering

    tokenizer = AutoTokenizer.from_pretrained(DEMO_MODEL_DIR)
    model = LongformerForQuestionAnswering.from_pretrained(DEMO_MODEL_DIR).eval()
    return batching.ModelRunner(model), tokenizer


SMALL_WINDOWS = limits.EngineSettings(max_seq_len=2048)  # many cheap windows: the reading logic, not the model, is tested


@pytest.mark.slow
def test_guided_reads_few_windows_and_answers_as_the_full_read(demo):
    runner, tokenizer = demo
    # About 40 windows of 2,048 tokens, whose answer the demo model finds with confidence (seed 3's it does not:
    # there guided reading rightly reads everything, tested below).
    item = eval_task.make_document(4, 30_000)
    documents = [Document("report.txt", item.text)]
    full = answering.answer(runner, tokenizer, documents, item.question, SMALL_WINDOWS, reading_mode="full")
    cache = IndexCache()
    guided = answering.answer(runner, tokenizer, documents, item.question, SMALL_WINDOWS, reading_mode="guided",
                              index_cache=cache)
    assert full.reading.mode == "full" and full.reading.windows_read == full.windows == \
        full.reading.windows_total
    assert guided.reading.mode == "guided" and guided.to_json()["reading"]["windows_total_estimated"] is False
    assert guided.reading.windows_read == guided.windows <= full.windows / 4
    assert [(a.text, a.start_char) for a in guided.answers[:1]] == [(a.text, a.start_char) for a in full.answers[:1]]
    assert any(r.start_char <= item.answer_start and item.answer_end <= r.end_char
               for r in guided.reading.read)
    assert "rank" in guided.latency_s and "rank" not in full.latency_s
    assert guided.reading.windows_total == full.windows  # counted: the full read's windows
    assert {(r.start_char, r.end_char) for r in guided.reading.read} <= \
        {(r.start_char, r.end_char) for r in full.reading.read}  # some of the full read's windows, none other


@pytest.mark.slow
def test_a_weak_answer_after_the_ranked_windows_reads_the_whole_document(demo):
    runner, tokenizer = demo
    item = eval_task.make_document(3, 30_000)
    documents = [Document("report.txt", item.text)]
    guided = answering.answer(runner, tokenizer, documents, item.question, SMALL_WINDOWS, reading_mode="guided")
    full = answering.answer(runner, tokenizer, documents, item.question, SMALL_WINDOWS, reading_mode="full")
    assert guided.reading.mode == "full" and "no strong answer" in guided.reading.reason
    assert guided.windows == full.windows == guided.forward.windows  # each window once
    assert guided.reading.read == full.reading.read
    assert [(a.text, a.score, a.start_char) for a in guided.answers] == \
        [(a.text, a.score, a.start_char) for a in full.answers]


@pytest.mark.slow
def test_a_second_question_on_the_same_documents_pays_only_the_query(demo, monkeypatch):
    runner, tokenizer = demo
    item = eval_task.make_document(5, 9_000)
    documents = [Document("report.txt", item.text)]
    cache = IndexCache()
    built = []
    real_build = reading.build_index
    monkeypatch.setattr(reading, "build_index", lambda *a, **k: built.append(1) or real_build(*a, **k))
    answering.answer(runner, tokenizer, documents, item.question, SMALL_WINDOWS, reading_mode="guided",
                     index_cache=cache)
    answering.answer(runner, tokenizer, documents, "What is the colour of nothing?", SMALL_WINDOWS,
                     reading_mode="guided", index_cache=cache)
    assert built == [1]
    other = [Document("other.txt", item.text + " More.")]
    answering.answer(runner, tokenizer, other, item.question, SMALL_WINDOWS, reading_mode="guided",
                     index_cache=cache)
    answering.answer(runner, tokenizer, documents, item.question, SMALL_WINDOWS, reading_mode="guided",
                     index_cache=cache)
    assert built == [1, 1] and len(cache) == 2  # another upload: a new index beside the first, still cached


@pytest.mark.slow
def test_full_reading_is_the_unguided_engine(demo):
    runner, tokenizer = demo
    item = eval_task.make_document(4, 3_000)
    documents = [Document("report.txt", item.text)]
    plain = answering.answer(runner, tokenizer, documents, item.question, SMALL_WINDOWS)
    full = answering.answer(runner, tokenizer, documents, item.question, SMALL_WINDOWS, reading_mode="full")
    assert [(a.text, a.score, a.start_char) for a in plain.answers] == \
        [(a.text, a.score, a.start_char) for a in full.answers]
    assert plain.windows == full.windows and plain.tokens == full.tokens
    with pytest.raises(InputError, match="reading mode"):
        answering.answer(runner, tokenizer, documents, item.question, SMALL_WINDOWS, reading_mode="skim")


@pytest.mark.slow
@pytest.mark.parametrize("question, text, code", [
    ("What is the of the?", None, "no_content_words"),
    ("What is the zeugma of Blivvet?", None, "no_match"),
    ("它的预算是多少？", None, "unsplit_script"),
    ("What is the budget?", "预算" * 4_000, "unsplit_script"),  # 24,000 tokens: a dozen windows, none rankable
    ("What is the budget?", "budget", "few_windows"),
])
def test_bad_input_gives_a_reason_and_an_answer_never_a_crash(demo, question, text, code):
    runner, tokenizer = demo
    text = text or eval_task.make_document(6, 6_000).text
    result = answering.answer(runner, tokenizer, [Document("d.txt", text)], question, SMALL_WINDOWS,
                              reading_mode="guided")
    assert result.reading.mode == "full" and result.reading.reason and result.reading.code == code
    assert result.answers and result.answers[0].text.strip()
    assert result.reading.windows_read == result.windows


@pytest.mark.slow
def test_many_documents_are_ranked_together_and_answers_point_into_the_right_one(demo):
    runner, tokenizer = demo
    items = [eval_task.make_document(seed, 8_000) for seed in (11, 12, 13)]
    documents = [Document(f"d{i}.txt", it.text) for i, it in enumerate(items)]
    result = answering.answer(runner, tokenizer, documents, items[1].question, SMALL_WINDOWS, reading_mode="guided")
    assert result.reading.mode == "guided"
    assert {r.document_index for r in result.reading.read} >= {1}
    best = result.answers[0]
    assert best.document_index == 1 and documents[1].text[best.start_char:best.end_char] == best.text


def test_the_character_cap_is_one_budget_for_the_whole_request(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("word " * 1_000)  # 5,000 characters
    b.write_text("more " * 1_000)
    documents, _ = read_documents([str(a)], max_chars=6_000)
    assert documents[0].n_chars == 5_000
    with pytest.raises(DocumentError, match="The 2 documents have 10,000 characters together, over the limit of 6,000"):
        read_documents([str(a), str(b)], max_chars=6_000)
    with pytest.raises(DocumentError, match="already have"):
        read_documents([str(a), str(a), str(b)], max_chars=5_000)


# --- the engine's rules, with a model whose answers are always weak (flat logits: fast, no real model) -------

class FlatRunner:
    """Every token equally likely to start and end the answer: every answer is weak."""

    devices = [torch.device("cpu")]

    def __init__(self):
        self.windows = 0

    def __call__(self, batch):
        self.windows += batch["input_ids"].shape[0]
        return torch.zeros(batch["input_ids"].shape), torch.zeros(batch["input_ids"].shape)  # (B, L) each


FLAT_SETTINGS = limits.EngineSettings(max_seq_len=512)


def weak_request(tiny_tokenizer, question="What is the budget of Quarrowby?", **settings):
    text = long_text("The budget of Quarrowby is 12 crowns.", 0.6, n_chars=60_000)
    runner = FlatRunner()
    result = answering.answer(runner, tiny_tokenizer, [Document("d.txt", text)], question,
                              dataclasses.replace(FLAT_SETTINGS, **settings), reading_mode="guided")
    return result, runner


@pytest.fixture
def counted_passes(tiny_model, monkeypatch):
    """The tiny model (random weights: every answer weak) with its forward wrapped: the window passes it ran."""
    passes: list[int] = []
    forward = tiny_model.forward

    def counting_forward(*args, **kwargs):
        passes.append(int(kwargs["input_ids"].shape[0]))
        return forward(*args, **kwargs)
    monkeypatch.setattr(tiny_model, "forward", counting_forward)
    return batching.ModelRunner(tiny_model), passes


def answers_of(result) -> list[tuple]:
    return [(a.text, a.score, a.document_index, a.start_char, a.end_char) for a in result.answers]


def weak_answer_and_its_full_read(runner, tokenizer):
    """Two documents whose fact the random-weight model answers weakly, the question, and their full read."""
    documents = [Document("d.txt", long_text("The budget of Quarrowby is 12 crowns.", 0.6, n_chars=5_000)),
                 Document("e.txt", long_text("Quarrowby has a budget.", 0.3, n_chars=2_500))]
    question = "What is the budget of Quarrowby?"
    full = answering.answer(runner, tokenizer, documents, question, FLAT_SETTINGS, reading_mode="full")
    return documents, question, full


@pytest.mark.parametrize("mode", ["guided", "auto"])
@pytest.mark.slow
def test_a_weak_answer_reads_each_window_once_and_gives_the_full_reads_answers(tiny_tokenizer, counted_passes,
                                                                                mode):
    runner, passes = counted_passes
    documents, question, full = weak_answer_and_its_full_read(runner, tiny_tokenizer)
    assert sum(passes) == full.windows == full.reading.windows_read
    passes.clear()
    result = answering.answer(runner, tiny_tokenizer, documents, question, FLAT_SETTINGS, reading_mode=mode)
    assert result.reading.mode == "full" and "no strong answer" in result.reading.reason
    assert result.reading.code == "weak_after_guided"
    assert sum(passes) == result.reading.windows_read == result.reading.windows_total == full.windows  # each once
    assert result.forward.windows == full.windows
    assert answers_of(result) == answers_of(full)  # the same windows, the same logits: the same answers and scores
    assert result.tokens == full.tokens and result.documents == full.documents
    assert result.reading.read == full.reading.read
    assert result.found == full.found and result.verdict.read_whole


@pytest.mark.slow
def test_a_strong_answer_stops_after_the_ranked_windows_and_says_how_many_ran(tiny_tokenizer, counted_passes):
    runner, passes = counted_passes
    documents = [Document("d.txt", long_text("The budget of Quarrowby is 12 crowns.", 0.6, n_chars=60_000))]
    plan = plan_request(tiny_tokenizer, documents, "What is the budget of Quarrowby?", FLAT_SETTINGS, "guided")
    plan.reading.weak_answer_score = 0.0  # every answer strong enough: the ranked rounds only
    result = answering.answer_plan(runner, tiny_tokenizer, plan)
    assert result.reading.mode == "guided" and result.reading.to_json()["windows_total_estimated"] is False
    assert sum(passes) == result.reading.windows_read == len(plan.reading.rounds[0]) < result.reading.windows_total
    assert result.reading.windows_total == len(plan.cuts) == plan.windows
    read = {(r.start_char, r.end_char) for r in result.reading.read}
    assert read == {(plan.cuts[i].start_char, plan.cuts[i].end_char) for i in plan.reading.rounds[0]}


def test_a_guided_plan_knows_the_full_reads_windows_and_its_order(tiny_tokenizer):
    documents = [Document("d.txt", long_text("The budget of Quarrowby is 12 crowns.", 0.6, n_chars=60_000))]
    question = "What is the budget of Quarrowby?"
    full = plan_request(tiny_tokenizer, documents, question, FLAT_SETTINGS, "full")
    guided = plan_request(tiny_tokenizer, documents, question, FLAT_SETTINGS, "guided")
    assert guided.mode == "guided" and guided.stats == full.stats and guided.windows == full.windows
    assert guided.window_tokens == full.window_tokens and guided.tokens == full.tokens
    assert len(guided.cuts) == full.windows
    expected = reading.expected_windows(guided.reading)
    assert guided.expected_windows == len(expected) < guided.windows
    assert guided.expected_window_tokens == guided.cut_tokens(expected) < guided.window_tokens
    fact = documents[0].text.index("The budget of Quarrowby")
    assert any(guided.cuts[i].start_char <= fact < guided.cuts[i].end_char for i in guided.reading.rounds[0])


@pytest.mark.slow
def test_a_question_that_was_cut_still_reads_on_when_the_answer_is_weak(tiny_tokenizer):
    long_question = "What is the budget of Quarrowby? " + "please " * 200
    result, runner = weak_request(tiny_tokenizer, question=long_question)
    assert any("was cut" in notice for notice in result.notices)
    assert result.reading.mode == "full" and "no strong answer" in result.reading.reason
    assert runner.windows == result.reading.windows_read == result.windows


@pytest.mark.slow
def test_a_weak_answer_keeps_the_guided_read_when_reading_everything_would_pass_the_time_limit(tiny_tokenizer):
    class SlowFlatRunner(FlatRunner):
        def __call__(self, batch):
            time.sleep(0.05)  # the measured rate then predicts the whole document past the limit
            return super().__call__(batch)

    text = long_text("The budget of Quarrowby is 12 crowns.", 0.6, n_chars=60_000)
    result = answering.answer(SlowFlatRunner(), tiny_tokenizer, [Document("d.txt", text)],
                              "What is the budget of Quarrowby?", dataclasses.replace(FLAT_SETTINGS, max_request_s=1.0),
                              reading_mode="guided")
    assert result.reading.windows_total * 0.05 > 1.0
    assert result.reading.mode == "guided" and result.windows < result.reading.windows_total
    assert any("over the limit of 1 s" in notice for notice in result.notices)
    assert result.answers


def test_the_largest_overlap_the_settings_allow_is_refused_like_the_full_read_not_a_crash(tiny_tokenizer):
    text = long_text("The budget of Quarrowby is 12 crowns.", 0.6, n_chars=60_000)
    settings = limits.EngineSettings(max_seq_len=128, max_question_len=8, doc_stride=116).resolved(tiny_tokenizer)
    for mode in ("full", "auto"):
        with pytest.raises(InputError, match="not more than the overlap"):
            answering.answer(FlatRunner(), tiny_tokenizer, [Document("d.txt", text)], "What is the budget of it?",
                             settings, reading_mode=mode)


def test_the_first_round_never_reads_a_stretch_without_the_questions_words():
    text = long_text("Quarrowby set aside 12 crowns.", 0.5)
    index, cuts = index_of([text])
    ranking = reading.rank(index, "Quarrowby?", cuts)
    plan = reading.plan_reading("guided", index, ranking, "q", len(cuts))
    assert all(ranking.scores[r] > 0 for r in plan.rounds[0])


@pytest.mark.slow
def test_one_cjk_file_among_english_ones_does_not_stop_the_ranking():
    english = [long_text("The budget of Quarrowby is 12 crowns.", 0.5) for _ in range(3)]
    index, cuts = index_of(english + ["预算是十二元。" * 500])
    plan = reading.plan_reading("guided", index, reading.rank(index, "What is the budget of Quarrowby?", cuts), "q",
                                len(cuts))
    assert index.unsplit_share < reading.UNSPLIT_SHARE and plan.mode == "guided"


# --- "not found" (issue 38): a question the documents do not answer is read whole before it is said not found ---

class PeakRunner(FlatRunner):
    """A middling answer at the same place of every window: not weak for guided reading (its score passes
    WEAK_ANSWER_SCORE), but under a strict threshold."""

    def __call__(self, batch):
        start, end = super().__call__(batch)
        start[:, 40] = end[:, 40] = 4.0
        return start, end


@pytest.mark.slow
def test_an_answer_the_rule_calls_not_found_is_read_whole_first_and_then_said_not_found(tiny_tokenizer):
    text = long_text("The budget of Quarrowby is 12 crowns.", 0.6, n_chars=60_000)
    question = "What is the budget of Quarrowby?"
    relaxed = answering.answer(PeakRunner(), tiny_tokenizer, [Document("d.txt", text)], question, FLAT_SETTINGS,
                               reading_mode="guided")
    assert relaxed.reading.mode == "guided" and relaxed.found is None  # strong enough to stop; no rule
    strict = dataclasses.replace(FLAT_SETTINGS, no_answer_below=0.5)
    result = answering.answer(PeakRunner(), tiny_tokenizer, [Document("d.txt", text)], question, strict,
                              reading_mode="guided")
    assert result.answers[0].score < 0.5
    assert result.reading.mode == "full" and result.windows > relaxed.windows  # read whole before saying so
    assert result.found is False and result.verdict.read_whole
    assert result.verdict.message == no_answer.NOT_FOUND
    assert all(a.confidence == "low" for a in result.answers)


@pytest.mark.slow
def test_when_the_time_budget_ends_first_it_says_not_found_in_the_part_read(tiny_tokenizer):
    class SlowFlatRunner(FlatRunner):
        def __call__(self, batch):
            time.sleep(0.05)
            return super().__call__(batch)

    text = long_text("The budget of Quarrowby is 12 crowns.", 0.6, n_chars=60_000)
    settings = dataclasses.replace(FLAT_SETTINGS, max_request_s=1.0,
                                   no_answer=no_answer.NoAnswerRule(no_answer.THRESHOLD, 1e-3, "test"))
    result = answering.answer(SlowFlatRunner(), tiny_tokenizer, [Document("d.txt", text)],
                              "What is the budget of Quarrowby?", settings, reading_mode="guided")
    assert result.reading.mode == "guided" and result.windows < result.reading.windows_total
    assert result.found is False and not result.verdict.read_whole
    assert result.verdict.message == no_answer.NOT_FOUND_IN_PART
    assert result.to_json()["no_answer"]["read_whole"] is False


# Windows sized to the ranked passage (`passage_window_tokens`) ---------------------------------------------------
SIZED = 384  # tokens: a 1,200-character passage of the filler fits whole
SIZED_SETTINGS = dataclasses.replace(FLAT_SETTINGS, passage_window_tokens=SIZED)


def test_a_window_sized_to_its_passage_is_centred_on_it_inside_the_full_window(tiny_tokenizer):
    text = long_text("The budget of Quarrowby is 12 crowns.", 0.6, n_chars=60_000)
    plan = plan_request(tiny_tokenizer, [Document("d.txt", text)], "What is the budget of Quarrowby?",
                        SIZED_SETTINGS, "guided")
    first = plan.reading.rounds[0][0]
    cut, centre = plan.cuts[first], plan.reading.centres[first]
    sized = plan.narrowed_cuts([first])[0]
    assert cut.first_token <= sized.first_token < sized.end_token <= cut.end_token
    assert sized.end_token - sized.first_token == plan.room - (512 - SIZED)
    assert sized.start_char <= centre < sized.end_char
    at_edge = sized.first_token == cut.first_token or sized.end_token == cut.end_token  # kept inside the window
    assert at_edge or abs((sized.start_char + sized.end_char) // 2 - centre) < 20  # else centred on it
    assert plan.read_tokens([first]) == SIZED < plan.cut_tokens([first]) == 512
    assert dataclasses.replace(plan, settings=FLAT_SETTINGS).narrowed_cuts([first]) is None  # not asked for


@pytest.mark.parametrize("asked, resolved", [(SIZED, SIZED), (0, None), (None, None), (512, None), (5000, None),
                                             (3.0 * 128, 384)])
def test_sized_windows_resolve_to_a_size_or_whole_windows(tiny_tokenizer, asked, resolved):
    """0 turns sizing off (issue 60: on by default for loaded models); a size of the window or more is the whole
    window, so a default larger than a small model's window reads it whole rather than failing."""
    settings = dataclasses.replace(FLAT_SETTINGS, passage_window_tokens=asked).resolved(tiny_tokenizer)
    assert settings.max_seq_len == 512 and settings.passage_window_tokens == resolved


@pytest.mark.parametrize("asked", [-1, 20, 2.5])
def test_a_sized_window_too_small_for_the_question_or_not_a_count_is_refused(tiny_tokenizer, asked):
    with pytest.raises(InputError, match="passage_window_tokens"):
        dataclasses.replace(FLAT_SETTINGS, passage_window_tokens=asked).resolved(tiny_tokenizer)


def test_a_question_outside_the_model_s_form_is_read_in_whole_windows(tiny_tokenizer):
    """Issue 60: its answer is a guess, which a window sized to the passage makes look surer (fewer places compete)
    and so could end the read on another guess than whole windows give. A question of the form keeps its sizing;
    a request judged by the null score reads whole windows."""
    form = no_answer.QuestionForm("What is the <attribute> of <name>?", "One form only.")
    rule = no_answer.NoAnswerRule(no_answer.THRESHOLD, 1e-5, "test", needs_evidence=True, question_form=form)
    settings = dataclasses.replace(SIZED_SETTINGS, no_answer=rule)
    documents = [Document("d.txt", long_text("The budget of Quarrowby is 12 crowns.", 0.6, n_chars=60_000))]
    guess = plan_request(tiny_tokenizer, documents, "How much money does Quarrowby have?", settings, "guided")
    asked = plan_request(tiny_tokenizer, documents, "What is the budget of Quarrowby?", settings, "guided")
    assert guess.mode == asked.mode == "guided"
    assert guess.settings.passage_window_tokens is None and guess.narrowed_cuts(guess.reading.rounds[0]) is None
    assert asked.settings.passage_window_tokens == SIZED and asked.narrowed_cuts(asked.reading.rounds[0])
    # a model with no form (or no rule) sizes every question's windows
    other = plan_request(tiny_tokenizer, documents, "How much money does Quarrowby have?", SIZED_SETTINGS, "guided")
    assert other.settings.passage_window_tokens == SIZED
    # a SQuAD 2.0 model's null-score rule was never measured in sized windows: whole, unless a threshold replaces it
    squad2 = dataclasses.replace(SIZED_SETTINGS, no_answer=no_answer.NoAnswerRule(no_answer.NULL_SCORE, source="t"))
    asked = plan_request(tiny_tokenizer, documents, "What is the budget of Quarrowby?", squad2, "guided")
    assert asked.settings.passage_window_tokens is None
    own = dataclasses.replace(squad2, no_answer_below=0.01)
    assert plan_request(tiny_tokenizer, documents, "What is the budget of Quarrowby?", own,
                        "guided").settings.passage_window_tokens == SIZED


def test_a_strong_answer_in_windows_sized_to_the_passage_reads_no_more(tiny_tokenizer, counted_passes):
    runner, passes = counted_passes
    lengths = []
    forward = runner.model.forward
    runner.model.forward = lambda *a, **k: (lengths.append(int(k["input_ids"].shape[1])), forward(*a, **k))[1]
    text = long_text("The budget of Quarrowby is 12 crowns.", 0.6, n_chars=60_000)
    plan = plan_request(tiny_tokenizer, [Document("d.txt", text)], "What is the budget of Quarrowby?",
                        SIZED_SETTINGS, "guided")
    plan.reading.weak_answer_score = 0.0  # every answer strong enough: no widening
    result = answering.answer_plan(runner, tiny_tokenizer, plan)
    first = plan.reading.rounds[0]
    assert result.reading.mode == "guided" and result.reading.narrowed == len(first) and result.reading.widened == 0
    assert sum(passes) == len(first) and max(lengths) <= SIZED
    fact = text.index("The budget of Quarrowby")
    assert any(r.start_char <= fact < r.end_char for r in result.reading.read)
    assert all(r.end_char - r.start_char < 0.8 * (c.end_char - c.start_char) for r, c in
               zip(result.reading.read, [plan.cuts[i] for i in sorted(first)]))  # sized, not whole


def test_a_whole_window_s_seconds_come_from_its_tokens_so_sized_reads_do_not_make_it_look_cheaper():
    state = batching.BatchState(1, window_tokens=4096)
    state.record_forward(tokens=4 * 1024, seconds=2.0, windows=4)  # four windows sized to 1,024 tokens
    assert state.window_s == pytest.approx(2.0)  # a whole window: 4,096 tokens at 2,048 tokens a second
    plain = batching.BatchState(1)
    plain.record_forward(tokens=4 * 1024, seconds=2.0, windows=4)
    assert plain.window_s == pytest.approx(0.5) and batching.BatchState(1).window_s is None  # windows on average


def test_a_budget_sized_for_sized_windows_reads_them_and_stops_before_widening_past_it(tiny_tokenizer,
                                                                                        counted_passes):
    """ZeroGPU grants a guided read the seconds its plan expects, sized windows counted as such (issue 60's default):
    the first round is checked against its sized tokens, not refused for whole windows' cost, and a weak answer that
    would widen past the budget ends the read with a notice rather than overrun it."""
    runner, passes = counted_passes
    documents = [Document("d.txt", long_text("The budget of Quarrowby is 12 crowns.", 0.6, n_chars=60_000))]
    state = batching.BatchState(1)
    state.record_forward(tokens=10_000, seconds=10.0, windows=20)  # 1,000 tokens a second, measured
    plan = plan_request(tiny_tokenizer, documents, "What is the budget of Quarrowby?", SIZED_SETTINGS, "guided",
                        batch_state=state)
    first = plan.reading.rounds[0]
    sized_s, whole_s = plan.read_tokens(first) / 1000, plan.cut_tokens(first) / 1000
    assert sized_s < whole_s
    budget = plan.with_budget(sized_s * 1.1)  # room for the sized round, not for reading it whole
    result = answering.answer_plan(runner, tiny_tokenizer, budget, batch_state=state)
    assert result.reading.narrowed == len(first) and result.reading.widened == 0  # weak, yet not widened
    assert any("sized to their passage" in notice and "limit" in notice for notice in result.notices)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["guided", "auto"])
def test_a_weak_answer_widens_the_sized_windows_and_gives_the_full_reads_answers(tiny_tokenizer, counted_passes,
                                                                                 mode):
    runner, passes = counted_passes
    documents, question, full = weak_answer_and_its_full_read(runner, tiny_tokenizer)
    passes.clear()
    result = answering.answer(runner, tiny_tokenizer, documents, question, SIZED_SETTINGS, reading_mode=mode)
    assert result.reading.code == "weak_after_guided" and result.reading.narrowed == 0
    assert result.reading.widened > 0
    assert sum(passes) == full.windows + result.reading.widened  # each sized window once, each whole one once
    assert answers_of(result) == answers_of(full) and result.reading.read == full.reading.read


@pytest.mark.slow
def test_the_plan_says_how_long_each_read_should_take_and_the_readout_what_it_took(tiny_tokenizer):
    text = long_text("The budget of Quarrowby is 12 crowns.", 0.6, n_chars=60_000)
    question = "What is the budget of Quarrowby?"
    state = batching.BatchState(1)
    unmeasured = plan_request(tiny_tokenizer, [Document("d.txt", text)], question, SIZED_SETTINGS, "guided",
                              batch_state=state)
    assert unmeasured.full_read_s is None and unmeasured.guided_read_s is None
    state.record_forward(tokens=10_000, seconds=2.0)  # 5,000 tokens/s
    plan = plan_request(tiny_tokenizer, [Document("d.txt", text)], question, SIZED_SETTINGS, "guided",
                        batch_state=state)
    assert plan.full_read_s == pytest.approx(plan.window_tokens / 5_000)
    expected = reading.expected_windows(plan.reading)
    assert plan.guided_read_s == pytest.approx(len(expected) * SIZED / 5_000) and plan.guided_read_s < plan.full_read_s
    full = plan_request(tiny_tokenizer, [Document("d.txt", text)], question, SIZED_SETTINGS, "full",
                        batch_state=state)
    assert full.full_read_s == pytest.approx(plan.full_read_s) and full.guided_read_s is None
    plan.reading.weak_answer_score = 0.0
    result = answering.answer_plan(FlatRunner(), tiny_tokenizer, plan, batch_state=state)
    assert result.reading.expected_s == plan.guided_read_s
    assert result.reading.forward_s == result.latency_s["forward"] > 0
    assert result.reading.to_json()["expected_s"] == plan.guided_read_s


@pytest.mark.slow
def test_a_sized_read_tells_the_best_so_far_from_its_first_sized_window(tiny_tokenizer):
    heard = []
    text = long_text("The budget of Quarrowby is 12 crowns.", 0.6, n_chars=60_000)
    plan = plan_request(tiny_tokenizer, [Document("d.txt", text)], "What is the budget of Quarrowby?",
                        SIZED_SETTINGS, "guided")
    result = answering.answer_plan(FlatRunner(), tiny_tokenizer, plan, on_candidate=heard.append)
    assert heard and heard[0].windows_read == 1  # a candidate after the first (sized) window
    assert result.reading.widened > 0 and result.answers  # flat logits: weak, widened, then read on
