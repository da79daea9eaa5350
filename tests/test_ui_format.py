"""The page's formatting: units, tables, evidence spans, history frames and the GPU gauge, from typed readouts."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from page import format as ui_format
from longqa.readout import LoadReadout
from longqa.readout import MemoryPrediction, QueueReadout, Readout, predict_full_read_s
from longqa_core import no_answer
from longqa_core.answering import QAResult, ReadingReadout
from longqa_core.batching import BatchState
from longqa_core.documents import Location
from longqa_core.spans import Answer
from longqa_core.telemetry import DeviceMemory, MemoryReadout
from longqa_core.windows import DocumentStats


def readout_of(latency_s=None, reading=None, prediction=None, **fields) -> Readout:
    """A readout as the session builds it, with only what a test sets."""
    result = QAResult("q?", [], [], fields.pop("windows", 2), fields.pop("tokens", 5000), 2, 0, latency_s or {},
                      MemoryReadout(), reading=reading)
    return Readout(result, "demo", "cpu", prediction, **fields)


@pytest.mark.parametrize("n_bytes, text", [(None, "—"), (0, "0 B"), (999, "999 B"), (4_100, "4.1 kB"),
                                           (812_300_000, "812.3 MB"), (15_600_000_000, "15.6 GB")])
def test_format_bytes_uses_decimal_units(n_bytes, text):
    assert ui_format.format_bytes(n_bytes) == text


@pytest.mark.parametrize("seconds, text", [(None, "—"), (0.0004, "0 ms"), (0.1234, "123 ms"), (1.0, "1.00 s"),
                                           (61.234, "61.23 s")])
def test_format_seconds(seconds, text):
    assert ui_format.format_seconds(seconds) == text


def test_escape_markdown_keeps_html_and_markdown_literal():
    text = ui_format.escape_markdown("<script>alert(1)</script> *bold* [link](x)")
    assert "<script>" not in text and "&lt;script&gt;" in text
    assert r"\*bold\*" in text and r"\[link\]\(x\)" in text


def test_a_readout_table_labels_each_cell_with_its_header_and_shows_text_as_text():
    table = ui_format.table_html("Top answers", ["rank", "answer <b>"], [[1, "<img src=x onerror=alert(1)>"],
                                                                          [2, None]])
    assert '<table aria-labelledby="readout-top-answers">' in table and 'id="readout-top-answers">Top answers<' in table
    assert 'class="readout-table pairs"' in table  # two columns: a key and its value per row, no cards
    assert '<th scope="col">answer &lt;b&gt;</th>' in table
    assert '<td data-label="answer &lt;b&gt;">&lt;img src=x onerror=alert(1)&gt;</td>' in table
    assert '<td data-label="answer &lt;b&gt;">—</td>' in table and "<img" not in table
    assert ui_format.cell_html("supports_gradient_checkpointing") == "supports_<wbr>gradient_<wbr>checkpointing"
    wide = ui_format.table_html("Memory", ui_format.MEMORY_HEADERS, [])
    assert 'class="readout-table cards"' in wide and "<tbody></tbody>" in wide


def test_evidence_highlights_exactly_the_answer_and_cuts_at_spaces():
    text = ("word " * 200) + "The colour of Zorbin is teal. " + ("more " * 200)
    start = text.index("teal")
    spans = ui_format.evidence(text, start, start + 4, context_chars=50)
    labels = [label for _, label in spans]
    assert labels.count("answer") == 1 and set(labels) == {None, "answer"}
    answer_at = labels.index("answer")
    assert spans[answer_at][0] == "teal"
    before = "".join(span for span, _ in spans[:answer_at])
    after = "".join(span for span, _ in spans[answer_at + 1:])
    assert before.startswith("…") and after.endswith("…")
    assert before[1:] == text[start - len(before) + 1: start]  # an exact slice, starting at a word
    assert before[1] != " " and text[start - len(before)] == " "
    assert len(before) <= 51 and len(after) <= 51
    assert all(span.strip() and " " not in span.strip() for span, _ in spans)  # one word per span


def test_evidence_at_document_edges_has_no_ellipsis():
    spans = ui_format.evidence("teal is it", 0, 4)
    assert spans == [("teal", "answer"), (" is ", None), ("it", None)]


def test_answer_rows_and_best_answer():
    answers = [Answer("teal", 0.91234, "a.txt", 0, 1200, 1204, "high"), Answer("", 0.05, None, -1, 0, 0)]
    rows = ui_format.answer_rows(answers)
    assert rows[0] == [1, "teal", "0.9123", "high", "a.txt", "1,200–1,204"]
    assert rows[1][4] == "(no answer)" and rows[1][5] == "—"
    found = no_answer.judge(no_answer.NoAnswerRule(no_answer.THRESHOLD, 1e-5, "measured"), 0.91234, 0.01, True)
    assert ui_format.best_answer(SimpleNamespace(answers=answers, verdict=found)) == "teal"
    assert ui_format.best_answer(SimpleNamespace(answers=answers[1:], verdict=found)).startswith("(no answer")


def test_a_located_answer_names_its_page_and_section_in_the_table_and_over_the_answer():
    location = Location("report.pdf", 31_990, 31_995, page=37, heading="3.2 Results")
    answers = [Answer("teal", 0.91234, "report.pdf", 0, 31_990, 31_995, "high", location)]
    assert ui_format.answer_rows(answers)[0][4:] == ["report.pdf, page 37, § 3.2 Results", "31,990–31,995"]
    found = no_answer.judge(no_answer.NoAnswerRule(no_answer.THRESHOLD, 1e-5, "measured"), 0.91234, 0.01, True)
    status = ui_format.answer_status(SimpleNamespace(answers=answers, verdict=found))
    assert "In report\\.pdf, page 37, § 3\\.2 Results, characters 31,990–31,995" in status  # escaped Markdown


def test_a_question_the_documents_do_not_answer_shows_not_found_and_the_best_span_as_low_confidence():
    answers = [Answer("teal", 3e-11, "a.txt", 0, 1200, 1204, "low")]
    rule = no_answer.NoAnswerRule(no_answer.THRESHOLD, 1e-5, "measured")
    result = SimpleNamespace(answers=answers, verdict=no_answer.judge(rule, 3e-11, 0.99, True))
    assert ui_format.best_answer(result) == ""  # no span in large type, and the verdict said once, over it
    status = ui_format.answer_status(result, ran=ui_format.ran_on("demo", "cpu"))
    assert status.splitlines()[:2] == ["### Not found in the documents (high confidence)",
                                       "No passage answers the question clearly enough. Ran on demo with profile cpu."]
    assert status.count("Not found") == 1 and status.count("<details") == 1
    assert ui_format.answer_rows(answers)[0][3] == "low"
    assert ui_format.verdict_text(result) == f"{no_answer.NOT_FOUND} (high confidence): no passage answers the " \
                                             "question clearly enough."  # the rule's numbers stay in "details"
    part = SimpleNamespace(answers=answers, verdict=no_answer.judge(rule, 3e-11, 0.99, False))
    assert ui_format.answer_status(part).startswith(f"### {no_answer.NOT_FOUND_IN_PART}")
    free = no_answer.NoAnswerRule(no_answer.UNCALIBRATED)
    loose = SimpleNamespace(answers=answers, verdict=no_answer.judge(free, 3e-11, 0.99, True))
    assert ui_format.best_answer(loose) == "teal" and no_answer.NOT_CALIBRATED in ui_format.verdict_text(loose)


def test_latency_and_memory_rows_cover_every_stage_and_device():
    latency = {"total": 2.5, "extract": 0.01, "tokenize": 0.02, "forward": 2.4, "decode": 0.07}
    rows = ui_format.latency_rows(latency, 4096.0)
    assert [r[0] for r in rows] == ["extract", "tokenize", "rank", "forward", "decode", "mark", "total", "throughput"]
    assert rows[3][1] == "2.40 s" and rows[-1][1] == "4,096 tokens/s"
    assert rows[2][1] == ui_format.MISSING  # no ranking in a full read
    memory = MemoryReadout(host_rss_bytes=2e9, host_peak_rss_bytes=3e9,
                           devices=[DeviceMemory(0, "T4", 1e9, 2e9, 3e9, 16e9)])
    rows = ui_format.memory_rows(memory)
    assert rows[0] == ["cuda:0 T4", "1.0 GB", "—", "2.0 GB", "3.0 GB", "16.0 GB"]  # no baseline: no own peak
    assert rows[1][:4] == ["host", "3.0 GB", "—", "2.0 GB"]
    memory = MemoryReadout(host_rss_bytes=2e9, host_peak_rss_bytes=3e9, host_baseline_rss_bytes=1.8e9,
                           devices=[DeviceMemory(0, "T4", 1e9, 2e9, 3e9, 16e9, 4e8)])
    rows = ui_format.memory_rows(memory)
    assert rows[0][:3] == ["cuda:0 T4", "1.0 GB", "600.0 MB"] and rows[1][:3] == ["host", "3.0 GB", "1.2 GB"]
    assert ui_format.memory_rows(MemoryReadout())[0][1] == "no GPU used"


def test_history_frame_uses_gpu_peak_else_host_peak():
    history = [
        {"run": 1, "profile": "cpu", "model": "demo", "tokens": 10, "windows": 1, "peak_allocated_bytes": None,
         "host_peak_rss_bytes": 500e6, "latency_s": 1.5, "tokens_per_s": 6.7},
        {"run": 2, "profile": "t4-16gb", "model": "demo", "tokens": 10, "windows": 1, "peak_allocated_bytes": 2e9,
         "host_peak_rss_bytes": 900e6, "latency_s": 0.5, "tokens_per_s": 20.0},
    ]
    frame = ui_format.history_frame(history)
    assert list(frame["run"]) == ["01", "02"] and list(frame["profile"]) == ["cpu", "t4-16gb"]
    assert list(frame[ui_format.PLOT_MEMORY]) == [500.0, 2000.0]
    assert list(frame[ui_format.PLOT_LATENCY]) == [1.5, 0.5]
    assert ui_format.history_rows(history)[1][10:13] == ["2.0 GB", "900.0 MB", "500 ms"]
    guided = [{**history[0], "reading": "guided"}]
    assert list(ui_format.history_frame(guided)["reading"]) == ["guided"]
    assert ui_format.history_rows(guided)[0][6] == "guided"
    assert ui_format.history_frame([]).empty
    assert ui_format.plot_limits(frame) == {ui_format.PLOT_MEMORY: [0, 2500.0], ui_format.PLOT_LATENCY: [0, 2.0]}


def test_a_plots_top_is_a_round_number_over_its_tallest_bar():
    for values, top in (([830.0], 1000.0), ([0.4], 0.5), ([100.0, 3.0], 120.0), ([0.28], 0.3), ([5.1], 6.0),
                        ([0.021], 0.025), ([float("nan"), 3.0], 4.0)):
        assert ui_format.plot_top(values) == top
        assert top >= max(v for v in values if v == v) * ui_format.PLOT_HEADROOM  # room over the tallest bar
    assert ui_format.plot_top([]) is None and ui_format.plot_top([0.0]) is None  # the plot's own scale then


def test_gpu_gauge_fractions_and_missing_nvml():
    snapshot = [{"index": 0, "name": "T4", "nvml_used_bytes": 4e9, "nvml_total_bytes": 16e9},
                {"index": 1, "name": "T4", "nvml_used_bytes": None, "nvml_total_bytes": None}]
    assert ui_format.gpu_gauge(snapshot) == {"GPU 0 T4: 4.0 GB / 16.0 GB": 0.25}
    assert ui_format.gpu_gauge([]) == {}


def test_load_rows_summarise_the_device_map():
    readout = LoadReadout(model_ref="demo", profile="consumer-gpu", strategies=["half_precision", "offload"],
                          dtype="float16", load_time_s=3.2, weight_bytes_per_device={"cuda:0": 6e8, "cpu": 2e8},
                          device_map={"a": "cuda:0", "b": "cuda:0", "c": "cpu"}, host_peak_rss_bytes=1.5e9,
                          fallback_reason=None, notes=["band kernel off: no C compiler"])
    rows = dict(ui_format.load_rows(readout))
    assert list(rows) == ui_format.LOAD_HEADERS
    assert rows["notes"] == "band kernel off: no C compiler"
    assert rows["weights per device"] == "cuda:0: 600.0 MB, cpu: 200.0 MB"
    assert rows["device map"] == "cuda:0: 2 module(s), cpu: 1 module(s)"
    assert rows["load time"] == "3.20 s" and rows["fallback"] == "none"


def test_training_summary_states_the_saving_and_that_inference_saves_nothing():
    readout = SimpleNamespace(peak_bytes_without=400e6, peak_bytes_with=100e6, time_s_without=1.0, time_s_with=1.3,
                              saved_bytes=300e6, saved_fraction=0.75, time_ratio=1.3,
                              measured_by="cpu live tensor bytes")
    assert ui_format.training_rows(readout) == [["without checkpointing", "400.0 MB", "1.00 s"],
                                                ["with checkpointing", "100.0 MB", "1.30 s"]]
    text = ui_format.training_summary(readout, 512)
    assert "saves 300.0 MB (75%" in text and "1.30×" in text and "saves nothing at inference" in text


def test_run_rows_show_the_prediction_beside_the_measured_peak():
    readout = readout_of(prediction=MemoryPrediction("cpu", 1.2e9, 1.3e9, -7.7, "peak RSS"),
                         queue=QueueReadout(1.2, 3), replica="ab12cd34:77")
    rows = dict(ui_format.run_rows(readout))
    assert rows["memory: predicted vs measured"] == "predicted 1.2 GB, measured 1.3 GB (-8 %), peak RSS on cpu"
    assert rows["queue"] == "waited 1.20 s, 3 requests ahead when it arrived" and rows["replica"] == "ab12cd34:77"
    assert rows["tokens read"] == "5,000" and rows["why"] == ui_format.MISSING
    readout.memory_prediction = None
    assert dict(ui_format.run_rows(readout))["memory: predicted vs measured"] == ui_format.MISSING


def test_reading_summary_says_what_was_read_and_the_full_reads_prediction():
    readout = readout_of({"extract": 0.5, "tokenize": 0.5, "rank": 0.2, "forward": 12.0, "decode": 0.1, "total": 13.3},
                         ReadingReadout("guided", "auto", 6, 51, "ranked", []), full_read_s=110.0)
    text = ui_format.reading_summary(readout)
    assert text.startswith("read 6 of 51 windows (guided) in 13.30 s")
    assert text.endswith("; a full read would take about 110.00 s")
    full = readout_of({"forward": 3.0, "total": 3.5}, ReadingReadout("full", "full", 4, 4, "asked", []))
    assert "would take" not in ui_format.reading_summary(full)
    assert ui_format.reading_summary(readout_of()) == ui_format.MISSING
    sized = readout_of({"total": 2.0}, ReadingReadout("guided", "auto", 6, 51, "ranked", [], narrowed=4, widened=2))
    assert ui_format.reading_summary(sized).startswith(  # issue 60's default, said where it read
        "read 6 of 51 windows (guided, 4 sized to their passage, 2 read again whole) in 2.00 s")


def test_the_full_read_is_predicted_at_the_models_measured_seconds_a_window():
    guided = readout_of({"extract": 0.5, "tokenize": 0.5, "forward": 12.0, "decode": 0.1, "total": 13.3},
                        ReadingReadout("guided", "auto", 6, 51, "ranked", [])).result
    two_s_a_window = BatchState(1)
    two_s_a_window.record_forward(4096, 2.0, 1)
    assert predict_full_read_s(guided, two_s_a_window) == pytest.approx(0.5 + ((0.5 + 0.1) / 6 + 2.0) * 51)
    assert predict_full_read_s(guided, BatchState(1)) is None  # nothing measured yet
    full = readout_of({"forward": 3.0}, ReadingReadout("full", "full", 4, 4, "asked", [])).result
    assert predict_full_read_s(full, two_s_a_window) is None


def test_document_rows_give_each_documents_counts():
    documents = [DocumentStats("a.txt", 600_000, 190_000, 48)]
    assert ui_format.document_rows(documents) == [["a.txt", 600_000, 190_000, 48]]
    assert ">600,000</td>" in ui_format.table_html("Documents read", ui_format.DOCUMENT_HEADERS,
                                                    ui_format.document_rows(documents))  # shown with separators


def test_the_history_keeps_the_request_the_answer_and_customs_strategies():
    readout = Readout(QAResult("What is the colour of Zorbin?", [Answer("teal", 0.9, "notes.txt", 0, 10, 14)],
                               [DocumentStats("notes.txt", 40, 12, 1)], 1, 12, 1, 0, {"total": 0.5},
                               MemoryReadout(host_peak_rss_bytes=900, host_baseline_rss_bytes=600)),
                      "demo", "custom", strategies=["int8_dynamic", "fast_attention"])
    entry = ui_format.history_entry(readout, 4)
    assert entry["question"] == "What is the colour of Zorbin?" and entry["documents"] == ["notes.txt"]
    assert entry["answer"] == "teal" and entry["strategies"] == ["int8_dynamic", "fast_attention"]
    assert entry["request_peak_bytes"] == 300
    row = dict(zip(ui_format.HISTORY_HEADERS, ui_format.history_rows([entry])[0]))
    assert row["profile"] == "custom (int8_dynamic, fast_attention)" and row["documents"] == "notes.txt"
    assert row["answer"] == "teal" and row["request's own peak"] == "300 B"
    assert ui_format.history_entry(readout, 1, ["a.txt", "b.pdf"])["documents"] == ["a.txt", "b.pdf"]
    plain = Readout(readout.result, "demo", "cpu", strategies=["half_precision"])
    assert ui_format.history_entry(plain, 1)["strategies"] == []  # a named profile is its name


def test_not_found_shows_one_short_sentence_with_a_confidence_word_and_no_rule_numbers():
    answers = [Answer("teal", 3e-11, "a.txt", 0, 1200, 1204, "low")]
    rule = no_answer.NoAnswerRule(no_answer.THRESHOLD, 4.2e-8, "docs/no-answer.md: measured, 97.3 % kept")
    result = SimpleNamespace(answers=answers, verdict=no_answer.judge(rule, 3e-11, None, True))
    shown, status = ui_format.best_answer(result), ui_format.answer_status(result)
    assert shown == ""  # said once, over the answer box
    assert status.startswith("### Not found in the documents (high confidence)\nNo passage answers the question "
                             "clearly enough.\n")
    visible, disclosure = status.split('<details class="how-decided"><summary>How this is decided</summary>')
    assert "4.2e" not in shown + visible and "97" not in shown + visible  # the numbers are the disclosure's
    assert "4\\.2e\\-08" in disclosure and "97\\.3" in disclosure and disclosure.endswith("</details>")
    linked = ui_format.answer_status(result, "gradio_api/file=/app/docs/no-answer.md")
    assert "[How often this rule is right](gradio_api/file=/app/docs/no-answer.md)" in linked
    form = no_answer.QuestionForm("What is the <attribute> of <name>?", "One form only.")
    guess = no_answer.judge(replace(rule, question_form=form), 0.3, None, True, [], [], "Who founded Acme?")
    outside = SimpleNamespace(answers=[Answer("teal", 0.3, "a.txt", 0, 1200, 1204, "low")], verdict=guess)
    assert ui_format.best_answer(outside) == "teal"  # the answer still shows, marked as a guess
    status = ui_format.answer_status(outside)  # markdown-escaped
    assert status.startswith("### A guess \\(low confidence\\): this model answers") and "&lt;attribute&gt;" in status


def test_the_reading_summary_compares_the_expected_seconds_with_what_the_passes_took():
    reading = ReadingReadout("guided", "auto", 2, 13, "ranked", [], expected_s=6.2, forward_s=7.9)
    text = ui_format.reading_summary(readout_of({"forward": 7.9, "total": 8.4}, reading))
    assert text == "read 2 of 13 windows (guided) in 8.40 s (the model's passes 7.90 s, expected about 6 s)"


@pytest.mark.parametrize("full_s, guided_s, text", [
    (None, None, "Reading windows"),
    (40.4, None, "Reading windows: about 40 s for the whole document"),
    (125.0, 6.3, "Reading windows: about 2 min 5 s for the whole document, a guided read about 6 s"),
    (30.2, 0.4, "Reading windows: about 30 s for the whole document, a guided read under a second"),
])
def test_before_a_read_the_page_says_how_long_it_should_take(full_s, guided_s, text):
    assert ui_format.read_expectation(SimpleNamespace(full_read_s=full_s, guided_read_s=guided_s)) == text


def test_not_found_shows_the_closest_passages_numbered_with_nothing_marked_as_the_answer():
    texts = ["The colour of Zorbin is teal. " * 3, "Velka is red."]
    answers = [Answer("teal", 3e-11, "a.txt", 0, 24, 28, "low"), Answer("teal", 2e-11, "a.txt", 0, 24, 28, "low"),
               Answer("red", 1e-11, "b.txt", 1, 9, 12, "low"), Answer("Zorbin", 1e-12, "a.txt", 0, 14, 20, "low")]
    spans = ui_format.closest_passages(texts, answers)
    assert all(label is None for _, label in spans)
    text = "".join(span for span, _ in spans)
    assert text.startswith("(1) The colour of Zorbin is teal.") and " (2) Velka is red." in text
    assert text.count("(") == 2  # two places, the same one once
    rule = no_answer.NoAnswerRule(no_answer.THRESHOLD, 1e-5, "measured")
    lost = SimpleNamespace(answers=answers, verdict=no_answer.judge(rule, 3e-11, 0.99, True))
    assert ui_format.evidence_label(lost) == ui_format.CLOSEST_LABEL
    found = SimpleNamespace(answers=answers, verdict=no_answer.judge(rule, 0.9, 0.01, True))
    assert ui_format.evidence_label(found) == ui_format.EVIDENCE_LABEL


def test_a_closest_passage_inside_one_already_shown_is_not_shown_again():
    """Overlapping windows give spans a few words apart: one passage for them, not two nearly the same."""
    text = "The colour of Zorbin is teal. " * 40
    far = 30 * 30 + 24  # the same sentence, further than a passage reaches
    answers = [Answer("teal", 3e-11, "a.txt", 0, 24, 28, "low"), Answer("Zorbin", 2e-11, "a.txt", 0, 14, 20, "low"),
               Answer("teal", 1e-11, "a.txt", 0, far, far + 4, "low")]
    shown = "".join(span for span, _ in ui_format.closest_passages([text], answers))
    assert shown.count("(") == 2 and " (2) …" in shown


def test_the_wait_line_counts_the_rest_as_the_page_and_the_network():
    line = ui_format.wait_line(0.8, {"total": 0.237}, {"waited_to_start_s": 0.05})
    assert line.startswith("**You waited 800 ms**") and "50 ms queued" in line and "237 ms in the engine" in line
    assert "513 ms in gradio's queue" in line
    stopped = ui_format.wait_line(5.4, None, None)  # a Stop: no stages measured, no "0 ms in the engine"
    assert stopped == "**You waited 5.40 s** from click to the end (timed in your browser)."
    assert ui_format.wait_line(None, {"total": 0.2}, None) == ""


def test_a_best_so_far_under_the_models_threshold_is_not_shown_as_an_answer():
    from longqa_core.answering import Provisional
    from longqa_core.documents import Document
    from page.streaming import provisional_outputs

    document = Document("manual.txt", "This feature is only implemented for CGI scripts, says the message.")
    junk = Provisional(Answer("message", 4.7e-11, "manual.txt", 0, 59, 66), 44, 208, plausible=False)
    shown = provisional_outputs(junk, [document])
    assert shown["answer"]["value"] == "" and shown["evidence"] is None
    assert shown["answer"]["label"] == "Answer: nothing plausible yet (44 of 208 windows read)"
    assert shown["answers"].values.tolist()[0][3] == ui_format.UNDER_THE_BAR and shown["readout"]["plausible"] is False
    stopped = ui_format.stopped_status(44, 208, junk)
    assert stopped.startswith("### Stopped after 44 of 208 windows\nNothing plausible was read") and "4.7e-11" in stopped
    fair = Provisional(Answer("30", 0.4, "manual.txt", 0, 5, 7), 44, 208)
    assert provisional_outputs(fair, [document])["answer"]["value"] == "30"  # over the bar: shown, labelled so far
