"""The fast attention's hand-written band kernels (`band_attention.c`: bf16 on AVX-512 BF16; `band_attention_fp32.c`:
fp32 on AVX2 and FMA): built with the system C compiler into the project's cache folder, loaded with ctypes, called.
Not a strategy (the fast attention chooses them) and not a general attention: inference only, no dropout.
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
from dataclasses import dataclass
from pathlib import Path

import torch

from longqa_core.cache import cache_dir
from strategies.hardware import cpu_flags


@dataclass(frozen=True)
class KernelBuild:
    """One kernel's source, compiler flags, the CPU flags it needs, its C entry point and what it computes."""

    dtype: torch.dtype
    source: Path
    flags: tuple[str, ...]
    cpu_flags: frozenset[str]
    entry: str
    head_sizes: tuple[int, ...]  # the head sizes (dimensions per head) it takes


COMMON_FLAGS = ("-O3", "-fno-strict-aliasing", "-fopenmp", "-fPIC", "-shared")  # rows are read as 32-bit pairs
BUILD_TIMEOUT_S = 300
BUILDS = {
    torch.bfloat16: KernelBuild(torch.bfloat16, Path(__file__).with_name("band_attention.c"),
                                ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512bf16", "-mfma"),
                                frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"}),
                                "longqa_band_attention_bf16", (16, 32, 64, 128)),
    torch.float32: KernelBuild(torch.float32, Path(__file__).with_name("band_attention_fp32.c"), ("-mavx2", "-mfma"),
                               frozenset({"avx2", "fma"}), "longqa_band_attention_fp32", tuple(range(8, 129, 8))),
}
DTYPES = tuple(BUILDS)
DISABLE_VARIABLE = "LONGQA_BAND_KERNEL"
PROFILER_NAME = "longqa::band_kernel"

log = logging.getLogger(__name__)


class KernelUnavailable(RuntimeError):
    """Why the band kernel cannot run here."""


def kernel_folder() -> Path:
    """Where built kernels are kept: `kernels/` in the project's cache folder."""
    return cache_dir() / "kernels"


def compiler_name() -> str:
    """The C compiler to build with: $CC, else `cc`."""
    return os.environ.get("CC") or "cc"


def is_disabled() -> bool:
    """Whether LONGQA_BAND_KERNEL turns the kernels off (0, false, no, off)."""
    return os.environ.get(DISABLE_VARIABLE, "1").strip().lower() in ("0", "false", "no", "off")


def is_head_supported(dtype: torch.dtype, head_dim: int) -> bool:
    """Whether a kernel computes `dtype` with heads of `head_dim` dimensions."""
    return dtype in BUILDS and head_dim in BUILDS[dtype].head_sizes


def built_path(dtype: torch.dtype, compiler: str | None = None, folder: Path | None = None) -> Path:
    """Where the library for `dtype` built from this source with these flags and compiler is (or will be) kept."""
    spec = BUILDS[dtype]
    key = spec.source.read_bytes() + " ".join((compiler or compiler_name(),) + COMMON_FLAGS + spec.flags).encode()
    return (folder or kernel_folder()) / f"{spec.source.stem}-{hashlib.sha256(key).hexdigest()[:16]}.so"


def is_buildable(dtype: torch.dtype) -> bool:
    """Whether a kernel for `dtype` is built already or a compiler is there to build it, and none is turned off
    (the CPU's instructions are the caller's to check: the planner reads them from the hardware it plans for)."""
    return dtype in BUILDS and not is_disabled() and (
        built_path(dtype).exists() or shutil.which(compiler_name()) is not None)


