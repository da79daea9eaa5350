"""Ray Serve: the page's answers come from 2 CPU replicas of the demo model on a local Ray instance, loopback only.
Twenty concurrent /ask calls equal to the same requests alone, both replicas answering; a replica killed mid-load
loses no answer; a profile switch under load reaches every replica without mixing; a profile the replicas cannot
load is reported on the page with its reason. Windows of concurrent requests share forward passes unchanged."""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import replace

import psutil
import pytest
import torch
from gradio_client import Client

from page.context import make_context
from page.layout import build_blocks
from page import asking
from evals import eval_task
from longqa.backend import Backend
from bench.crowd.load_check import requests_for, run_alone, run_concurrent, run_load, summarize
from longqa.serving.ray_replicas import RaySession, check_room, deployment_failure, replica_resources, wait_steps
from longqa_core import batching
from longqa_core.documents import Document
from longqa_core.errors import Cancelled, ModelLoadError
from strategies.hardware import Gpu, detect_hardware

# The page's machine claims a T4 the replicas do not have: the "bad profile on that node" of a real cluster,
# whose head node (the page) has a GPU and whose workers do not.
PAGE_HARDWARE = replace(detect_hardware(), gpus=(Gpu(0, "Tesla T4", 15_600_000_000, (7, 5)),), cuda_available=True)
# How long Ray Serve may take to bring a killed replica back (its health check, a new process, the model loaded):
# 12 s beside two busy loops once the replicas ran at the page's priority (182 s at Ray's nice 15).
RESTART_LIMIT_S = 120


@pytest.fixture(scope="module")
def served():
    """The page over a RaySession of 2 replicas on a local Ray instance (the slow tests: a few minutes)."""
    session = RaySession(replicas=2, hardware=PAGE_HARDWARE)
    try:
        # no time limit on a comparison here: its reads on two replicas of a loaded CI machine may pass the default
        # 10 s, and the comparison's test is about redeploying, not about the limit (tests/test_compare_panel.py)
        ctx = make_context(session, models=["demo"], default_model="demo", default_profile="cpu", max_compare_s=None)
        assert isinstance(session, Backend)
        asking.ensure_loaded(ctx)
        demo = build_blocks(ctx)
        _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True)
        yield url, session
        demo.close()
    finally:
        session.close()


@pytest.fixture()
def on_cpu(served):
    """`served` with the `cpu` profile loaded: a test that switches profiles leaves its last one, and the next test
    that needs `cpu` loads it back (nothing to do where it is loaded), so no test redeploys only to tidy up."""
    _, session = served
    session.load("demo", session.runnable_profile("cpu"))
    return served


def pid_of(replica: str) -> int:
    return int(replica.rsplit(":", 1)[1])


@pytest.mark.slow
def test_twenty_concurrent_asks_equal_the_same_requests_alone_and_both_replicas_answer(on_cpu):
    url, _ = on_cpu
    results = run_load(url, n_calls=20, timeout_s=300)
    summary = summarize(results)
    assert summary["completed"] == 20, summary["errors"]
    assert summary["correct"] == 20, [(r.expected, r.answer) for r in results if r.answer != r.expected]
    assert summary["same_as_alone"] == 20, [(r.alone, r.answer, r.span) for r in results]
    assert summary["replicas_answering"] == 2, {r.replica for r in results}
    assert all(r.readout["profile"] == "cpu" and r.readout["model"] == "demo" for r in results)
    # The replicas answer at the page's priority, not at Ray's nice 15, which any busy process starves.
    assert {psutil.Process(pid_of(r.replica)).nice() for r in results} == {os.nice(0)}


@pytest.mark.slow
def test_the_page_sees_the_windows_a_replica_reads_and_the_reading_mode_reaches_it(on_cpu):
    """Progress comes from the replica answering (through the session's progress board), as on the embedded
    engine; `reading` reaches the replica's engine."""
    _, session = on_cpu
    item = eval_task.make_document(21, 20_000)
    documents = [Document("report.txt", item.text)]
    seen = []
    readout = session.ask(session.plan(documents, item.question, "full"), on_window_progress=seen.append).to_json()
    assert readout["reading"]["mode"] == "full" and readout["windows"] >= 4
    assert seen, "no progress reached the page"
    assert all(s.windows_total == readout["windows"] and 0 <= s.windows_done <= s.windows_total for s in seen)
    assert [s.windows_done for s in seen] == sorted(s.windows_done for s in seen)
    guided = session.ask(session.plan(documents, item.question, "guided"))
    assert guided.result.reading.requested == "guided" and guided.replica
    assert session.loaded.batch_state.window_s > 0  # the page's record learned the replicas' forward time


