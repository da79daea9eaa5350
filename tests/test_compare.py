"""Comparing profiles (longqa/compare.py) with the tiny model: each profile loaded afresh and asked the same
question, rows with ratios to the first, refusals before any load, Stop between steps, the previous profile loaded
back; and the request's own memory above the loaded model's baseline."""

from __future__ import annotations

import threading

import pytest

from longqa.backend import Selection
from longqa.compare import ProfileChoice, choices_from, compare_profiles, ratio
from training.demo_task import make_example
from longqa.readout import RequestMemory
from longqa.session import Session
from longqa_core.documents import from_text
from longqa_core.errors import Cancelled, InputError, ProfileError
from longqa_core.telemetry import DeviceMemory, MemoryReadout, measure


@pytest.fixture()
def session(tiny_model_dir):
    backend = Session()
    backend.load(str(tiny_model_dir), backend.runnable_profile("cpu"))
    return backend


@pytest.fixture(scope="module")
def request_text():
    example = make_example(3, 14_000)  # over 4,096 tokens: several windows
    return [from_text(example.text)], example.question


@pytest.mark.slow  # loads and reads the tiny model under two profiles
def test_each_profile_is_loaded_afresh_asked_and_compared_to_the_first(session, tiny_model_dir, request_text):
    documents, question = request_text
    loads_before = session.loads
    steps = []
    comparison = compare_profiles(session, str(tiny_model_dir), choices_from(["baseline-fp32", "cpu"]), documents,
                                  question, "full", on_progress=lambda fraction, message: steps.append((fraction,
                                                                                                        message)))
    assert [run.choice.name for run in comparison.runs] == ["baseline-fp32", "cpu"]
    assert [run.profile for run in comparison.runs] == ["baseline-fp32", "cpu"]
    # two fresh loads; the profile loaded before (cpu) is the last one compared, so it is not loaded again
    assert session.loads == loads_before + 2
    assert session.selection.profile == "cpu"
    first, second = comparison.runs
    assert comparison.ratios(first) == {"time": 1.0, "peak": 1.0, "request_peak": ratio(
        first.request_peak_bytes, first.request_peak_bytes), "windows_per_s": 1.0}
    assert comparison.ratios(second)["time"] == pytest.approx(second.time_s / first.time_s)
    assert comparison.same_answer(first)
    assert comparison.same_answer(second) == (second.best == first.best)
    for run in comparison.runs:
        assert run.readout.result.windows >= 2 and run.windows_per_s > 0
        assert run.peak_bytes >= run.readout.request_memory.baseline_bytes > 0
    fractions = [fraction for fraction, _ in steps]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert any("Loading" in message and "baseline-fp32" in message for _, message in steps)
    out = comparison.to_json()
    assert [row["profile"] for row in out["runs"]] == ["baseline-fp32", "cpu"]
    assert out["runs"][0]["same_answer"] is True and out["runs"][0]["ratios"]["time"] == 1.0
    assert out["runs"][1]["readout"]["profile"] == "cpu" and out["documents"] == [documents[0].name]


@pytest.mark.slow  # loads and reads the tiny model under two profiles
def test_what_was_loaded_before_is_loaded_back(session, tiny_model_dir, request_text):
    documents, question = request_text
    loads_before = session.loads
    compare_profiles(session, str(tiny_model_dir), choices_from(["baseline-fp32"]), documents, question, "full")
    assert session.loads == loads_before + 2  # the comparison's load, then cpu back
    assert session.selection == Selection(str(tiny_model_dir), "cpu") and session.profile_name == "cpu"


@pytest.mark.slow  # loads and reads the tiny model under two profiles
def test_custom_compares_the_strategies_ticked(session, tiny_model_dir, request_text):
    documents, question = request_text
    choices = choices_from(["custom", "cpu"], ["int8_dynamic"])
    assert choices[0] == ProfileChoice("custom", ("int8_dynamic",)) and choices[1].strategies == ()
    assert choices[0].label == "custom (int8_dynamic)"
    comparison = compare_profiles(session, str(tiny_model_dir), choices, documents, question, "full")
    assert comparison.runs[0].readout.strategies == ["int8_dynamic"]
    assert comparison.to_json()["runs"][0]["strategies"] == ["int8_dynamic"]


def test_a_profile_that_cannot_run_here_is_refused_before_anything_loads(session, tiny_model_dir, request_text):
    documents, question = request_text
    loads_before = session.loads
    with pytest.raises(ProfileError, match="t4-16gb|CUDA|GPU"):
        compare_profiles(session, str(tiny_model_dir), choices_from(["cpu", "t4-16gb"]), documents, question)
    assert session.loads == loads_before


@pytest.mark.parametrize("names, message", [([], "at least one"), ([" "], "at least one"),
                                            ([f"p{i}" for i in range(9)], "at most 8")])
def test_choices_are_checked(names, message):
    with pytest.raises(InputError, match=message):
        choices_from(names)


def test_choices_keep_their_order_once_each():
    assert [c.name for c in choices_from(["cpu", "baseline-fp32", "cpu"])] == ["cpu", "baseline-fp32"]


