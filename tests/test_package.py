"""`pip install .`: pyproject.toml ships every file the installed code reads and nothing of the workshop beside it
(bench/, evals/, training/), a question asked imports nothing of the workshop, and the `longqa` console script answers
a question over a bundled sample from outside the repository (a fresh virtual environment, slow; pip fetches
setuptools for the build from the package index)."""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import site
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]


def tracked_files() -> list[str]:
    shown = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    return shown.stdout.splitlines()


def shipped_packages(files: list[str]) -> set[str]:
    """The packages setuptools' find includes: folders holding an `__init__.py` whose dotted name matches."""
    patterns = SETUPTOOLS["packages"]["find"]["include"]
    packages = {".".join(Path(name).parent.parts) for name in files if name.endswith("/__init__.py")}
    return {name for name in packages if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)}


def is_package_data(path: str, packages: set[str]) -> bool:
    """Whether a non-Python file is shipped: a package-data pattern of the deepest package above it matches."""
    parts = Path(path).parts
    for depth in range(len(parts) - 1, 0, -1):
        package = ".".join(parts[:depth])
        if package in packages:
            relative = "/".join(parts[depth:])
            return any(fnmatch.fnmatchcase(relative, glob) for glob in SETUPTOOLS["package-data"].get(package, []))
    return False


# The workshop beside the packages: measurements, evaluations and the demo model's training tasks and data.
WORKSHOP = ("bench", "evals", "training")
# What stays of longqa/bench: the strategy table for a user's own machine (`longqa bench`).
PRODUCT_BENCH = {"__init__", "documents", "report", "runner", "worker"}


def test_the_runtime_packages_and_their_data_are_shipped():
    files = tracked_files()
    packages = shipped_packages(files)
    assert {"longqa", "longqa.bench", "longqa.demo_model", "longqa.serving", "longqa_core", "strategies"} <= packages
    assert not any(name == "tests" or name.startswith("tests.") for name in packages)
    runtime = [name for name in files if name.split("/")[0] in {"longqa", "longqa_core", "strategies", "page"}
               and not name.endswith(".py")]
    assert "longqa/demo_model/model.safetensors" in runtime and "strategies/band_attention.c" in runtime
    missing = [name for name in runtime if not is_package_data(name, packages)]
    assert not missing, f"read at run time but not in pyproject's package-data: {missing}"


def test_the_workshop_and_the_training_data_are_not_shipped():
    files = tracked_files()
    packages = shipped_packages(files)
    assert {name for name in packages if name.split(".")[0] in WORKSHOP} == set()
    assert {"bench", "bench.crowd", "evals", "training"} <= {".".join(Path(name).parent.parts) for name in files
                                                              if name.endswith("/__init__.py")}  # they exist
    assert {Path(name).stem for name in files if name.startswith("longqa/bench/")} == PRODUCT_BENCH
    shipped = [name for name in files if is_package_data(name, packages)]
    assert not [name for name in shipped if Path(name).name in ("prose.txt", "nouns.txt")], shipped


@pytest.mark.slow  # a fresh interpreter imports torch, transformers and the product (7 s on 2 cores)
def test_a_question_asked_on_the_command_line_imports_nothing_of_the_workshop(tmp_path):
    """`longqa ask` run from the repository's root, where the workshop could be imported: it is not."""
    sample = json.loads((ROOT / "longqa" / "samples" / "examples.json").read_text())[0]
    code = ("import sys; from longqa.__main__ import main; "
            f"code = main(['ask', {str(ROOT / 'longqa' / 'samples' / sample['file'])!r}, '-q', {sample['question']!r}, "
            "'--model', 'demo', '--profile', 'cpu', '--json']); "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {WORKSHOP!r}), file=sys.stderr); "
            "raise SystemExit(code)")
    asked = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                           env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert asked.returncode == 0, asked.stderr
    assert json.loads(asked.stdout)["answers"][0]["text"] == sample["answer"]
    assert asked.stderr.strip().splitlines()[-1] == "[]"


def test_the_dependencies_are_the_requirements_spaces_installs():
    assert PYPROJECT["project"]["dynamic"] == ["dependencies"]
    assert SETUPTOOLS["dynamic"]["dependencies"] == {"file": ["requirements.txt"]}
    assert PYPROJECT["project"]["scripts"] == {"longqa": "longqa.__main__:main"}


def see_this_environment(venv: Path) -> None:
    """Let the venv at `venv` import what this interpreter imports (torch, transformers, ...) after its own
    packages: `--system-site-packages` shows it the base interpreter's, which are not these where the tests run in a
    venv themselves (as the README's commands make one). A .pth file's lines only add folders: the repository's own
    editable install, if any, is not among them."""
    inner = subprocess.run([venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                           capture_output=True, text=True, check=True).stdout.strip()
    outer = [path for path in (*site.getsitepackages(), site.getusersitepackages()) if Path(path).is_dir()]
    (Path(inner) / "outer-environment.pth").write_text("".join(f"{path}\n" for path in outer))


@pytest.mark.slow
def test_the_console_script_answers_from_outside_the_repository(tmp_path):
    source = tmp_path / "source"  # a copy of the tracked tree, so the build leaves nothing in the repository
    for name in tracked_files():
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    see_this_environment(venv)
    subprocess.run([venv / "bin" / "pip", "install", "--quiet", "--no-deps", str(source)],
                   check=True, cwd=tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    located = subprocess.run([venv / "bin" / "python", "-c", "import longqa; print(longqa.__file__)"],
                             capture_output=True, text=True, check=True, cwd=elsewhere, env=environment)
    samples = Path(located.stdout.strip()).parent / "samples"
    assert samples.is_relative_to(venv), located.stdout  # the installed copy, not the repository's
    installed = samples.parents[1]  # site-packages
    assert not [name for name in WORKSHOP if (installed / name).exists()]
    assert {path.stem for path in (installed / "longqa" / "bench").glob("*.py")} == PRODUCT_BENCH
    assert not [path for path in installed.rglob("*.txt") if path.name in ("prose.txt", "nouns.txt")]
    example = json.loads((samples / "examples.json").read_text())[0]
    asked = subprocess.run([venv / "bin" / "longqa", "ask", str(samples / example["file"]), "-q",
                            example["question"], "--model", "demo", "--profile", "cpu", "--json"],
                           capture_output=True, text=True, cwd=elsewhere, env=environment, timeout=300)
    assert asked.returncode == 0, asked.stderr
    readout = json.loads(asked.stdout)
    assert readout["answers"][0]["text"] == example["answer"]
    assert readout["profile"] == "cpu"