@pytest.mark.slow
def test_the_best_answer_so_far_streams_from_the_replica_to_the_page_and_the_api(on_cpu):
    """Issue 50 item 2 on Ray Serve: the replica posts each batch's best so far to the session's board, the session
    hands each new one to `on_candidate` (never judged, windows read growing), and /ask through gradio_client
    streams them as provisional outputs before the final one, as when embedded."""
    url, session = on_cpu
    item = eval_task.make_document(23, 40_000)
    documents = [Document("report.txt", item.text)]
    heard = []
    readout = session.ask(session.plan(documents, item.question, "full"), on_candidate=heard.append)
    windows = readout.to_json()["windows"]
    assert windows >= 6 and heard, "no best answer so far reached the page"
    assert all(c.windows_total == windows and 0 < c.windows_read <= windows for c in heard)
    assert [c.windows_read for c in heard] == sorted(c.windows_read for c in heard)
    assert len({id(c) for c in heard}) == len(heard) and all(a != b for a, b in zip(heard, heard[1:]))
    job = Client(url, verbose=False).submit([], item.text, item.question, 1, "full", api_name="/ask")
    final = job.result(timeout=300)
    provisional = [output[-1] for output in job.outputs()[:-1] if output[-1] and output[-1].get("provisional")]
    assert provisional, [output[-1] for output in job.outputs()]
    assert all(p["windows_total"] == final[-1]["windows"] for p in provisional)
    assert final[-1].get("provisional") is None and final[-1]["answers"]


@pytest.mark.slow
def test_a_replica_killed_mid_load_loses_no_answer(on_cpu):
    url, session = on_cpu
    examples = requests_for(12, seed=11)
    expected = {e.answer for e in examples}
    replicas = {r.replica for r in run_alone(url, examples[:6], timeout_s=120) if r.ok}
    assert replicas, "no replica answered"
    victim = pid_of(sorted(replicas)[0])
    results: list = []
    worker = threading.Thread(target=lambda: results.extend(run_concurrent(url, examples, timeout_s=300)))
    worker.start()
    time.sleep(1.0)  # the calls are in flight
    os.kill(victim, signal.SIGKILL)
    worker.join(400)
    summary = summarize(results)
    assert summary["completed"] == 12, summary["errors"]
    assert {r.answer for r in results} == expected
    # Ray Serve restarts the replica: two answer again, the killed process not among them.
    began = time.monotonic()
    while time.monotonic() - began < RESTART_LIMIT_S:
        pids = session.replica_pids()
        if len(pids) == 2 and victim not in pids:
            break
        time.sleep(0.5)
    assert len(pids) == 2 and victim not in pids, f"{len(pids)} replica(s) {time.monotonic() - began:.0f} s after"
    print(f"the replica was back {time.monotonic() - began:.0f} s after the last answer")


@pytest.mark.slow
def test_a_profile_switch_under_load_reaches_every_replica_and_no_request_mixes(on_cpu):
    url, session = on_cpu
    examples = requests_for(8, seed=23)
    results: list = []
    worker = threading.Thread(target=lambda: results.extend(run_concurrent(url, examples, timeout_s=300)))
    before = session.replica_pids()
    worker.start()
    time.sleep(0.5)
    switch = Client(url, verbose=False).predict("baseline-fp32", "demo", api_name="/load_profile")
    worker.join(400)
    assert switch[-1]["profile"] == "baseline-fp32"  # the load readout
    summary = summarize(results)
    assert summary["completed"] == 8 and summary["correct"] == 8, summary["errors"]
    generations = {}
    for r in results:  # each request was answered wholly by one generation, whose profile it reports
        generations.setdefault(r.readout["generation"], set()).add(r.readout["profile"])
    assert all(len(profiles) == 1 for profiles in generations.values()), generations
    after = run_alone(url, requests_for(4, seed=29), timeout_s=120)
    assert all(r.ok and r.readout["profile"] == "baseline-fp32" for r in after)
    assert not {pid_of(r.replica) for r in after} & before  # every replica was replaced
    # left on baseline-fp32: the next test loads `cpu` back (the long request's, during its request; else `on_cpu`)


