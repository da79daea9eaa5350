"""ZeroGPU the way ZeroGPU works: the served app under a stand-in `spaces` package that pickles a GPU function's
arguments and result and runs it in a forked worker (tests/zerogpu_standin), driven from gradio_client."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gradio_client import Client, handle_file

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "longqa" / "samples"
pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def zero_gpu_started(tmp_path_factory):
    """`python app.py --model demo` as a ZeroGPU Space starts it (SPACES_ZERO_GPU=true), on 127.0.0.1, started and not
    waited for: (process, port, folder, its start on the monotonic clock). Stopped after the module's tests."""
    folder = tmp_path_factory.mktemp("zerogpu")
    port = free_port()
    env = dict(os.environ, SPACES_ZERO_GPU="true", ZEROGPU_STANDIN_LOG=str(folder / "gpu_calls.jsonl"),
               HF_HUB_OFFLINE="1", PYTHONPATH=os.pathsep.join([str(ROOT / "tests" / "zerogpu_standin"), str(ROOT)]))
    output = open(folder / "server.log", "w")
    # --allow-training: a ZeroGPU Space is locked, and its operator lets visitors run the training step here
    process = subprocess.Popen([sys.executable, "app.py", "--model", "demo", "--allow-training", "--port", str(port)],
                               cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT)
    yield process, port, folder, time.monotonic()
    process.terminate()
    process.wait(timeout=30)
    output.close()


@pytest.fixture(scope="module")
def zero_gpu_server(zero_gpu_started):
    """The started server once it serves: (client, process, the stand-in's log of GPU calls)."""
    process, port, folder, started = zero_gpu_started
    deadline = started + 180
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"the ZeroGPU-mode server did not start: {(folder / 'server.log').read_text()[-2000:]}")
            time.sleep(0.2)
    return Client(f"http://127.0.0.1:{port}/", verbose=False), process, folder / "gpu_calls.jsonl"


def gpu_calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


# the module's server starts meanwhile: the two processes start side by side on two cores, not one after the other
@pytest.mark.usefixtures("zero_gpu_started")
def test_the_stand_in_is_the_spaces_package_the_app_imports():
    env = dict(os.environ, SPACES_ZERO_GPU="true",
               PYTHONPATH=os.pathsep.join([str(ROOT / "tests" / "zerogpu_standin"), str(ROOT)]))
    probe = subprocess.run([sys.executable, "-c", "import app; from page import zerogpu; "
                            "print(zerogpu.spaces.__file__, zerogpu.ZERO_GPU, app.context.lock_profile, "
                            "app.context.session.loaded is not None)"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr[-2000:]
    path, zero_gpu, locked, loaded = probe.stdout.split()
    assert "zerogpu_standin" in path and zero_gpu == "True" and locked == "True"
    assert loaded == "True"  # imported in ZeroGPU mode, the model is loaded at import, before any worker forks


def test_ask_runs_in_a_forked_gpu_worker_and_answers_right(zero_gpu_server):
    client, server, log = zero_gpu_server
    example = json.loads((SAMPLES / "examples.json").read_text())[0]
    *_, readout = client.predict([handle_file(str(SAMPLES / example["file"]))], "", example["question"], 3,
                                 api_name="/ask")
    assert readout["answers"][0]["text"].strip() == example["answer"]
    assert readout["model"] == "demo" and readout["windows"] >= 1
    calls = [call for call in gpu_calls(log) if call["function"] == "answer_on_gpu"]
    assert calls and calls[-1]["outcome"] == "ok"
    assert calls[-1]["worker_pid"] not in (calls[-1]["server_pid"], server.pid) and calls[-1]["server_pid"] == server.pid


def test_the_best_answer_so_far_comes_back_from_the_gpu_worker_as_it_reads(zero_gpu_server):
    """Issue 50 item 2 under ZeroGPU: the GPU function yields each best answer so far from its forked worker, and
    /ask streams them as provisional outputs before the final one, as off ZeroGPU."""
    client, _, log = zero_gpu_server
    pasted = " ".join(f"Sentence {n} tells of the colour of Zorbin and of nothing else here." for n in range(900))
    job = client.submit([], pasted, "What is the colour of Zorbin?", 1, "full", api_name="/ask")
    final = job.result(timeout=300)
    provisional = [output[-1] for output in job.outputs()[:-1] if output[-1] and output[-1].get("provisional")]
    assert provisional, [output[-1] for output in job.outputs()]
    reads = [p["windows_read"] for p in provisional]
    assert reads == sorted(reads) and all(p["windows_total"] == final[-1]["windows"] for p in provisional)
    assert final[-1].get("provisional") is None and final[-1]["answers"]
    call = [call for call in gpu_calls(log) if call["function"] == "answer_on_gpu"][-1]
    # each best so far, then the readout; the page may skip a best so far that a newer one overtook on its way
    assert call["outcome"] == "ok" and 1 <= len(reads) <= call["yields"] - 1


def test_the_gpu_duration_grows_with_the_request(zero_gpu_server):
    client, _, log = zero_gpu_server
    for words in (200, 40_000):
        text = "The tide of Harrowgate is 4102. " + "Nothing else happened in the harbour that day. " * (words // 8)
        *_, readout = client.predict([], text, "What is the tide of Harrowgate?", 1, api_name="/ask")
        assert readout["answers"]
    short, long = [call["duration_s"] for call in gpu_calls(log) if call["function"] == "answer_on_gpu"][-2:]
    assert 0 < short < long


def test_a_bad_upload_is_refused_before_the_gpu_function(zero_gpu_server, tmp_path):
    client, _, log = zero_gpu_server
    before = len(gpu_calls(log))
    empty = tmp_path / "empty.txt"
    empty.write_text("   \n")
    with pytest.raises(Exception, match="only whitespace"):
        client.predict([handle_file(str(empty))], "", "What is it?", 3, api_name="/ask")
    assert len(gpu_calls(log)) == before  # no GPU time spent on it


def test_errors_inside_the_gpu_worker_reach_the_visitor_as_they_are(zero_gpu_server):
    client, _, _ = zero_gpu_server
    with pytest.raises(Exception, match="empty"):
        client.predict([], "The tide of Harrowgate is 4102.", "   ", 3, api_name="/ask")


def test_the_training_step_runs_in_a_forked_gpu_worker(zero_gpu_server):
    client, server, log = zero_gpu_server
    table, summary = client.predict(128, api_name="/training_step")
    assert len(table["data"]) >= 2 and "checkpointing" in summary
    calls = [call for call in gpu_calls(log) if call["function"] == "training_step_on_gpu"]
    assert calls and calls[-1]["outcome"] == "ok" and calls[-1]["worker_pid"] != server.pid


def test_the_profile_is_fixed_under_zero_gpu(zero_gpu_server):
    client, _, _ = zero_gpu_server
    with pytest.raises(Exception, match="fixes the model and profile"):
        client.predict("baseline-fp32", "demo", [], api_name="/load_profile")
