"""The OpenMP spin count the entry points set before torch loads libgomp (longqa_core/openmp_wait.py)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from longqa_core import openmp_wait
from longqa_core.openmp_wait import OPERATOR_VARIABLES, SERVER_SPIN_COUNT, SPIN_VARIABLE, limit_spin_wait

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def clean_environment(monkeypatch):
    """Neither of the operator's variables set (both put back as they were after the test)."""
    for name in OPERATOR_VARIABLES:
        monkeypatch.setenv(name, "placeholder")
        monkeypatch.delenv(name)
    return monkeypatch


def test_sets_the_spin_count_before_libgomp_loads(clean_environment):
    clean_environment.setattr(openmp_wait, "is_openmp_loaded", lambda: False)
    assert limit_spin_wait() == {SPIN_VARIABLE: str(SERVER_SPIN_COUNT)}
    assert os.environ[SPIN_VARIABLE] == str(SERVER_SPIN_COUNT)
    assert limit_spin_wait(500) == {}  # set once: the second call finds it set, as an operator's would be


@pytest.mark.parametrize("name, value", [("GOMP_SPINCOUNT", "5"), ("OMP_WAIT_POLICY", "PASSIVE")])
def test_the_operators_setting_wins(clean_environment, name, value):
    clean_environment.setattr(openmp_wait, "is_openmp_loaded", lambda: False)
    clean_environment.setenv(name, value)
    assert limit_spin_wait() == {}
    assert os.environ[name] == value
    assert (SPIN_VARIABLE in os.environ) == (name == SPIN_VARIABLE)


def test_changes_nothing_once_torch_is_loaded(clean_environment):
    import torch  # noqa: F401 - loaded here, as in every test process: libgomp has read its settings

    assert openmp_wait.is_openmp_loaded()
    assert limit_spin_wait() == {}
    assert SPIN_VARIABLE not in os.environ


def fresh_python(code: str) -> dict:
    """What `code` prints last as JSON, run in a new interpreter without the operator's variables."""
    environment = {k: v for k, v in os.environ.items() if k not in OPERATOR_VARIABLES}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=environment, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_in_a_fresh_interpreter_set_before_torch_and_not_after():
    seen = fresh_python("import json; from longqa_core.openmp_wait import limit_spin_wait, is_openmp_loaded\n"
                        "before = limit_spin_wait(); loaded_before = is_openmp_loaded()\n"
                        "import torch\n"
                        "print(json.dumps([before, loaded_before, is_openmp_loaded(), limit_spin_wait()]))")
    assert seen == [{SPIN_VARIABLE: str(SERVER_SPIN_COUNT)}, False, True, {}]


@pytest.mark.slow
def test_the_command_line_sets_it_before_torch_is_imported():
    """`python -m longqa` as run: the variable is in the environment at the moment torch is first imported."""
    seen = fresh_python(
        "import json, os, runpy, sys\n"
        "seen = {}\n"
        "class Watch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch' and 'at_torch' not in seen:\n"
        "            seen['at_torch'] = os.environ.get('GOMP_SPINCOUNT')\n"
        "        return None\n"
        "sys.meta_path.insert(0, Watch())\n"
        "sys.argv = ['longqa', 'profiles']\n"
        "try:\n"
        "    runpy.run_module('longqa', run_name='__main__', alter_sys=True)\n"
        "except SystemExit:\n"
        "    pass\n"
        "print()\n"
        "print(json.dumps(seen))")
    assert seen == {"at_torch": str(SERVER_SPIN_COUNT)}


def test_the_page_sets_it_before_its_first_library_import():
    """The page package calls limit_spin_wait before any of its modules imports gradio, spaces (which may load torch)
    or the project, and app.py imports the page before anything else not in the standard library."""
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    app = ast.parse((ROOT / "app.py").read_text())
    imported_by_app = [node.module if isinstance(node, ast.ImportFrom) else node.names[0].name for node in app.body
                       if isinstance(node, (ast.Import, ast.ImportFrom))]
    first = next(name for name in imported_by_app if name.split(".")[0] not in stdlib)
    assert first.split(".")[0] == "page", f"app.py imports {first} before the page package"
    tree = ast.parse((ROOT / "page" / "__init__.py").read_text())
    call_line = next(node.lineno for node in tree.body if isinstance(node, ast.Expr)
                     and isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "") == "limit_spin_wait")
    for node in tree.body:
        imported = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                    else [node.module or ""] if isinstance(node, ast.ImportFrom)
                    else [alias.name for inner in ast.walk(node) if isinstance(inner, ast.Import)
                          for alias in inner.names] if isinstance(node, ast.Try) else [])
        for name in imported:
            if name.split(".")[0] not in stdlib and name != "longqa_core.openmp_wait":
                assert node.lineno > call_line, (f"page/__init__.py imports {name} (line {node.lineno}) before the "
                                                 "spin count")
