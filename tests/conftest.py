"""Shared fixtures: a tiny Longformer QA model and tokenizer built locally once per session (no downloads)."""

from __future__ import annotations

import contextlib
import gc
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from bench.browser import launch_chromium  # noqa: E402
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


# torch's own count for this machine; the tests run at one (below). Under `-n 2` a worker inherits the controller's
# OMP_NUM_THREADS=1 (below) before it imports torch, so the first process's count is handed down beside it.
TORCH_THREADS = int(os.environ.setdefault("LONGQA_TEST_TORCH_THREADS", str(torch.get_num_threads())))
torch.set_num_threads(1)
# The processes the tests start (servers, the CLI, bench workers) run torch at one thread too, unless a test gives
# them a count. The tests check what they do, not how fast: on 2 cores beside another worker and a browser, a
# second thread mostly waits for a descheduled one (measured on kind B with the crowd and Ray files on two workers:
# 17 % less CPU and 13 % less time at one thread, one pair of runs:
# docs/results/suite-one-thread-crowd-ray-1c7034c.txt). Ray's replicas inherit it too (Ray sets its own count only
# where none is set; one CPU each gives one anyway).
# The run's own setting, handed down (tests/test_band_kernel.py starts a process as the run was started).
os.environ.setdefault("LONGQA_TEST_OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", ""))
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True)
def one_torch_thread(request):
    """Torch runs one thread in the test process, except in tests marked `torch_threads` (code that splits its work
    by torch.get_num_threads(), as the band kernel does). The tests' models are tiny: their operations gain nothing
    from a second thread, and beside a served page, a replica or any other process on 2 cores every parallel region
    waits for a descheduled thread. Processes the tests start run at one too (OMP_NUM_THREADS above). Set once
    here, so that the fixtures built before a test run at one too."""
    if request.node.get_closest_marker("torch_threads"):
        torch.set_num_threads(TORCH_THREADS)
        yield
        torch.set_num_threads(1)
    else:
        yield


@pytest.fixture(autouse=True)
def simulated_cpu_kind(request, monkeypatch):
    if _SIMULATED_CPU_BF16 is not None and request.path.name != "test_hardware.py":
        import strategies.hardware

        monkeypatch.setattr(strategies.hardware, "is_cpu_bf16_native", lambda: _SIMULATED_CPU_BF16)
    yield


def pytest_configure(config):
    config.addinivalue_line("markers", "requires_cuda: needs a CUDA GPU (skipped without one)")
    config.addinivalue_line("markers", "requires_cpu_bf16: runs bf16 oneDNN kernels, which a CPU without AVX-512 "
                                       "(kind B) cannot (skipped there; the logic is tested for both kinds elsewhere)")
    config.addinivalue_line("markers", "browser: drives Debian's chromium with Playwright")
    config.addinivalue_line("markers", "torch_threads: runs at torch's own thread count, not the tests' one thread "
                                       "(the code under test splits its work by torch.get_num_threads())")


def pytest_collection_finish(session):
    """Freeze what collection made (torch, transformers and gradio as imported, the test modules, the items): it
    lives the whole run, and every full collection would walk it again. The loader collects after each load and
    the engine after a refused request, so about 0.3 s a load went to walking these million objects; frozen, a
    collection walks only what the tests made (the fast subset takes about a third less time)."""
    gc.collect()
    gc.freeze()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under `-n N` (pytest-xdist; the README's command runs `-n 2`): a file's tests in one worker, so that its
    module fixtures (a served page, Ray's replicas) start once, not once a worker. Files go out most tests first
    (xdist's order); the longest files first instead took 27 min against 24 on kind B (docs/results/README.md, the
    test suite)."""
    from xdist.scheduler import LoadFileScheduling

    return LoadFileScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    skips = {}
    if not torch.cuda.is_available():
        skips["requires_cuda"] = pytest.mark.skip(reason="needs a CUDA GPU")
    if not _host_runs_bf16_kernels():
        skips["requires_cpu_bf16"] = pytest.mark.skip(reason="needs a CPU whose oneDNN runs bf16 kernels (AVX-512)")
    for item in items:
        for marker, skip in skips.items():
            if marker in item.keywords:
                item.add_marker(skip)


def _host_runs_bf16_kernels() -> bool:
    """Whether this host's oneDNN runs bf16 matmuls (the real CPU, whatever LONGQA_TEST_CPU_KIND simulates)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except Exception:
        return False


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
    from training.demo_task import make_example

    example = make_example(7, 12_000)
    path = tmp_path_factory.mktemp("documents") / "long_report.txt"
    path.write_text(example.text, encoding="utf-8")
    return path, example


class Clock:
    """A clock a test moves by hand (`clock.now += 60`), for the code that takes one: a monotonic reading."""

    def __init__(self, now: float = 0.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def browser():
    """Headless chromium for a test module's pages (each test opens its own page)."""
    from playwright.sync_api import sync_playwright  # deferred: a test-only dependency (requirements-dev.txt)

    with sync_playwright() as playwright:
        launched = launch_chromium(playwright)
        yield launched
        launched.close()


@pytest.fixture()
def ctx(tiny_model_dir):
    """The page's context with the tiny model loaded on the `cpu` profile (a test's own, not shared)."""
    from longqa.session import Session
    from page.context import make_context  # deferred: most tests never build the page
    from page.asking import ensure_loaded

    # no time limit on a comparison (the tests of the limit set it): a busy machine stretches a comparison's reads
    # past the default 10 s (three comparison tests failed so, beside two busy loops)
    context = make_context(Session(), models=[str(tiny_model_dir)], default_model=str(tiny_model_dir),
                           default_profile="cpu", max_compare_s=None)
    ensure_loaded(context)
    return context


@contextlib.contextmanager
def served_page(session, model_dir, launch, models: list[str] | None = None):
    """The page served on loopback with `model_dir` loaded on the `cpu` profile (`launch(ctx)` gives the page and its
    address): yields (context, address) and closes the page after."""
    from page.context import make_context  # deferred: most tests never build the page
    from page.asking import ensure_loaded

    ctx = make_context(session, models=models or [str(model_dir)], default_model=str(model_dir),
                       default_profile="cpu", max_compare_s=None)  # as in `ctx`: the limit's tests set their own
    ensure_loaded(ctx)
    demo, url = launch(ctx)
    try:
        yield ctx, url
    finally:
        demo.close()