def build(dtype: torch.dtype = torch.bfloat16, compiler: str | None = None, folder: Path | None = None) -> Path:
    """The compiled library for `dtype`, built now unless the cache holds one for this source and these flags."""
    spec = BUILDS[dtype]
    compiler = compiler or compiler_name()
    target = built_path(dtype, compiler, folder)
    if target.exists():
        return target
    if shutil.which(compiler) is None:
        raise KernelUnavailable(f"no C compiler ({compiler!r} not found; set CC to another)")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
            built = Path(scratch) / target.name
            result = subprocess.run([compiler, *COMMON_FLAGS, *spec.flags, "-o", str(built), str(spec.source)],
                                    capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
            if result.returncode != 0:
                raise KernelUnavailable(f"{compiler} failed to build {spec.source.name}: "
                                        f"{result.stderr.strip()[-500:]}")
            os.replace(built, target)  # atomic: a process building at the same time finds a whole file or none
    except subprocess.TimeoutExpired as error:
        raise KernelUnavailable(f"{compiler} took over {BUILD_TIMEOUT_S} s to build {spec.source.name}") from error
    except OSError as error:
        raise KernelUnavailable(f"cannot build into {target.parent}: {error}") from error
    return target


class BandKernel:
    """The loaded library's entry point, with argument checking in Python (the C side trusts its arguments)."""

    def __init__(self, spec: KernelBuild, path: Path):
        library = ctypes.CDLL(str(path))
        self._call = getattr(library, spec.entry)
        self._call.restype = ctypes.c_int
        pointer, size = ctypes.c_void_p, ctypes.c_int64
        self._call.argtypes = [pointer] * 11 + [size] * 6 + [ctypes.c_float, ctypes.c_int]
        self.dtype, self.path = spec.dtype, path

    @torch.compiler.disable  # a foreign call: compiled callers break the graph here
    def __call__(self, q, k, v, k_global, v_global, key_ok, slot_used, window: int) -> torch.Tensor:
        """Band attention output (B, L, H, d) in the kernel's dtype for queries/keys/values (B, L, H, d) (any
        strides, the last one 1), global keys/values (B, H, G, d), `key_ok` (B, L) bool (the local keys),
        `slot_used` (B, G) bool, all on the CPU."""
        batch, length, heads, head_dim = q.shape
        n_global = k_global.shape[2]
        for name, x in (("q", q), ("k", k), ("v", v)):
            if x.dtype != self.dtype or x.device.type != "cpu" or x.shape != q.shape or x.stride(-1) != 1:
                raise ValueError(f"{name}: expected a CPU {self.dtype} tensor of shape {tuple(q.shape)} with unit last "
                                 f"stride, got {x.dtype} {tuple(x.shape)} strides {x.stride()} on {x.device}")
        for name, x in (("k_global", k_global), ("v_global", v_global), ("key_ok", key_ok), ("slot_used", slot_used)):
            if x.device.type != "cpu":
                raise ValueError(f"{name}: expected a CPU tensor, got one on {x.device}")
        if not is_head_supported(self.dtype, head_dim):
            raise ValueError(f"head size {head_dim}: the {self.dtype} kernel does not take it")
        if self.dtype == torch.bfloat16:  # rows are read as 32-bit pairs of dimensions: each row 4-byte aligned
            q, k, v = (x if x.data_ptr() % 4 == 0 and all(step % 2 == 0 for step in x.stride()[:3])
                       else x.contiguous() for x in (q, k, v))
        k_global = k_global.to(self.dtype).contiguous()
        v_global = v_global.to(self.dtype).contiguous()
        if k_global.shape != (batch, heads, n_global, head_dim) or v_global.shape != k_global.shape:
            raise ValueError(f"global keys/values: expected {(batch, heads, n_global, head_dim)}, got "
                             f"{tuple(k_global.shape)} and {tuple(v_global.shape)}")
        if key_ok.shape != (batch, length) or slot_used.shape != (batch, n_global):
            raise ValueError(f"masks: expected key_ok {(batch, length)} and slot_used {(batch, n_global)}, got "
                             f"{tuple(key_ok.shape)} and {tuple(slot_used.shape)}")
        key_ok = key_ok.to(torch.uint8).contiguous()
        slot_used = slot_used.to(torch.uint8).contiguous()
        out = torch.empty(batch, length, heads, head_dim, dtype=self.dtype)
        strides = [(ctypes.c_int64 * 3)(*x.stride()[:3]) for x in (q, k, v)]
        with torch.profiler.record_function(PROFILER_NAME):  # the call as one event in torch.profiler's traces
            status = self._call(q.data_ptr(), k.data_ptr(), v.data_ptr(), *strides, k_global.data_ptr(),
                                v_global.data_ptr(), key_ok.data_ptr(), slot_used.data_ptr(), out.data_ptr(),
                                batch, length, heads, head_dim, window, n_global, 1.0 / math.sqrt(head_dim),
                                torch.get_num_threads())
        if status == 2:  # the engine halves the batch on torch's out-of-memory error
            raise torch.OutOfMemoryError("band kernel: out of memory for its scratch buffers")
        if status:
            raise RuntimeError(f"band kernel failed (status {status}: unsupported head size {head_dim})")
        return out


@functools.cache
def load(dtype: torch.dtype = torch.bfloat16) -> BandKernel | KernelUnavailable:
    """The kernel for `dtype`, built on first use; or why it cannot run here (logged once). Cached per process."""
    try:
        if dtype not in BUILDS:
            raise KernelUnavailable(f"no band kernel computes {dtype}")
        if is_disabled():
            raise KernelUnavailable(f"disabled by {DISABLE_VARIABLE}={os.environ[DISABLE_VARIABLE]}")
        missing = BUILDS[dtype].cpu_flags - cpu_flags()
        if missing:
            raise KernelUnavailable(f"the CPU lacks {', '.join(sorted(missing))}")
        return BandKernel(BUILDS[dtype], build(dtype))
    except KernelUnavailable as reason:
        log.info("%s band kernel not used, fast attention keeps SDPA: %s", dtype, reason)
        return reason
    except OSError as error:  # a library that would not load
        log.warning("%s band kernel not used, fast attention keeps SDPA: %s", dtype, error)
        return KernelUnavailable(str(error))


def kernel(dtype: torch.dtype = torch.bfloat16) -> BandKernel | None:
    """The loaded kernel for `dtype`, or None where it cannot run."""
    loaded = load(dtype)
    return loaded if isinstance(loaded, BandKernel) else None


def status(dtype: torch.dtype = torch.bfloat16) -> str:
    """One line for readouts and results: whether the band kernel for `dtype` runs here, and if not why."""
    loaded = load(dtype)
    name = str(dtype).removeprefix("torch.")
    return (f"{name} band kernel: {loaded.path.name}" if isinstance(loaded, BandKernel)
            else f"{name} band kernel off: {loaded}")
