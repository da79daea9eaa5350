"""`python -m evals NAME ...`: each evaluation answers to its name with its own arguments, and each runs end to end on
one or two items into a folder of its own, writing a result with the keys its committed one in docs/results/ has and
answering a known item right. The evaluations themselves are measurements, not tests: their numbers are in
docs/results/ (docs/results/README.md gives each one's command)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from evals import __main__ as command
from longqa_core.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"


@pytest.mark.parametrize("name", sorted(command.EVALUATIONS))
def test_each_evaluation_answers_to_its_name_with_its_own_arguments(capsys, name):
    with pytest.raises(SystemExit) as stopped:
        command.main([name, "--help"])
    assert stopped.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: python -m evals {name} ")


def test_an_evaluation_gets_the_arguments_after_its_name(monkeypatch):
    seen = []
    monkeypatch.setitem(command.EVALUATIONS, "reading", SimpleNamespace(main=lambda argv: seen.append(argv) or 3))
    assert command.main(["reading", "--n", "1", "--out", "x"]) == 3
    assert seen == [["--n", "1", "--out", "x"]]


def test_no_name_or_an_unknown_one_prints_the_names(capsys):
    assert command.main([]) == 2 and command.main(["demo"]) == 2
    assert capsys.readouterr().err.splitlines()[0].startswith("usage: python -m evals {demo-model,no-answer,")
    assert command.main(["--help"]) == 0 and "reading,layouts" in capsys.readouterr().out


def test_a_refused_input_is_one_line(monkeypatch, capsys):
    def refuse(argv):
        raise InputError("no such model")

    monkeypatch.setitem(command.EVALUATIONS, "layouts", SimpleNamespace(main=refuse))
    assert command.main(["layouts", "--model", "nothing"]) == 2
    assert capsys.readouterr().err == "error: no such model\n"


@pytest.mark.slow  # a fresh interpreter imports torch and transformers
def test_python_m_evals_runs_from_the_repository():
    shown = subprocess.run([sys.executable, "-m", "evals", "--help"], cwd=ROOT, capture_output=True, text=True,
                           timeout=120)
    assert shown.returncode == 0 and shown.stdout.startswith("usage: python -m evals {demo-model,"), shown.stderr


# --- each evaluation end to end on one or two items -------------------------------------------------------------

@pytest.mark.slow
def test_demo_model_writes_exact_match_and_answers_the_committed_first_note_as_before(tmp_path):
    """One note (`--n 2`: a quarter, at least one) is the first of the committed independent-notes set: the same top
    answer, text and place, as docs/results/demo-model-eval.json records."""
    out = tmp_path / "demo-model-eval.json"
    assert command.main(["demo-model", "--profile", "baseline-fp32", "--sets", "independent-notes", "--n", "2",
                         "--out", str(out)]) == 0
    numbers = json.loads(out.read_text())["sets"]["independent-notes"]["profiles"]["baseline-fp32"]
    committed = json.loads((RESULTS / "demo-model-eval.json").read_text())["sets"]["independent-notes"]
    assert set(committed["profiles"]["baseline-fp32"]) <= set(numbers)
    assert (numbers["n"], numbers["exact"], numbers["exact_match"]) == (1, 1, 1.0)
    assert numbers["top_answers"][0] == committed["profiles"]["baseline-fp32"]["top_answers"][0]
    assert numbers["command"].startswith("python -m evals demo-model --profile baseline-fp32")  # where it was made
    assert numbers["commit"] and numbers["cpu_kind"] in ("avx2 only", "avx512_bf16", "amx_bf16")


@pytest.mark.slow
def test_no_answer_finds_an_answerable_question_and_not_an_absent_entity(tmp_path):
    out = tmp_path / "no-answer-eval.json"
    assert command.main(["no-answer", "--profile", "baseline-fp32", "--n", "1", "--seed", "49", "--kinds",
                         "answerable,absent_entity", "--no-handwritten", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    committed = json.loads((RESULTS / "no-answer-eval-seed49.json").read_text())
    assert set(committed) <= set(report) and report["items"] == 2
    entry = report["profiles"]["baseline-fp32"]
    assert set(committed["profiles"]["cpu"]) <= set(entry)
    answerable, absent = entry["records"]
    assert (answerable["kind"], answerable["top"], answerable["right"], answerable["found"]) == \
        ("answerable", "22 November", True, True)
    assert (absent["kind"], absent["gold"], absent["found"]) == ("absent_entity", None, False)
    assert report["command"].startswith("python -m evals no-answer --profile baseline-fp32")
    assert report["reading"] == "full" and {r["read"] for r in entry["records"]} == {"full"}


@pytest.mark.slow
def test_no_answer_reads_guided_in_sized_windows_when_asked(tmp_path):
    out = tmp_path / "no-answer-eval.json"
    assert command.main(["no-answer", "--profile", "cpu", "--n", "1", "--seed", "50", "--kinds", "answerable",
                         "--no-handwritten", "--reading", "guided", "--passage-window-tokens", "512",
                         "--document-chars", "60000,60000", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert (report["reading"], report["passage_window_tokens"], report["document_chars"]) == ("guided", 512,
                                                                                             [60000, 60000])
    (record,) = report["profiles"]["cpu"]["records"]
    assert record["windows"] > 2 and record["read"] == "guided" and record["sized_windows"] >= 1
    assert (record["top"], record["right"], record["found"]) == ("23 May", True, True)


@pytest.mark.slow
def test_reading_reads_one_item_full_and_guided_and_both_answer_it(tmp_path):
    out = tmp_path / "reading-eval.json"
    assert command.main(["reading", "--n", "1", "--tokens", "5000", "--categories", "literal",
                         "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    committed = json.loads((RESULTS / "reading-eval.json").read_text())
    assert set(committed) <= set(report) and set(committed["overall"]) <= set(report["overall"])
    literal = report["categories"]["literal"]
    assert (literal["n"], literal["full_exact"], literal["guided_exact"], literal["gold_read"]) == (1, 1, 1, 1)
    assert all(report["targets"].values()), report["targets"]


@pytest.mark.slow
def test_layouts_read_a_pdf_and_a_text_file_as_uploads_and_answer_both_in_place(tmp_path):
    out = tmp_path / "layout-eval-smoke.json"
    assert command.main(["layouts", "--n", "1", "--layouts", "wrapped-pdf,hard-wrapped-txt", "--label", "smoke",
                         "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    committed = json.loads((RESULTS / "layout-eval-after.json").read_text())
    assert set(committed) <= set(report)
    for layout in ("wrapped-pdf", "hard-wrapped-txt"):
        assert set(committed["layouts"][layout]) <= set(report["layouts"][layout])
        assert report["layouts"][layout]["counts"] == {"read_whole": 1, "right": 1, "found": 1, "right_place": 1,
                                                       "all_three": 1}, layout


@pytest.mark.parametrize("chars", ["4e4,4e5", "5,2", "100"])
def test_no_answer_refuses_document_lengths_that_are_not_two_counts_low_then_high(chars, capsys):
    with pytest.raises(SystemExit) as stopped:
        command.main(["no-answer", "--document-chars", chars])
    assert stopped.value.code == 2 and "--document-chars takes two counts" in capsys.readouterr().err
