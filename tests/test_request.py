"""One request's steps in order (longqa/request.py) with the tiny model: read at the door before the model loads,
planned once, its turns taken in the lane, answered with its listeners; a visitor past its share refused before its
documents are read; a stop from the turn on that leaves the reading alone; where the answer runs handed the plan;
the best answer so far yielded after each batch, and a request closed at a yield reading no further."""

from __future__ import annotations

import threading

import pytest

from longqa.request import ANSWERING, PLANNING, READING, request_steps, run_request
from longqa.serving.lane import LaneBusyError, LaneTurns, ModelLane
from longqa.session import ReadRequest, Session
from longqa_core.documents import from_text
from longqa_core.errors import Cancelled
from longqa_core.limits import validate_request

TEXT = " ".join(f"Line {n} says that the colour of Zorbin is teal, and nothing more." for n in range(120))
QUESTION = "What is the colour of Zorbin?"


class CountingSession(Session):
    """The embedded session, counting its plans and answers (`ask` reads `ask_steps` too)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.plans = self.asks = 0

    def plan(self, *args, **kwargs):
        self.plans += 1
        return super().plan(*args, **kwargs)

    def ask_steps(self, *args, **kwargs):
        self.asks += 1
        return super().ask_steps(*args, **kwargs)


def reader(steps: list):
    def read() -> ReadRequest:
        steps.append("read")
        documents = [from_text(TEXT)]
        return ReadRequest(documents, validate_request(documents, QUESTION), 0.25)
    return read


@pytest.mark.slow
def test_a_request_reads_then_loads_then_plans_once_then_answers_in_its_turn(tiny_model_dir):
    session, steps, heard = CountingSession(), [], []
    lane = ModelLane(capacity=1)

    def load() -> None:
        steps.append("load")
        session.load(str(tiny_model_dir), "cpu")

    answered = run_request(session, reader(steps), "full", turns=LaneTurns(lane, ("session:a",)), load=load,
                           on_step=lambda step, plan: steps.append((step, plan is not None)),
                           on_window_progress=lambda state: heard.append(state.windows_done),
                           on_candidate=lambda best: heard.append(best), max_seq_len=256, doc_stride=64, top_k=2)
    assert steps == [(READING, False), "read", "load", (PLANNING, False), (ANSWERING, True)]
    assert (session.plans, session.asks) == (1, 1)
    result = answered.readout.result
    assert result.answers and len(result.answers) <= 2 and result.latency_s["extract"] == 0.25
    assert answered.plan.settings.max_seq_len == 256 and answered.plan.overrides["top_k"] == 2
    assert answered.read.documents[0].text == TEXT and answered.readout.queue is not None
    progress = [h for h in heard if isinstance(h, int)]
    candidates = [h for h in heard if not isinstance(h, int)]
    assert result.windows > 1 and progress[-1] == result.windows
    assert candidates and candidates[-1].windows_read == result.windows  # the best so far after the last batch
    assert lane.waiting() == 0 and not lane.is_busy(), "the request left the lane"


@pytest.mark.slow
def test_a_loaded_model_is_not_loaded_again_and_without_a_lane_there_is_no_wait(tiny_model_dir):
    session = CountingSession()
    session.load(str(tiny_model_dir), "cpu")
    loads = session.loads
    answered = run_request(session, reader([]), "full", load=lambda: pytest.fail("loaded again"))
    assert session.loads == loads and answered.readout.queue is None and answered.readout.result.answers


@pytest.mark.slow
def test_a_visitor_past_its_share_is_refused_before_its_documents_are_read(tiny_model_dir):
    session = CountingSession()
    session.load(str(tiny_model_dir), "cpu")
    lane, steps = ModelLane(per_visitor=1), []
    with lane.door(("session:a",)):
        with pytest.raises(LaneBusyError):
            run_request(session, reader(steps), "full", turns=LaneTurns(lane, ("session:a",)))
    assert steps == [] and session.plans == 0


@pytest.mark.slow
def test_a_stop_from_the_turn_on_ends_the_answer_but_not_the_reading(tiny_model_dir):
    session = CountingSession()
    session.load(str(tiny_model_dir), "cpu")
    pressed = threading.Event()
    pressed.set()  # already pressed: the reading and the plan go on, the answer does not begin its first batch
    steps = []
    with pytest.raises(Cancelled):
        run_request(session, reader(steps), "full", turns=LaneTurns(ModelLane()), stop_from_turn=pressed,
                    max_seq_len=256, doc_stride=64)
    assert steps == ["read"] and session.plans == 1


class ListenerError(Exception):
    pass


@pytest.mark.slow
@pytest.mark.parametrize("failing", ["candidate", "stop"])
def test_a_listener_that_raises_or_a_stop_leaves_the_lane_and_the_sessions_count_at_once(tiny_model_dir, failing):
    """Read through callbacks (`batching.drain`): the steps are closed as the error passes, not when the garbage
    collector finds the traceback, so the next visitor's turn and a waiting load go on."""
    session = CountingSession()
    session.load(str(tiny_model_dir), "cpu")
    lane = ModelLane(capacity=1)

    def on_candidate(best):
        raise ListenerError("the listener failed")

    listeners = ({"on_candidate": on_candidate} if failing == "candidate"
                 else {"should_stop": lambda: session.asks > 0})
    with pytest.raises(ListenerError if failing == "candidate" else Cancelled) as raised:
        run_request(session, reader([]), "full", turns=LaneTurns(lane, ("session:a",)), max_seq_len=256,
                    doc_stride=64, **listeners)
    assert raised.value is not None  # the traceback (and with it the steps' frames) still held here
    assert not lane.is_busy() and lane.waiting() == 0
    assert session._asks_in_progress == 0


