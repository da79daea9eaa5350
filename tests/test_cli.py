"""The command line: answers, the JSON readout, and one-line errors with a non-zero exit code."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from longqa import cli
from longqa.cli import main
from tests.generated_pdfs import text_pdf


@pytest.fixture
def long_file(tmp_path):
    path = tmp_path / "long.txt"
    path.write_text("The river of Tarnholm is 381. " + "Plain filler words follow here. " * 400)
    return path


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_ask_json_has_answers_and_readouts(capsys, tiny_model_dir, long_file):
    code, out, err = run_cli(capsys, "ask", "--model", str(tiny_model_dir), "--profile", "baseline-fp32",
                             "--question", "What is the river of Tarnholm?", str(long_file), "--max-seq-len", "256",
                             "--doc-stride", "32", "--top-k", "3", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert set(data) >= {"answers", "model", "profile", "windows", "tokens", "batch_size", "latency_s", "memory"}
    assert data["windows"] > 3 and data["tokens"] > 1000 and len(data["answers"]) == 3
    text = long_file.read_text()
    for item in data["answers"]:
        assert text[item["start_char"]:item["end_char"]] == item["text"]
        assert item["document"] == "long.txt"


@pytest.mark.slow
def test_ask_prints_answers(capsys, tiny_model_dir, long_file):
    code, out, err = run_cli(capsys, "ask", "--model", str(tiny_model_dir), "--profile", "cpu", "-q",
                             "What is the river?", str(long_file), "--max-seq-len", "512")
    assert code == 0
    assert out.startswith("1. ") and "score" in out
    assert "windows" in err and "profile cpu" in err


@pytest.mark.parametrize("make_args, message", [
    (lambda tmp: ["missing.txt"], "not found"),
    (lambda tmp: [str(tmp / "empty.txt")], "empty"),
    (lambda tmp: [str(tmp / "bad.pdf")], "PDF"),
])
def test_bad_input_is_one_line_and_non_zero(capsys, tiny_model_dir, tmp_path, make_args, message):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "bad.pdf").write_bytes(b"%PDF-1.4 this is not really a pdf")
    code, out, err = run_cli(capsys, "ask", "--model", str(tiny_model_dir), "-q", "Why?", *make_args(tmp_path))
    assert code != 0 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and message.lower() in err.lower()


def test_empty_question_is_refused(capsys, tiny_model_dir, long_file):
    code, _, err = run_cli(capsys, "ask", "--model", str(tiny_model_dir), "--profile", "cpu", "-q", "  ",
                           str(long_file))
    assert code != 0 and "question" in err.lower() and err.count("\n") == 1


def test_profiles_json_lists_every_profile(capsys):
    code, out, _ = run_cli(capsys, "profiles", "--json")
    rows = {row["name"]: row for row in json.loads(out)}
    assert code == 0
    assert set(rows) >= {"auto", "rtx-3090-24gb", "t4-16gb", "consumer-gpu", "multi-gpu", "datacenter", "cpu",
                         "baseline-fp32", "custom"}
    assert rows["cpu"]["available"] is True
    assert all(row["reason"] for row in rows.values() if not row["available"])


@pytest.mark.slow
@pytest.mark.parametrize("name, data", [("nope.pdf", None), ("bad.pdf", b"%PDF-1.4 this is not really a pdf")],
                         ids=["missing", "corrupt pdf"])
def test_no_traceback_from_a_real_process(tmp_path, name, data):
    if data is not None:
        (tmp_path / name).write_bytes(data)
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-m", "longqa", "ask", "-q", "Why?", str(tmp_path / name)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr  # no library chatter


def test_profiles_json_predicts_peak_memory_per_available_profile(capsys):
    from longqa.cli import main

    assert main(["profiles", "--json", "--model", "arch:base"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["baseline-fp32"]["predicted_peak_bytes"] > rows["cpu"]["predicted_peak_bytes"] > 296_000_000
    assert rows["cpu"]["fits"] is True
    assert rows["datacenter"]["predicted_peak_bytes"] is None  # not available without a GPU


@pytest.mark.slow
@pytest.mark.parametrize("profile", ["baseline-fp32", "cpu"])
def test_a_real_run_prints_only_our_own_notes_on_stderr(tmp_path, profile):
    """No library chatter (transformers' padding notice, deprecation warnings, progress bars) on stderr."""
    path = tmp_path / "note.txt"
    path.write_text("The tide of Harrowgate is 4102. " + "Nothing else happens in the harbour today. " * 300)
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONWARNINGS="default")
    proc = subprocess.run([sys.executable, "-m", "longqa", "ask", "--model", "demo", "--profile", profile,
                           "-q", "What is the tide of Harrowgate?", str(path)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and re.fullmatch(r"\d+ windows, \d+ tokens, batch \d+, [\d.]+ s, model demo, "
                                            rf"profile {profile}; read \d+ of (about )?\d+ windows, "
                                            r"(full|guided): .+", lines[0]), proc.stderr
    assert proc.stdout.startswith("1. ")


@pytest.mark.slow
def test_ask_reads_guided_and_full_with_the_same_answer(capsys, tmp_path):
    from evals import eval_task

    item = eval_task.make_document(5, 30_000)
    path = tmp_path / "report.txt"
    path.write_text(item.text)
    readouts = {}
    for mode in ("guided", "full"):
        assert main(["ask", "--model", "demo", "--json", "--reading", mode, "-q", item.question, str(path)]) == 0
        readouts[mode] = json.loads(capsys.readouterr().out)
    guided, full = readouts["guided"], readouts["full"]
    assert guided["reading"]["mode"] == "guided" and full["reading"]["mode"] == "full"
    assert guided["reading"]["windows_read"] < full["reading"]["windows_read"] / 3
    assert [(a["text"], a["start_char"]) for a in guided["answers"][:1]] == \
        [(a["text"], a["start_char"]) for a in full["answers"][:1]] == [(item.answer, item.answer_start)]
    assert all(set(r) == {"document_index", "start_char", "end_char"} for r in guided["reading"]["read"])
    with pytest.raises(SystemExit) as refused:  # argparse names the choices
        main(["ask", "--model", "demo", "--reading", "skim", "-q", "q", str(path)])
    assert refused.value.code == 2 and "choose from 'auto', 'full', 'guided'" in capsys.readouterr().err


# What `python -m longqa ask --model demo --question "What is the frequency of Chiomklian Oustklaeth?"
# longqa/samples/harbour_records.txt --json` printed before the engine was split and readouts were typed (issue 37):
# the API's shape is a promise, so the same keys, and the same values but for timings and memory.
BEFORE = json.loads((Path(__file__).parent / "data" / "cli_answer_before_issue37.json").read_text())
MEASURED = {"latency_s", "memory", "tokens_per_s", "memory_prediction"}  # timings and memory: values may differ
ADDED = {"found", "no_answer",  # issue 38 adds the verdict, and each answer's "confidence"
         "strategies", "request_memory"}  # issue 39: what the profile applied, the request's own memory
ADDED_MEMORY = {"host_baseline_rss_bytes", "host_request_peak_bytes"}  # issue 39: the baseline and the peak above it
ADDED_ANSWER = {"confidence",  # issue 38
                "location"}  # issue 50: the page, heading or line
ADDED_READING = {"narrowed", "widened",  # issue 50: windows sized to the ranked passage
                 "expected_s", "forward_s"}  # issue 50: what the plan expected the read to take, and what it took


def without_additions(answer_json: dict) -> dict:
    """An answer's JSON without what issues 38, 39 and 50 added, which BEFORE cannot have."""
    out = {key: value for key, value in answer_json.items() if key not in ADDED}
    out["answers"] = [{k: v for k, v in a.items() if k not in ADDED_ANSWER} for a in answer_json["answers"]]
    out["memory"] = {k: v for k, v in answer_json["memory"].items() if k not in ADDED_MEMORY}
    out["reading"] = {k: v for k, v in answer_json["reading"].items() if k not in ADDED_READING}
    return out


def key_tree(value):
    """The nested keys of a JSON value (a list by its first item's keys)."""
    if isinstance(value, dict):
        return {key: key_tree(item) for key, item in value.items()}
    if isinstance(value, list):
        return [key_tree(value[0])] if value else []
    return None


@pytest.mark.slow
def test_a_cli_answer_keeps_its_json_keys_and_values_but_for_timings_and_memory(capsys):
    sample = Path(__file__).resolve().parents[1] / "longqa" / "samples" / "harbour_records.txt"
    code, out, err = run_cli(capsys, "ask", "--model", "demo", "--question",
                             "What is the frequency of Chiomklian Oustklaeth?", str(sample), "--json")
    assert code == 0, err
    now = json.loads(out)
    assert now["found"] is True and now["answers"][0]["confidence"] == "high"
    assert now["no_answer"]["rule"] == "threshold" and now["no_answer"]["verdict"] == "Found"
    now = without_additions(now)
    assert key_tree(now) == key_tree(BEFORE)
    # the span scores come out of bf16 kernels that differ by CPU kind (AMX rounds the softmax's numerators, the
    # fused residual adds round once): equal to bf16's precision, everything else exactly
    scores = [answer.pop("score") for answer in now["answers"]]
    before = json.loads(json.dumps(BEFORE))
    assert scores == pytest.approx([answer.pop("score") for answer in before["answers"]], rel=2 ** -8)
    assert {key: value for key, value in now.items() if key not in MEASURED} == \
        {key: value for key, value in before.items() if key not in MEASURED}
    assert now["memory_prediction"]["device"] == BEFORE["memory_prediction"]["device"] == "cpu"


SAMPLES = Path(__file__).resolve().parents[1] / "longqa" / "samples"


@pytest.mark.slow
def test_a_question_no_document_answers_is_said_not_found_with_the_best_span_for_the_curious(capsys):
    files = [str(SAMPLES / "harbour_records.txt"), str(SAMPLES / "expedition_notes.md")]
    code, out, err = run_cli(capsys, "ask", "--model", "demo", "-q", "What is the capital of France?", *files)
    assert code == 0, err
    first, best = out.splitlines()[:2]
    assert first.startswith("Not found in the documents")
    assert best.startswith("1. ") and "low confidence" in best
    code, out, err = run_cli(capsys, "ask", "--model", "demo", "-q", "What is the capital of France?", *files,
                             "--json")
    answer = json.loads(out)
    assert answer["found"] is False and answer["no_answer"]["verdict"] == "Not found in the documents"
    assert answer["no_answer"]["read_whole"] is True
    assert answer["answers"] and all(a["confidence"] == "low" for a in answer["answers"])


@pytest.mark.slow
def test_a_threshold_of_the_users_replaces_the_models_rule(capsys):
    sample = str(SAMPLES / "harbour_records.txt")
    question = "What is the frequency of Chiomklian Oustklaeth?"
    strict = json.loads(run_cli(capsys, "ask", "--model", "demo", "-q", question, sample, "--json",
                                "--no-answer-below", "0.999")[1])
    assert strict["found"] is False and strict["no_answer"]["source"] == "given by the user"
    assert strict["answers"][0]["text"] == "30"  # the best span stays, marked low
    assert strict["answers"][0]["confidence"] == "low"


@pytest.mark.slow
@pytest.mark.parametrize("bad", ["0", "1", "-0.5", "7"])
def test_a_threshold_outside_zero_one_is_a_clear_error(capsys, bad):
    code, out, err = run_cli(capsys, "ask", "--model", "demo", "-q", "What is it?",
                             str(SAMPLES / "harbour_records.txt"), "--no-answer-below", bad)
    assert code == 2 and "between 0 and 1" in err and out == ""


@pytest.mark.slow  # two loads of the tiny model and two reads
def test_compare_prints_a_row_per_profile_and_json_with_ratios(capsys, tiny_model_dir, long_file):
    argv = ["compare", str(long_file), "--model", str(tiny_model_dir), "--profiles", "baseline-fp32,custom",
            "--strategies", "int8_dynamic", "-q", "What is the river of Tarnholm?"]
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    data = json.loads(out)
    runs = data["runs"]
    assert [(run["profile"], run["strategies"]) for run in runs] == [("baseline-fp32", []), ("custom", ["int8_dynamic"])]
    assert runs[0]["ratios"] == {"time": 1.0, "peak": 1.0, "request_peak": 1.0, "windows_per_s": 1.0}
    assert runs[1]["ratios"]["time"] == pytest.approx(runs[1]["time_s"] / runs[0]["time_s"])
    assert runs[0]["same_answer"] is True and runs[1]["readout"]["strategies"] == ["int8_dynamic"]
    assert runs[0]["peak_bytes"] == runs[0]["baseline_bytes"] + runs[0]["request_peak_bytes"]
    code, out, err = run_cli(capsys, *argv)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[2].startswith("baseline-fp32") and "(1.00x)" in lines[2]
    assert lines[3].startswith("custom (int8_dynamic)")


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="t4-16gb may run on a machine with a GPU")
def test_compare_refuses_a_profile_this_machine_cannot_run_in_one_line(capsys, long_file):
    code, out, err = run_cli(capsys, "compare", str(long_file), "--model", "demo", "--profiles", "cpu,t4-16gb",
                             "-q", "What is the river of Tarnholm?")
    assert code == 2 and out == "" and err.startswith("error: ") and "t4-16gb" in err and len(err.splitlines()) == 1


@pytest.mark.slow
def test_every_answer_over_a_pdf_and_a_markdown_file_names_its_page_or_line(capsys, tmp_path):
    """Issue 50: the harbour records as a PDF of one paragraph a page (lines of a few words), beside the expedition
    notes: each answer's page holds its text, each Markdown answer's line is its line."""
    paragraphs = (SAMPLES / "harbour_records.txt").read_text().split("\n\n")
    pages = ["\n".join(textwrap.wrap(paragraph, 70)) for paragraph in paragraphs]
    pdf = tmp_path / "records.pdf"
    pdf.write_bytes(text_pdf(*pages))
    notes = SAMPLES / "expedition_notes.md"

    def ask(question: str) -> list[dict]:
        code, out, err = run_cli(capsys, "ask", "--model", "demo", "--question", question, str(notes), str(pdf),
                                 "--top-k", "5", "--reading", "full", "--json")
        assert code == 0, err
        return json.loads(out)["answers"]

    from_pdf = ask("What is the frequency of Chiomklian Oustklaeth?")
    from_notes = ask("What is the salary of Trinshae Ra?")
    assert from_pdf[0]["text"] == "30" and from_pdf[0]["location"]["page"] == next(
        n for n, page in enumerate(pages, 1) if "Chiomklian Oustklaeth is 30" in page)
    assert from_notes[0]["text"] == "tialfurkhuv" and from_notes[0]["document"] == "expedition_notes.md"
    answers = from_pdf + from_notes
    notes_text = notes.read_text()
    for answer in answers:
        location = answer["location"]
        assert (location["document"], location["start_char"]) == (answer["document"], answer["start_char"])
        if answer["document"] == "records.pdf":
            page = pages[location["page"] - 1]
            assert answer["text"] in page, (answer, page)
            assert location["text"] == f"records.pdf, page {location['page']}"
        else:
            assert location["page"] is None
            assert location["line"] == notes_text.count("\n", 0, answer["start_char"]) + 1
            assert location["text"].startswith(f"expedition_notes.md, line {location['line']:,}")


def test_ask_sizes_guided_windows_by_the_model_s_default_and_0_reads_them_whole(capsys):
    """Issue 60: no flag leaves the loaded model's default (1,024 tokens); 0 reaches the settings, which read whole
    windows for it (tests/test_reading.py); a negative size is refused before anything is read."""
    parse = cli.build_parser().parse_args
    assert parse(["ask", "a.txt", "-q", "What?"]).passage_window_tokens is None
    assert parse(["ask", "a.txt", "-q", "What?", "--passage-window-tokens", "0"]).passage_window_tokens == 0
    with pytest.raises(SystemExit):
        parse(["ask", "a.txt", "-q", "What?", "--passage-window-tokens", "-5"])
    assert "must be 0 or more" in capsys.readouterr().err


@pytest.mark.parametrize("argv0, usage", [("/venv/bin/longqa", "usage: longqa "),
                                          ("/repo/longqa/__main__.py", "usage: python -m longqa ")])
def test_the_usage_names_the_command_as_it_was_started(monkeypatch, capsys, argv0, usage):
    monkeypatch.setattr(sys, "argv", [argv0])
    cli.build_parser().print_usage()
    assert capsys.readouterr().out.startswith(usage)


@pytest.mark.slow
def test_page_image_writes_the_top_answers_pdf_page_with_its_mark_and_the_json_keeps_its_boxes(capsys, tmp_path):
    from PIL import Image

    from tests.generated_pdfs import WRAPPED_QUESTION, wrapped_matplotlib_pdf

    report = tmp_path / "survey.pdf"
    report.write_bytes(wrapped_matplotlib_pdf(n_pages=3, fact_page=2))
    picture = tmp_path / "page.png"
    code, out, err = run_cli(capsys, "ask", "--model", "demo", "--question", WRAPPED_QUESTION, str(report),
                             "--page-image", str(picture), "--json")
    assert code == 0, err
    best = json.loads(out)["answers"][0]
    assert best["text"] == "2250" and best["location"]["page"] == 2
    (mark,) = best["location"]["marks"]
    image = Image.open(picture).convert("RGB")
    scale = image.width / mark["width"]
    left, top, right, bottom = (edge * scale for edge in mark["view_boxes"][0])
    pixel = image.getpixel((round(left + 1), round((top + bottom) / 2)))
    assert pixel[0] - pixel[2] > 60, pixel  # marked where the value stands
    assert "page 2 of survey.pdf" in err

    sample = Path(__file__).resolve().parents[1] / "longqa" / "samples" / "harbour_records.txt"
    code, out, err = run_cli(capsys, "ask", "--model", "demo", "--question",
                             "What is the frequency of Chiomklian Oustklaeth?", str(sample), "--page-image",
                             str(tmp_path / "none.png"))
    assert code == 0 and "no page image written: the answer is not marked on a PDF page" in err
    assert not (tmp_path / "none.png").exists()
