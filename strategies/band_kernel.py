"""The hand-written band kernel for bf16 on CPUs with AVX-512 BF16 (`band_attention.c`): build, load, call.

The fast attention's local band (each query over its 2w+1 neighbours and the global slots) in one call per layer,
near the CPU's bf16 matmul rate, where PyTorch's fused SDPA over blocks of w queries computes 3w keys per query
and needs padded copies of keys, values and mask (docs/cpu-floor). The C source is compiled once per machine with
the system C compiler (`cc`, or `$CC`) into a cache folder (`$LONGQA_KERNEL_CACHE`, else
`$XDG_CACHE_HOME/longqa/kernels`, else `~/.cache/longqa/kernels`) and loaded with ctypes; no Python headers, so
building takes about a second. Where it cannot run (no AVX-512 BF16, no compiler, `LONGQA_BAND_KERNEL=0`) `load`
says why and the fast attention keeps PyTorch's SDPA: same answers, slower.

It is not a strategy (the fast attention chooses it) and not a general attention: inference only (no backward),
bf16 only, head sizes 16, 32, 64 and 128.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import math
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("band_attention.c")
FLAGS = ("-O3", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512bf16", "-mfma", "-fopenmp",
         "-fPIC", "-shared")
HEAD_SIZES = (16, 32, 64, 128)
DISABLE_VARIABLE = "LONGQA_BAND_KERNEL"
PROFILER_NAME = "longqa::band_kernel"

log = logging.getLogger(__name__)


class KernelUnavailable(RuntimeError):
    """Why the band kernel cannot run here."""


def cache_folder() -> Path:
    if os.environ.get("LONGQA_KERNEL_CACHE"):
        return Path(os.environ["LONGQA_KERNEL_CACHE"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "longqa" / "kernels"


def cpu_has_avx512_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether the CPU has the instructions the kernel is built for (AVX-512 F/BW/VL/DQ and BF16)."""
    try:
        flags = set(cpuinfo.read_text().split())
    except OSError:
        return False
    return {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"} <= flags


def build(compiler: str | None = None, folder: Path | None = None) -> Path:
    """The compiled library, built now unless the cache already holds one for this source and these flags."""
    compiler = compiler or os.environ.get("CC") or "cc"
    if shutil.which(compiler) is None:
        raise KernelUnavailable(f"no C compiler ({compiler!r} not found; set CC to another)")
    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join((compiler,) + FLAGS).encode()).hexdigest()[:16]
    folder = folder or cache_folder()
    target = folder / f"band_attention-{digest}.so"
    if target.exists():
        return target
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise KernelUnavailable(f"cannot create the kernel cache {folder}: {error}") from error
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        built = Path(scratch) / target.name
        result = subprocess.run([compiler, *FLAGS, "-o", str(built), str(SOURCE)], capture_output=True, text=True)
        if result.returncode != 0:
            raise KernelUnavailable(f"{compiler} failed to build {SOURCE.name}: {result.stderr.strip()[-500:]}")
        os.replace(built, target)  # atomic: a process building at the same time finds a whole file or none
    return target


class BandKernel:
    """The loaded library's entry point, with argument checking in Python (the C side trusts its arguments)."""

    def __init__(self, path: Path):
        library = ctypes.CDLL(str(path))
        self._call = library.longqa_band_attention_bf16
        self._call.restype = ctypes.c_int
        pointer, size = ctypes.c_void_p, ctypes.c_int64
        self._call.argtypes = [pointer] * 11 + [size] * 6 + [ctypes.c_float, ctypes.c_int]
        self.path = path

    @torch.compiler.disable  # a foreign call: compiled callers break the graph here
    def __call__(self, q, k, v, k_global, v_global, key_ok, slot_used, window: int) -> torch.Tensor:
        """Band attention output (B, L, H, d) bf16 for queries/keys/values (B, L, H, d) (any strides, last one 1),
        global keys/values (B, H, G, d), `key_ok` (B, L) bool (local keys), `slot_used` (B, G) bool."""
        batch, length, heads, head_dim = q.shape
        n_global = k_global.shape[2]
        for name, x in (("q", q), ("k", k), ("v", v)):
            if x.dtype != torch.bfloat16 or x.device.type != "cpu" or x.shape != q.shape or x.stride(-1) != 1:
                raise ValueError(f"{name}: expected a CPU bf16 tensor of shape {tuple(q.shape)} with unit last "
                                 f"stride, got {x.dtype} {tuple(x.shape)} strides {x.stride()} on {x.device}")
        if head_dim not in HEAD_SIZES:
            raise ValueError(f"head size {head_dim} not in {HEAD_SIZES}")
        k_global = k_global.to(torch.bfloat16).contiguous()
        v_global = v_global.to(torch.bfloat16).contiguous()
        if k_global.shape != (batch, heads, n_global, head_dim) or v_global.shape != k_global.shape:
            raise ValueError(f"global keys/values: expected {(batch, heads, n_global, head_dim)}, got "
                             f"{tuple(k_global.shape)} and {tuple(v_global.shape)}")
        if key_ok.shape != (batch, length) or slot_used.shape != (batch, n_global):
            raise ValueError(f"masks: expected key_ok {(batch, length)} and slot_used {(batch, n_global)}, got "
                             f"{tuple(key_ok.shape)} and {tuple(slot_used.shape)}")
        key_ok = key_ok.to(torch.uint8).contiguous()
        slot_used = slot_used.to(torch.uint8).contiguous()
        out = torch.empty(batch, length, heads, head_dim, dtype=torch.bfloat16)
        strides = [(ctypes.c_int64 * 3)(*x.stride()[:3]) for x in (q, k, v)]
        with torch.profiler.record_function(PROFILER_NAME):  # the call as one event in torch.profiler's traces
            status = self._call(q.data_ptr(), k.data_ptr(), v.data_ptr(), *strides, k_global.data_ptr(),
                                v_global.data_ptr(), key_ok.data_ptr(), slot_used.data_ptr(), out.data_ptr(),
                                batch, length, heads, head_dim, window, n_global, 1.0 / math.sqrt(head_dim),
                                torch.get_num_threads())
        if status:
            raise RuntimeError(f"band kernel failed (status {status}: "
                               f"{'unsupported head size' if status == 1 else 'out of memory'})")
        return out


@functools.cache
def load() -> BandKernel | KernelUnavailable:
    """The kernel, built on first use; or why it cannot run here (logged once). Cached for the process."""
    try:
        if os.environ.get(DISABLE_VARIABLE, "1").strip().lower() in ("0", "false", "no", "off"):
            raise KernelUnavailable(f"disabled by {DISABLE_VARIABLE}={os.environ[DISABLE_VARIABLE]}")
        if not cpu_has_avx512_bf16():
            raise KernelUnavailable("the CPU has no AVX-512 BF16 instructions")
        return BandKernel(build())
    except KernelUnavailable as reason:
        log.info("band kernel not used, fast attention keeps SDPA: %s", reason)
        return reason
    except OSError as error:  # a library that would not load
        log.warning("band kernel not used, fast attention keeps SDPA: %s", error)
        return KernelUnavailable(str(error))


def kernel() -> BandKernel | None:
    """The loaded kernel, or None where it cannot run."""
    loaded = load()
    return loaded if isinstance(loaded, BandKernel) else None


def status() -> str:
    """One line for readouts and results: whether the band kernel runs here, and if not why."""
    loaded = load()
    return f"band kernel: {loaded.path.name}" if isinstance(loaded, BandKernel) else f"band kernel off: {loaded}"