@pytest.mark.slow
def test_a_load_during_a_long_ray_request_waits_for_it_as_when_embedded(served):
    """The session waits: a load asked for while the replicas answer a request redeploys only once that request is
    answered, by the generation it began on (Ray Serve's redeploy is never left to drain it). It loads `cpu`, over
    whatever profile the test before left (the profile switch's, answering the request; else `cpu` again)."""
    _, session = served
    began_on = session.profile_name
    item = eval_task.make_document(31, 40_000)  # 20 windows: seconds of reading after the first progress
    plan = session.plan([Document("long.txt", item.text)], item.question, "full")
    generation = session.generation
    times: dict[str, float] = {}
    loader = threading.Thread(target=lambda: session.load(
        "demo", session.runnable_profile("cpu"), force=True,
        on_progress=lambda *_: times.setdefault("deploy_began", time.monotonic())))

    def on_window_progress(state) -> None:  # the request is in the replicas: load now, and hold the poll a while
        if "load_asked" not in times:
            times["load_asked"] = time.monotonic()
            times["windows_left"] = state.windows_total - state.windows_done
            loader.start()
            time.sleep(1.0)
            times["load_waiting"] = loader.is_alive() and "deploy_began" not in times

    readout = session.ask(plan, on_window_progress=on_window_progress)
    times["answered"] = time.monotonic()
    loader.join(300)
    assert "load_asked" in times, "the request ended before any progress: make its document longer"
    assert times["windows_left"] > 0  # asked while the replica was still reading
    assert times["load_waiting"]  # asked during the request, the load had not begun to redeploy
    assert times["load_asked"] < times["answered"] <= times["deploy_began"]
    assert readout.result.answers and readout.to_json()["profile"] == began_on  # the generation it began on
    assert session.generation == generation + 1 and session.profile_name == "cpu"
    after = session.ask(plan)
    assert after.generation > readout.generation and after.to_json()["profile"] == "cpu"


@pytest.mark.slow
def test_a_profile_the_replicas_cannot_load_is_reported_with_its_reason_and_the_old_one_keeps_answering(on_cpu):
    url, session = on_cpu
    client = Client(url, verbose=False)
    with pytest.raises(Exception, match="replicas could not load 'demo' with profile 't4-16gb'.*needs a CUDA GPU"):
        client.predict("t4-16gb", "demo", api_name="/load_profile")
    results = run_alone(url, requests_for(2, seed=31), timeout_s=120)
    assert all(r.ok and r.answer == r.expected and r.readout["profile"] == "cpu" for r in results)


def test_windows_of_several_requests_share_a_forward_pass_and_each_gets_its_own_logits():
    batches = [{"input_ids": torch.tensor([[0, 5, 6, 2]]), "attention_mask": torch.ones(1, 4, dtype=torch.long),
                "global_attention_mask": torch.tensor([[1, 1, 0, 0]])},
               {"input_ids": torch.tensor([[0, 7, 2], [0, 8, 2]]), "attention_mask": torch.ones(2, 3, dtype=torch.long),
                "global_attention_mask": torch.tensor([[1, 0, 0], [1, 0, 0]])}]
    merged, rows = batching.stack_batches(batches, pad_token_id=1)
    assert rows == [1, 2] and merged["input_ids"].shape == (3, 4)
    assert merged["input_ids"][1].tolist() == [0, 7, 2, 1] and merged["attention_mask"][1].tolist() == [1, 1, 1, 0]
    assert merged["global_attention_mask"][2].tolist() == [1, 0, 0, 0]
    start = torch.arange(12.0).reshape(3, 4)
    parts = batching.split_rows(start, -start, rows)
    assert [p[0].shape for p in parts] == [(1, 4), (2, 4)] and parts[1][0][1].tolist() == [8.0, 9.0, 10.0, 11.0]