def test_where_the_answer_runs_is_handed_the_plan_its_reading_time_and_its_stop(tiny_model_dir):
    session = CountingSession()
    session.load(str(tiny_model_dir), "cpu")
    handed = []

    def elsewhere(plan, extract_s, gate, should_stop):
        handed.append((plan, extract_s, gate, should_stop()))
        return (yield from session.ask_steps(plan, extract_s=extract_s, gate=gate, should_stop=should_stop))

    answered = run_request(session, reader([]), "full", turns=LaneTurns(ModelLane(), whole=True),
                           should_stop=lambda: False, stop_from_turn=lambda: False, answer=elsewhere)
    (plan, extract_s, gate, stopped), = handed
    assert plan is answered.plan and extract_s == 0.25 and gate is None and stopped is False  # whole: no gate
    assert session.asks == 1 and answered.readout.queue is not None


class CountingRunner:
    """A loaded model's runner, counting its batches."""

    def __init__(self, runner):
        self.runner, self.devices, self.batches = runner, runner.devices, 0

    def __call__(self, batch):
        self.batches += 1
        return self.runner(batch)


@pytest.mark.slow
def test_the_steps_yield_the_best_so_far_after_each_batch_then_end_with_the_answer(tiny_model_dir):
    session = CountingSession()
    session.load(str(tiny_model_dir), "cpu")
    steps = request_steps(session, reader([]), "full", turns=LaneTurns(ModelLane()), max_seq_len=128, doc_stride=32)
    seen = []
    while True:
        try:
            seen.append(next(steps))
        except StopIteration as done:
            answered = done.value
            break
    reads = [best.windows_read for best in seen]
    total = answered.readout.result.windows
    assert len(seen) >= 2 and reads == sorted(reads) and reads[-1] == total
    assert all(best.windows_total == total for best in seen)


@pytest.mark.slow
def test_closed_at_a_yield_the_read_goes_no_further_and_leaves_the_lane(tiny_model_dir):
    session = CountingSession()
    session.load(str(tiny_model_dir), "cpu")
    counting = session.loaded.runner = CountingRunner(session.loaded.runner)
    lane = ModelLane()
    steps = request_steps(session, reader([]), "full", turns=LaneTurns(lane, ("session:a",)), max_seq_len=128,
                          doc_stride=32)
    first = next(steps)
    batches = counting.batches
    steps.close()
    assert first.windows_read < first.windows_total and counting.batches == batches
    assert lane.waiting() == 0 and not lane.is_busy() and session._asks_in_progress == 0
    session.load(str(tiny_model_dir), "cpu", force=True)  # a load does not wait for the closed read
