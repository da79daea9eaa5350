"""Shared fixtures: a tiny Longformer QA model and tokenizer built locally once per session (no downloads)."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from strategies import band_kernel  # noqa: E402
from tests.tiny import tiny_checkpoint  # noqa: E402

# LONGQA_TEST_CPU_KIND=avx2 (or avx512-bf16) makes this host detect as the other CPU kind, to find tests that
# depend on the host's CPU without a second machine. Tests whose logic depends on the kind inject a Hardware;
# tests/test_hardware.py tests the detection itself and keeps the real one.
_SIMULATED_CPU_BF16 = {"avx2": False, "avx512-bf16": True}.get(os.environ.get("LONGQA_TEST_CPU_KIND", ""))
if _SIMULATED_CPU_BF16 is False:  # nor the bf16 band kernel's instructions, from collection on (the fp32 kernel's stay)
    _real_cpu_flags = band_kernel.cpu_flags
    _FLAGS_WITHOUT_BF16 = _real_cpu_flags() - band_kernel.BUILDS[torch.bfloat16].cpu_flags
    band_kernel.cpu_flags = lambda cpuinfo=None: _FLAGS_WITHOUT_BF16 if cpuinfo is None else _real_cpu_flags(cpuinfo)


@pytest.fixture(autouse=True)
def simulated_cpu_kind(request, monkeypatch):
    if _SIMULATED_CPU_BF16 is not None and request.path.name != "test_hardware.py":
        import strategies.hardware

        monkeypatch.setattr(strategies.hardware, "is_cpu_bf16_native", lambda: _SIMULATED_CPU_BF16)
    yield


def pytest_configure(config):
    config.addinivalue_line("markers", "requires_cuda: needs a CUDA GPU (skipped without one)")
    config.addinivalue_line("markers", "browser: drives Debian's chromium with Playwright")


# Tests that take seconds each on 2 cores (real models over long documents, real processes and servers, reference
# pipeline parity over many windows), besides the modules and tests marked `slow` where they are defined.
# `python -m pytest -m "not slow"` leaves them out for development; the README's test command runs everything.
SLOW_TESTS = {
    "tests/test_bench.py::test_bench_numbers_make_sense",
    "tests/test_bench.py::test_baseline_agrees_with_itself",
    "tests/test_bench.py::test_checkpointing_lowers_the_training_step_peak",
    "tests/test_bench.py::test_bench_writes_markdown_and_chart",
    "tests/test_engine.py::test_a_run_records_the_models_throughput",
    "tests/test_app.py::test_training_step_accordion_shows_both_peaks_and_times",
    "tests/test_app.py::test_examples_are_answered_by_the_bundled_demo_model",
    "tests/test_app_api.py::test_a_cancelled_request_leaves_the_model_usable",
    "tests/test_app_api.py::test_a_client_that_disconnects_mid_answer_leaves_the_model_usable",
    "tests/test_app_api.py::test_a_profile_switch_waits_for_the_answer_in_flight",
    "tests/test_app_api.py::test_the_queue_is_bounded_and_refuses_the_overflow_clearly",
    "tests/test_bench.py::test_bench_writes_every_row_with_every_field",
    "tests/test_cli.py::test_a_real_run_prints_only_our_own_notes_on_stderr",
    "tests/test_cli.py::test_ask_json_has_answers_and_readouts",
    "tests/test_cli.py::test_ask_prints_answers",
    "tests/test_cli.py::test_no_traceback_from_a_real_process",
    "tests/test_demo_model.py::test_answers_a_fact_that_straddles_a_window_boundary",
    "tests/test_demo_model.py::test_answers_held_out_documents",
    "tests/test_engine.py::test_answers_point_into_the_right_document",
    "tests/test_engine.py::test_no_answer_is_empty_blank_punctuation_or_part_of_a_word",
    "tests/test_engine.py::test_null_answer_matches_the_reference_pipeline",
    "tests/test_engine.py::test_out_of_memory_halves_the_batch_and_keeps_finished_windows",
    "tests/test_engine.py::test_progress_reports_windows_done_left_and_time_left",
    "tests/test_engine.py::test_run_windows_reports_no_eta_before_any_throughput_is_known",
    "tests/test_engine.py::test_should_stop_cancels_between_batches_and_the_model_stays_usable",
    "tests/test_engine.py::test_top_answers_match_the_reference_pipeline",
    "tests/test_engine.py::test_word_aligned_answers_match_the_reference_pipeline",
    "tests/test_fast_attention.py::test_half_precision_stays_within_eagers_own_rounding",
    "tests/test_fast_attention.py::test_top_answers_identical_on_the_base_architecture",
    "tests/test_prepacked_linear.py::test_the_training_step_runs_on_a_prepacked_profile",
    "tests/test_load.py::test_twenty_concurrent_calls_all_complete_with_correct_answers",
    "tests/test_loader.py::test_bitsandbytes_on_a_cpu_only_machine_really_quantizes",
    "tests/test_session.py::test_load_ask_and_the_readout_has_every_field",
    "tests/test_session.py::test_the_readout_sets_the_planners_prediction_beside_the_measured_peak",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.split("[")[0] in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "requires_cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_model_dir():
    return tiny_checkpoint()


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir):
    from transformers import LongformerForQuestionAnswering

    return LongformerForQuestionAnswering.from_pretrained(tiny_model_dir).eval()


@pytest.fixture(scope="session")
def long_document(tmp_path_factory):
    """(path, example): a .txt of about 12,000 characters, over 4,096 tokens with the tiny tokenizer."""
    from longqa.demo_model.demo_task import make_example

    example = make_example(7, 12_000)
    path = tmp_path_factory.mktemp("documents") / "long_report.txt"
    path.write_text(example.text, encoding="utf-8")
    return path, example