@pytest.mark.slow  # loads and reads the tiny model under two profiles
def test_stop_ends_the_comparison_and_loads_back_the_previous_profile(session, tiny_model_dir, request_text):
    documents, question = request_text
    stop = threading.Event()

    def on_progress(fraction, message):
        if message.startswith("Asking under baseline-fp32"):
            stop.set()  # during the first profile's read

    with pytest.raises(Cancelled):
        compare_profiles(session, str(tiny_model_dir), choices_from(["baseline-fp32", "custom"], ["int8_dynamic"]),
                         documents, question, "full", should_stop=stop, on_progress=on_progress)
    assert session.selection == Selection(str(tiny_model_dir), "cpu")


def test_the_request_memory_is_the_peak_above_the_baseline_before_it():
    memory = MemoryReadout(host_peak_rss_bytes=900, host_baseline_rss_bytes=600, host_rss_bytes=650)
    assert memory.host_request_peak_bytes == 300 and memory.request_peak_on("cpu") == 300
    assert RequestMemory.of(memory) == RequestMemory("cpu", "RSS", 900, 600, 300)
    gpu = MemoryReadout(peak_allocated_bytes=50, devices=[DeviceMemory(0, "T4", 30, 40, None, None, 10),
                                                          DeviceMemory(1, "T4", 20, 40, None, None, 15)])
    assert gpu.request_peak_on("cuda:1") == 5 and gpu.baseline_on("cuda:0") == 10
    assert RequestMemory.of(gpu) == RequestMemory("cuda", "torch allocated", 50, 25, 25)
    assert MemoryReadout().host_request_peak_bytes is None
    assert set(memory.to_json()) >= {"host_baseline_rss_bytes", "host_request_peak_bytes", "host_peak_rss_bytes"}


def test_a_measured_request_counts_what_it_allocates_above_its_baseline():
    import torch

    with measure() as measurement:
        block = torch.ones(64 * 1024 * 1024 // 4)  # 64 MiB, touched
        del block
    memory = measurement.memory
    assert memory.host_baseline_rss_bytes > 0
    assert memory.host_request_peak_bytes >= 60 * 1024 * 1024
    assert memory.host_peak_rss_bytes >= memory.host_baseline_rss_bytes + memory.host_request_peak_bytes - 1


def test_ratios_are_none_where_a_figure_is_unknown():
    assert ratio(None, 2.0) is None and ratio(1.0, None) is None and ratio(1.0, 0) is None
    assert ratio(3.0, 2.0) == 1.5


@pytest.fixture(scope="module")
def middle_checkpoint(tmp_path_factory):
    """A random Longformer QA model larger than the tiny one (hidden 256, 4 layers, window 256), so that a request's
    own memory is tens of MB: what earlier requests leave behind shows."""
    import torch
    from transformers import LongformerForQuestionAnswering

    from tests.tiny import build_tokenizer, tiny_config

    out = tmp_path_factory.mktemp("longqa-middle")
    tokenizer = build_tokenizer(out)
    torch.manual_seed(0)
    config = tiny_config(len(tokenizer), hidden=256, layers=4, heads=8, ffn=1024, window=256)
    LongformerForQuestionAnswering(config).eval().save_pretrained(out)
    return out


@pytest.mark.slow  # eight loads and reads of a small model
def test_a_request_measures_the_same_after_switching_profiles(middle_checkpoint):
    """The same request under the same profile, switched back and forth with another: the process's peak within 10 %
    from one switch to the next (it grew by 15-28 % before the heap was handed back: docs/memory-switching.md; in the
    whole suite, after other tests in the process, it has moved by 5.6 %: 1.61 to 1.70 GB at commit 43315a0), and
    the request's own peak above the baseline counts what it allocates (about 40-60 MB here; before the trims it
    reused what earlier requests had freed and showed 0-1 MB). A profile's runs before the other profile first ran
    are left out: the first request of a precision pays one-time initialisation, which stays in the process. The own
    peak is not held to 5 %: at this size it moves by up to a third with what ran before in the process."""
    example = make_example(11, 14_000)
    documents = [from_text(example.text)]
    session = Session()
    names = ["cpu", "baseline-fp32", "cpu", "baseline-fp32", "cpu", "baseline-fp32"]
    compare_profiles(session, str(middle_checkpoint), [ProfileChoice("cpu")], documents, example.question, "full")
    comparison = compare_profiles(session, str(middle_checkpoint), [ProfileChoice(name) for name in names],
                                  documents, example.question, "full")
    for name in ("cpu", "baseline-fp32"):
        runs = [run for run in comparison.runs if run.choice.name == name][1:]  # once the other one has run
        peaks = [run.peak_bytes for run in runs]
        own = [run.request_peak_bytes for run in runs]
        assert max(peaks) / min(peaks) < 1.10, f"{name}: process peaks {peaks}, own peaks {own}"
        assert min(own) > 20e6, f"{name}: own peaks {own}, process peaks {peaks}"
