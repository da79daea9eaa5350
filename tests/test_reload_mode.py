"""`gradio app.py`, gradio's reload mode, from a copy of the repository: it serves the page and answers, and after a
change to a page module it serves the changed page and still answers. gradio runs the file as `python app.py` does,
then again in its watcher thread (and after each change), where `main()` must not run: it set a signal handler,
which only the main thread may, and the watcher died at start (no reload after that)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from gradio_client import Client

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
START_S = 180.0  # import, the demo model's load and the page, on a busy machine
RELOAD_S = 120.0  # the watcher re-imports the project and builds the page again


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def copy_of_the_repository(folder: Path) -> Path:
    """The tracked files, so that the change this test makes never touches the working tree."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        if (ROOT / name).is_file():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, folder / name)
    return folder


def wait_for(condition, what: str, limit_s: float, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        if process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{what} within {limit_s:.0f} s: {log.read_text()[-3000:]}")
        time.sleep(0.5)


def serves(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def page_title(url: str) -> str:
    with urllib.request.urlopen(f"{url}config", timeout=30) as reply:
        config = json.load(reply)
    return next(c["props"]["value"] for c in config["components"]
                if isinstance(c.get("props", {}).get("value"), str) and c["props"]["value"].startswith("# "))


def answer(url: str) -> str:
    text = "The harbour was quiet that morning. The frequency of Chiomklian Oustklaeth is 30. The boats stayed in."
    *_, readout = Client(url, verbose=False).predict([], text, "What is the frequency of Chiomklian Oustklaeth?", 3,
                                                     api_name="/ask")
    return readout["answers"][0]["text"]


@pytest.fixture(scope="module")
def import_on_a_space():
    """`import app` in a fresh interpreter as on a Space (SPACE_ID set), printing what its context was built with;
    started, not waited for: the reload test's server starts beside it (two processes starting side by side on two
    cores, not one after the other). (process, its start on the monotonic clock)"""
    env = dict(os.environ, HF_HUB_OFFLINE="1", SPACE_ID="someone/longqa")
    probe = subprocess.Popen([sys.executable, "-c", "import app; print(app.context.lock_profile, "
                              "app.context.max_request_s, app.context.visitor_header)"],
                             cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    yield probe, time.monotonic()
    if probe.poll() is None:
        probe.kill()
    probe.communicate()


@pytest.mark.usefixtures("import_on_a_space")
def test_gradio_reload_mode_serves_the_page_and_serves_it_again_after_a_change(tmp_path):
    repository = copy_of_the_repository(tmp_path / "repository")
    port, log = free_port(), tmp_path / "server.log"
    env = dict(os.environ, HF_HUB_OFFLINE="1", GRADIO_SERVER_PORT=str(port), PYTHONUNBUFFERED="1")
    with open(log, "w") as output:  # its own session: gradio runs the app in a child, stopped with it below
        process = subprocess.Popen([sys.executable, "-m", "gradio", "app.py"], cwd=repository, env=env, stdout=output,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_for(lambda: serves(port) and "Watching demo" in log.read_text(), "the page was not served", START_S,
                 process, log)
        assert answer(url) == "30"
        words = repository / "page" / "words.py"
        words.write_text(words.read_text().replace("with Longformer\"", "with Longformer, reloaded\""))
        wait_for(lambda: "reloaded" in page_title(url), "the changed page was not served", RELOAD_S, process, log)
        assert answer(url) == "30"  # the page built again, with the defaults: the model loads on this first request
        said = log.read_text()
        assert "Traceback" not in said and "failed" not in said, said[-3000:]
    finally:
        stop_group(process)
        assert not children_alive(process), "the app gradio started is still running"


def stop_group(process: subprocess.Popen) -> None:
    """The gradio command and the app it started (its own process group): SIGTERM, then SIGKILL after 30 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while children_alive(process) and time.monotonic() < deadline:
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def children_alive(process: subprocess.Popen) -> bool:
    """Whether any process of `process`'s group is still running (zombies, already ended, do not count)."""
    for candidate in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(candidate.pid) == process.pid and candidate.status() != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return False


def test_the_page_built_at_import_is_locked_and_bounded_on_a_space_as_python_app_py_is(import_on_a_space):
    """What a reload (or an import) serves starts as `python app.py` without flags does: on a Space (SPACE_ID set)
    the profile is locked and each request's time bounded."""
    probe, started = import_on_a_space
    stdout, stderr = probe.communicate(timeout=max(0.0, started + 300 - time.monotonic()))
    assert probe.returncode == 0, stderr[-2000:]
    locked, max_request_s, header = stdout.split()
    assert locked == "True" and float(max_request_s) > 0 and header.lower() == "x-forwarded-for"