def test_merged_forward_passes_give_each_request_the_logits_it_gets_alone(tiny_model_dir):
    """Padding a window to another request's length changes none of its own logits (masked tokens)."""
    from transformers import AutoTokenizer, LongformerForQuestionAnswering

    model = LongformerForQuestionAnswering.from_pretrained(tiny_model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    runner = batching.ModelRunner(model)
    short = tokenizer(["Who?"], ["Ann went home."], return_tensors="pt")
    long = tokenizer(["What?"], ["A much longer context that takes many more tokens than the other one."],
                     return_tensors="pt")
    batches = []
    for enc in (short, long):
        batch = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"],
                 "global_attention_mask": torch.zeros_like(enc["input_ids"])}
        batch["global_attention_mask"][:, 0] = 1
        batches.append(batch)
    alone = [runner(b) for b in batches]
    merged, rows = batching.stack_batches(batches, tokenizer.pad_token_id)
    together = batching.split_rows(*runner(merged), rows)
    for (s_alone, e_alone), (s_together, e_together), batch in zip(alone, together, batches):
        n = batch["input_ids"].shape[1]
        torch.testing.assert_close(s_together[:, :n], s_alone[:, :n], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(e_together[:, :n], e_alone[:, :n], atol=1e-4, rtol=1e-4)


class PendingResponse:
    """A handle call's response that answers after `polls` polls, as a DeploymentResponse does (TimeoutError)."""

    def __init__(self, polls: int):
        self.polls, self.cancelled = polls, False

    def result(self, timeout_s: float):
        self.polls -= 1
        if self.polls < 0:
            return "the readout"
        raise TimeoutError(f"no result within {timeout_s} s")

    def cancel(self) -> None:
        self.cancelled = True


def test_a_handle_call_is_awaited_with_progress_at_every_poll_and_cancelled_when_the_visitor_stops():
    polled = []
    response = PendingResponse(polls=2)
    assert batching.drain(wait_steps(response, lambda: False, lambda: polled.append(1))) == "the readout"
    assert polled == [1, 1] and not response.cancelled
    stop = threading.Event()
    response = PendingResponse(polls=5)
    with pytest.raises(Cancelled, match="The request was cancelled"):
        batching.drain(wait_steps(response, stop.is_set, stop.set))
    assert response.cancelled and response.polls == 3  # ended at the first poll after Stop


def test_a_handle_call_closed_at_a_yield_is_cancelled():
    """What a poll hears (a new best answer so far) is yielded; the request closed there (the visitor gone, the
    page's generator closed) cancels the call, so the replica ends the engine between batches."""
    response = PendingResponse(polls=5)
    steps = wait_steps(response, lambda: False, lambda: "a new best so far")
    assert next(steps) == "a new best so far" and not response.cancelled
    steps.close()
    assert response.cancelled


@pytest.mark.slow
def test_resources_one_gpu_each_where_there_are_gpus_else_the_cpus_split(monkeypatch):
    import ray

    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 16.0, "GPU": 4.0})
    assert replica_resources(2, None) == {"num_gpus": 1, "num_cpus": 1}
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
    assert replica_resources(2, None) == {"num_cpus": 1}
    assert replica_resources(1, None) == {"num_cpus": 2}
    assert replica_resources(2, 0.5) == {"num_cpus": 0.5}
    assert replica_resources(3, None) == {"num_cpus": 2 / 3}  # more replicas than CPUs: a share each
    check_room({"num_cpus": 1}, 2)
    with pytest.raises(ModelLoadError, match="3 replicas need 3 CPUs, and the Ray cluster has 2"):
        check_room({"num_cpus": 1}, 3)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 16.0, "GPU": 1.0})
    with pytest.raises(ModelLoadError, match="2 replicas need 2 GPUs, and the Ray cluster has 1"):
        check_room({"num_gpus": 1, "num_cpus": 1}, 2)


@pytest.mark.slow
def test_a_failed_deployment_is_told_by_the_last_line_of_the_replicas_traceback(monkeypatch):
    from ray import serve

    class Status:
        message = ('Traceback (most recent call last):\n  File "x.py", line 1\n'
                   "longqa_core.errors.ProfileError: Profile 't4-16gb' cannot run on this machine: needs a CUDA GPU.\n")

    class App:
        deployments = {"AnswerReplica": Status()}

    monkeypatch.setattr(serve, "status", lambda: type("S", (), {"applications": {"longqa": App()}})())
    assert deployment_failure(RuntimeError("Failed")) == ("Profile 't4-16gb' cannot run on this machine: "
                                                         "needs a CUDA GPU.")
    monkeypatch.setattr(serve, "status", lambda: (_ for _ in ()).throw(RuntimeError("no controller")))
    assert deployment_failure(RuntimeError("Deploying failed")) == "Deploying failed"


@pytest.mark.slow
def test_compare_profiles_redeploys_the_replicas_for_each_and_loads_back_the_page_profile(on_cpu):
    url, session = on_cpu
    example = requests_for(1, seed=37)[0]
    *_, comparison = Client(url, verbose=False).predict(
        [], example.text, example.question, 3, "full", "", ["baseline-fp32", "cpu"], [], api_name="/compare")
    runs = comparison["runs"]
    assert [run["profile"] for run in runs] == ["baseline-fp32", "cpu"]
    assert all(run["readout"]["replica"] and run["readout"]["generation"] for run in runs)
    assert runs[1]["same_answer"] is True and runs[0]["ratios"]["time"] == 1.0
    assert all(run["request_peak_bytes"] is not None and run["memory_measured_as"] == "RSS" for run in runs)
    assert session.profile_name == "cpu"
