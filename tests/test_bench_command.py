"""`python -m bench NAME ...`: each of the workshop's measurements answers to its name with its own arguments, gets
the arguments after its name, and a refused input is one line, as the product's command line does it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench import __main__ as command
from longqa_core.errors import InputError

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", sorted(command.MEASUREMENTS))
def test_each_measurement_answers_to_its_name_with_its_own_arguments(capsys, name):
    with pytest.raises(SystemExit) as stopped:
        command.main([name, "--help"])
    assert stopped.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: python -m bench {name} ")


def test_a_measurement_gets_the_arguments_after_its_name(monkeypatch):
    seen = []
    monkeypatch.setitem(command.MEASUREMENTS, "window", SimpleNamespace(main=lambda argv: seen.append(argv) or 3))
    assert command.main(["window", "--tokens", "1024", "--out", "x"]) == 3
    assert seen == [["--tokens", "1024", "--out", "x"]]


def test_no_name_or_an_unknown_one_prints_the_names(capsys):
    assert command.main([]) == 2 and command.main(["floors"]) == 2
    assert capsys.readouterr().err.splitlines()[0].startswith("usage: python -m bench {floor,window,")
    assert command.main(["--help"]) == 0 and "reading,stream" in capsys.readouterr().out


def test_a_refused_input_is_one_line(monkeypatch, capsys):
    def refuse(argv):
        raise InputError("--modes takes auto, full, guided, got skim.")

    monkeypatch.setitem(command.MEASUREMENTS, "reading", SimpleNamespace(main=refuse))
    assert command.main(["reading", "--modes", "skim"]) == 2
    assert capsys.readouterr().err == "error: --modes takes auto, full, guided, got skim.\n"


@pytest.mark.slow  # a fresh interpreter imports torch and transformers
def test_python_m_bench_runs_from_the_repository():
    shown = subprocess.run([sys.executable, "-m", "bench", "--help"], cwd=ROOT, capture_output=True, text=True,
                           timeout=120)
    assert shown.returncode == 0 and shown.stdout.startswith("usage: python -m bench {floor,"), shown.stderr
