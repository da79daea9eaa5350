"""A band kernel as it was at an earlier git revision, built and loaded beside today's, so that a measurement can set
the two side by side in one process (`python -m bench kernels --also REV`, `python -m bench
cpu-seconds --also REV`). A measuring tool only: the product never loads an old kernel.
"""

from __future__ import annotations

import dataclasses
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

from strategies import band_kernel

ROOT = Path(__file__).resolve().parents[2]


def kernel_at(revision: str, spec: band_kernel.KernelBuild = band_kernel.AMX_BUILD) -> band_kernel.BandKernel:
    """The variant `spec` (default: the AMX kernel) as it was at `revision`: that revision's source and header,
    built in a scratch folder (removed once the library is loaded) and prepared. CalledProcessError when git has no
    such file at that revision."""
    with tempfile.TemporaryDirectory(prefix="band-kernel-") as scratch:
        folder = Path(scratch)
        for name in (spec.source.name, band_kernel.HEADER.name):
            shown = subprocess.run(["git", "show", f"{revision}:strategies/{name}"], cwd=ROOT, capture_output=True,
                                   text=True, check=True)
            (folder / name).write_text(shown.stdout)
        old = dataclasses.replace(spec, source=folder / spec.source.name, name=f"{spec.name} at {revision}")
        kernel = band_kernel.BandKernel(old, band_kernel.build(old, folder=folder))
    kernel.prepare()
    return kernel


@contextmanager
def computing_with(kernel: band_kernel.BandKernel):
    """Inside, the band kernel operator (and the fast attention's choice of kernel) takes `kernel` for its dtype."""
    original = band_kernel.load

    def load(dtype=kernel.dtype):
        return kernel if dtype == kernel.dtype else original(dtype)

    band_kernel.load = load
    try:
        yield kernel
    finally:
        band_kernel.load = original
