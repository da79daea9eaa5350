"""The measuring tool that builds a band kernel as it was at a git revision and swaps it in (bench/
kernel_revisions.py): the fp32 kernel, which runs on every x86-64 machine the suite runs on."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import torch

from bench.kernel_revisions import ROOT, computing_with, kernel_at
from strategies import band_kernel
from tests.test_band_kernel import random_case

FP32 = band_kernel.BUILDS[torch.float32]

pytestmark = pytest.mark.skipif(
    shutil.which(band_kernel.compiler_name()) is None or band_kernel.kernel(torch.float32) is None
    or subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True).returncode != 0,
    reason="needs a C compiler, the fp32 kernel and a git checkout")


def test_the_kernel_at_head_computes_what_todays_does_and_is_swapped_in_then_out():
    old = kernel_at("HEAD", FP32)
    assert old.spec.name == "AVX2 at HEAD" and old.path != band_kernel.kernel(torch.float32).path
    case = random_case(1, 96, 2, 16, 3, dtype=torch.float32)
    assert torch.equal(old(*case, 8), band_kernel.kernel(torch.float32)(*case, 8))
    with computing_with(old):
        assert band_kernel.kernel(torch.float32) is old
        assert torch.equal(band_kernel.band_attention(*case, 8), old(*case, 8))
    assert band_kernel.kernel(torch.float32) is not old


def test_a_revision_without_the_file_is_an_error():
    first = subprocess.run(["git", "rev-list", "--max-parents=0", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()[0]  # the repository's first commit: no kernel yet
    with pytest.raises(subprocess.CalledProcessError):
        kernel_at(first, FP32)
