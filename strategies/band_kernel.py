"""The fast attention's hand-written band kernels (`band_attention_amx.c`: bf16 on AMX tiles; `band_attention.c`: bf16
on AVX-512 BF16; `band_attention_fp32.c`: fp32 on AVX2 and FMA): built with the system C compiler into the project's cache folder, loaded with ctypes, called
through one torch operator, `torch.ops.longqa.band_attention` (a custom op with a fake implementation, so
torch.compile traces it). Not a strategy (the fast attention chooses them) and not a general attention: inference
only, no dropout.

The door: every kernel takes one `longqa_band_args` struct and returns a `longqa_band_status`, both declared in
`band_attention.h` and mirrored here by `BandArgs` and `Status`. Python checks layouts, dtypes and masks
(`check_arguments`); the C side checks that the sizes fit its 32-bit column indices. A new kernel variant plugs in
as a .c file that includes band_attention.h and exports `int <entry>(const longqa_band_args *)`, plus one
`KernelBuild` row in BUILDS (its flags, the CPU flags it needs, its head sizes); a field added to the struct goes at
its end, in the header and in `BandArgs` both (tests/test_band_kernel.py compares them).

Which kernel computes a dtype: the first of its variants (`variants`: AMX, then AVX-512 BF16 for bf16) that this CPU
has the instructions for, that builds, loads and (AMX) is granted the tile state by Linux; the reasons the faster
ones were passed over are the loaded kernel's `notes`, which the load readout shows.
"""

from __future__ import annotations

import copy
import ctypes
import enum
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
    name: str = ""  # what it runs on, for readouts: "AMX", "AVX-512 BF16", "AVX2"
    key: str = ""  # the LONGQA_BAND_KERNEL value that asks for this variant only
    prepare: str | None = None  # a C function to call once after loading: 0, or the errno of a refusal


COMMON_FLAGS = ("-O3", "-fno-strict-aliasing", "-fopenmp", "-fPIC", "-shared")  # rows are read as 32-bit pairs
BUILD_TIMEOUT_S = 300
AVX512_BF16_FLAGS = ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512bf16", "-mfma")
AVX512_BF16_CPU = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"})
BUILDS = {  # the kernel each dtype falls back to: the one with the fewest CPU requirements
    torch.bfloat16: KernelBuild(torch.bfloat16, Path(__file__).with_name("band_attention.c"), AVX512_BF16_FLAGS,
                                AVX512_BF16_CPU, "longqa_band_attention_bf16", (16, 32, 64, 128),
                                "AVX-512 BF16", "avx512"),
    torch.float32: KernelBuild(torch.float32, Path(__file__).with_name("band_attention_fp32.c"), ("-mavx2", "-mfma"),
                               frozenset({"avx2", "fma"}), "longqa_band_attention_fp32", tuple(range(8, 129, 8)),
                               "AVX2", "avx2"),
}
AMX_BUILD = KernelBuild(torch.bfloat16, Path(__file__).with_name("band_attention_amx.c"),
                        AVX512_BF16_FLAGS + ("-mamx-tile", "-mamx-bf16"), AVX512_BF16_CPU | {"amx_tile", "amx_bf16"},
                        "longqa_band_attention_amx_bf16", (16, 32, 64, 128), "AMX", "amx", "longqa_amx_request")
PREFERRED = {torch.bfloat16: (AMX_BUILD,)}  # tried in this order before BUILDS' kernel: faster where they run
DTYPES = tuple(BUILDS)
HEADER = Path(__file__).with_name("band_attention.h")  # the arguments and status codes every kernel includes
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


def variants(dtype: torch.dtype) -> tuple[KernelBuild, ...]:
    """The kernels that compute `dtype`, fastest first (AMX, then AVX-512 BF16 for bf16)."""
    return PREFERRED.get(dtype, ()) + ((BUILDS[dtype],) if dtype in BUILDS else ())


def requested_variant() -> str | None:
    """The variant LONGQA_BAND_KERNEL asks for by its key (amx, avx512, avx2), or None (the fastest that runs)."""
    value = os.environ.get(DISABLE_VARIABLE, "").strip().lower()
    keys = {spec.key for dtype in BUILDS for spec in variants(dtype)}
    return value if value in keys else None


def is_head_supported(dtype: torch.dtype, head_dim: int) -> bool:
    """Whether a kernel computes `dtype` with heads of `head_dim` dimensions."""
    return dtype in BUILDS and head_dim in BUILDS[dtype].head_sizes


def spec_of(kernel: torch.dtype | KernelBuild) -> KernelBuild:
    """A variant itself, or the fallback kernel of a dtype (BUILDS)."""
    return kernel if isinstance(kernel, KernelBuild) else BUILDS[kernel]


def built_path(dtype: torch.dtype | KernelBuild, compiler: str | None = None, folder: Path | None = None) -> Path:
    """Where the library for `dtype` (or the variant) built from this source with these flags and compiler is (or
    will be) kept."""
    spec = spec_of(dtype)
    command = " ".join((compiler or compiler_name(),) + COMMON_FLAGS + spec.flags)
    key = spec.source.read_bytes() + HEADER.read_bytes() + command.encode()
    return (folder or kernel_folder()) / f"{spec.source.stem}-{hashlib.sha256(key).hexdigest()[:16]}.so"


def is_buildable(dtype: torch.dtype) -> bool:
    """Whether a kernel for `dtype` is built already or a compiler is there to build it, and none is turned off
    (the CPU's instructions are the caller's to check: the planner reads them from the hardware it plans for)."""
    return dtype in BUILDS and not is_disabled() and (
        built_path(dtype).exists() or shutil.which(compiler_name()) is not None)


def build(dtype: torch.dtype | KernelBuild = torch.bfloat16, compiler: str | None = None,
          folder: Path | None = None) -> Path:
    """The compiled library for `dtype` (its fallback kernel, BUILDS) or for a variant, built now unless the cache
    holds one for this source and these flags."""
    spec = spec_of(dtype)
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


class BandArgs(ctypes.Structure):
    """The kernels' arguments: `longqa_band_args` of band_attention.h, field for field in the same order."""

    _fields_ = [("struct_size", ctypes.c_int64),
                ("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p),
                ("q_strides", ctypes.c_int64 * 3), ("k_strides", ctypes.c_int64 * 3), ("v_strides", ctypes.c_int64 * 3),
                ("k_global", ctypes.c_void_p), ("v_global", ctypes.c_void_p),
                ("key_ok", ctypes.c_void_p), ("slot_used", ctypes.c_void_p), ("out", ctypes.c_void_p),
                ("batch", ctypes.c_int64), ("length", ctypes.c_int64), ("heads", ctypes.c_int64),
                ("head_dim", ctypes.c_int64), ("window", ctypes.c_int64), ("n_global", ctypes.c_int64),
                ("scale", ctypes.c_float), ("threads", ctypes.c_int32)]


class Status(enum.IntEnum):
    """What a kernel returns: `longqa_band_status` of band_attention.h, without its LONGQA_BAND_ prefix."""

    OK = 0
    BAD_HEAD_SIZE = 1
    OUT_OF_MEMORY = 2
    BAD_ARGUMENTS = 3


def status_name(status: int) -> str:
    """A kernel's return value as band_attention.h names it."""
    try:
        return f"LONGQA_BAND_{Status(status).name} ({status})"
    except ValueError:
        return f"unknown status {status}"


MAX_SIZE = 2 ** 30  # LONGQA_BAND_MAX_SIZE: the C loops index a row's columns with 32-bit ints
MAX_ROW_COLUMNS = 2 ** 31 - 256  # global slots + 2 * window, padded: below INT32_MAX


def check_arguments(dtype: torch.dtype, q, k, v, k_global, v_global, key_ok, slot_used, window: int) -> None:
    """Raise ValueError unless the arguments are what a `dtype` kernel takes (see `BandKernel.__call__`). Reads
    only shapes, dtypes, strides and devices, so it also checks fake tensors while torch.compile traces."""
    if q.dim() != 4 or k_global.dim() != 4:
        raise ValueError(f"expected q (B, L, H, d) and k_global (B, H, G, d), got {tuple(q.shape)} and "
                         f"{tuple(k_global.shape)}")
    batch, length, heads, head_dim = q.shape
    n_global = k_global.shape[2]
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.dtype != dtype or x.device.type != "cpu" or x.shape != q.shape or x.stride(-1) != 1:
            raise ValueError(f"{name}: expected a CPU {dtype} tensor of shape {tuple(q.shape)} with unit last "
                             f"stride, got {x.dtype} {tuple(x.shape)} strides {x.stride()} on {x.device}")
    for name, x in (("k_global", k_global), ("v_global", v_global), ("key_ok", key_ok), ("slot_used", slot_used)):
        if x.device.type != "cpu":
            raise ValueError(f"{name}: expected a CPU tensor, got one on {x.device}")
    if not is_head_supported(dtype, head_dim):
        raise ValueError(f"head size {head_dim}: the {dtype} kernel does not take it")
    if k_global.shape != (batch, heads, n_global, head_dim) or v_global.shape != k_global.shape:
        raise ValueError(f"global keys/values: expected {(batch, heads, n_global, head_dim)}, got "
                         f"{tuple(k_global.shape)} and {tuple(v_global.shape)}")
    if key_ok.shape != (batch, length) or slot_used.shape != (batch, n_global):
        raise ValueError(f"masks: expected key_ok {(batch, length)} and slot_used {(batch, n_global)}, got "
                         f"{tuple(key_ok.shape)} and {tuple(slot_used.shape)}")
    for name, x in (("key_ok", key_ok), ("slot_used", slot_used)):
        if x.dtype != torch.bool:  # another dtype would be read as bytes: 256 becomes 0, 0.5 becomes 0
            raise ValueError(f"{name}: expected a bool mask, got {x.dtype}")
    if window < 0:
        raise ValueError(f"window {window}: a one-sided window is 0 or more")
    if window >= MAX_SIZE:
        raise ValueError(f"window {window}: the band kernel takes windows below 2^30 (it indexes a row's columns "
                         f"with 32-bit ints); a window past the text is the text's length")
    for name, size in (("batch", batch), ("length", length), ("heads", heads), ("global slots", n_global)):
        if size >= MAX_SIZE:
            raise ValueError(f"{name} {size}: the band kernel takes sizes below 2^30")
    if n_global + 2 * clamped_window(window, length) >= MAX_ROW_COLUMNS:
        raise ValueError(f"{n_global} global slots and a window of {window}: a row of more than 2^31 columns")


def clamped_window(window: int, length: int) -> int:
    """The window the kernel computes with: past the text's last token it sees nothing more (and would size its
    buffers for the keys it does not have)."""
    return max(0, min(window, length - 1))


def is_row_aligned(x: torch.Tensor) -> bool:
    """Whether every (batch, token, head) row of a bf16 tensor starts on a 4-byte boundary (read as 32-bit pairs)."""
    return x.data_ptr() % 4 == 0 and all(step % 2 == 0 for step in x.stride()[:-1])


class BandKernel:
    """The loaded library's entry point, with argument checking in Python (the C side checks only sizes)."""

    def __init__(self, spec: KernelBuild, path: Path, notes: tuple[str, ...] = ()):
        self._library = ctypes.CDLL(str(path))
        self._call = getattr(self._library, spec.entry)
        self._call.restype = ctypes.c_int
        self._call.argtypes = [ctypes.POINTER(BandArgs)]
        self.dtype, self.path, self.spec = spec.dtype, path, spec
        self.notes = notes  # why faster variants were passed over

    def prepare(self) -> None:
        """Run the variant's one-time setup (AMX: ask Linux for the tile state); KernelUnavailable if refused."""
        if self.spec.prepare is None:
            return
        setup = getattr(self._library, self.spec.prepare)
        setup.restype, setup.argtypes = ctypes.c_int, []
        error = setup()
        if error:
            raise KernelUnavailable(f"Linux refused the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM): "
                                    f"{os.strerror(error) if error > 0 else 'unknown error'}")

    def with_notes(self, notes: tuple[str, ...]) -> "BandKernel":
        """The same loaded kernel with these notes."""
        noted = copy.copy(self)
        noted.notes = notes
        return noted

    @torch.compiler.disable  # a foreign call: compiled callers take the custom op `band_attention` instead
    def __call__(self, q, k, v, k_global, v_global, key_ok, slot_used, window: int) -> torch.Tensor:
        """Band attention output (B, L, H, d) in the kernel's dtype for queries/keys/values (B, L, H, d) (any
        strides, the last one 1), global keys/values (B, H, G, d), `key_ok` (B, L) bool (the local keys),
        `slot_used` (B, G) bool, all on the CPU; `window` one-sided, 0 or more (clamped to the text)."""
        check_arguments(self.dtype, q, k, v, k_global, v_global, key_ok, slot_used, window)
        batch, length, heads, head_dim = q.shape
        if self.dtype == torch.bfloat16:  # a fresh copy: .contiguous() keeps a contiguous but misaligned view
            q, k, v = (x if is_row_aligned(x) else x.clone(memory_format=torch.contiguous_format)
                       for x in (q, k, v))
        k_global, v_global = (x.to(self.dtype) for x in (k_global, v_global))
        k_global, v_global = (x if x.is_contiguous() and is_row_aligned(x)
                              else x.clone(memory_format=torch.contiguous_format) for x in (k_global, v_global))
        key_ok, slot_used = (x.contiguous().view(torch.uint8) for x in (key_ok, slot_used))
        out = torch.empty(batch, length, heads, head_dim, dtype=self.dtype)
        args = BandArgs(struct_size=ctypes.sizeof(BandArgs),
                        q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(),
                        q_strides=q.stride()[:3], k_strides=k.stride()[:3], v_strides=v.stride()[:3],
                        k_global=k_global.data_ptr(), v_global=v_global.data_ptr(),
                        key_ok=key_ok.data_ptr(), slot_used=slot_used.data_ptr(), out=out.data_ptr(),
                        batch=batch, length=length, heads=heads, head_dim=head_dim,
                        window=clamped_window(window, length), n_global=k_global.shape[2],
                        scale=1.0 / math.sqrt(head_dim), threads=torch.get_num_threads())
        with torch.profiler.record_function(PROFILER_NAME):  # the call as one event in torch.profiler's traces
            status = self._call(ctypes.byref(args))
        if status == Status.OUT_OF_MEMORY:  # the engine halves the batch on torch's out-of-memory error
            raise torch.OutOfMemoryError("band kernel: out of memory for its scratch buffers")
        if status != Status.OK:
            raise RuntimeError(f"band kernel failed: {status_name(status)} for {self.dtype}, head size {head_dim}, "
                               f"window {window}, {tuple(q.shape)}")
        return out


@torch.library.custom_op("longqa::band_attention", mutates_args=(), device_types="cpu")
def band_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_global: torch.Tensor,
                   v_global: torch.Tensor, key_ok: torch.Tensor, slot_used: torch.Tensor, window: int) -> torch.Tensor:
    """The band kernel for q's dtype as a torch operator (`torch.ops.longqa.band_attention`): torch.compile traces
    it into its graphs as one call, and `torch.library.opcheck` tests it. Arguments as `BandKernel.__call__`."""
    loaded = load(q.dtype)
    if not isinstance(loaded, BandKernel):
        raise KernelUnavailable(f"no band kernel for {q.dtype} runs here: {loaded}")
    return loaded(q, k, v, k_global, v_global, key_ok, slot_used, window)


@band_attention.register_fake
def _band_attention_shape(q, k, v, k_global, v_global, key_ok, slot_used, window):
    """What the op returns, for tracing: a contiguous (B, L, H, d) tensor in q's dtype, after the same checks."""
    check_arguments(q.dtype, q, k, v, k_global, v_global, key_ok, slot_used, window)
    return q.new_empty(q.shape)


def skip_reason(spec: KernelBuild) -> KernelUnavailable | None:
    """Why the variant cannot run here before building anything: LONGQA_BAND_KERNEL asks for another, or the CPU
    lacks its instructions; None when it may."""
    requested = requested_variant()
    if requested is not None and requested != spec.key:
        return KernelUnavailable(f"{DISABLE_VARIABLE}={requested} asks for another kernel")
    missing = spec.cpu_flags - cpu_flags()
    if missing:
        return KernelUnavailable(f"the CPU lacks {', '.join(sorted(missing))}")
    return None


def open_kernel(spec: KernelBuild) -> BandKernel:
    """The variant built (or found built), loaded and prepared; KernelUnavailable or OSError when it cannot be."""
    kernel = BandKernel(spec, build(spec))
    kernel.prepare()
    return kernel


@functools.cache
def open_variant(spec: KernelBuild) -> BandKernel | KernelUnavailable:
    """`open_kernel`, once per process and variant: a failed build is not retried."""
    try:
        return open_kernel(spec)
    except KernelUnavailable as reason:
        return reason
    except OSError as error:  # a library that would not load
        log.warning("%s band kernel would not load: %s", spec.name, error)
        return KernelUnavailable(str(error))


@functools.cache
def load(dtype: torch.dtype = torch.bfloat16) -> BandKernel | KernelUnavailable:
    """The fastest kernel for `dtype` that runs here (`variants`), built on first use, with the reasons the faster
    ones did not in its `notes`; or why none can run (logged once). Cached per process."""
    if dtype not in BUILDS:
        return KernelUnavailable(f"no band kernel computes {dtype}")
    if is_disabled():
        reason = KernelUnavailable(f"disabled by {DISABLE_VARIABLE}={os.environ[DISABLE_VARIABLE]}")
        log.info("%s band kernel not used, fast attention keeps SDPA: %s", dtype, reason)
        return reason
    passed_over = []
    for spec in variants(dtype):
        loaded = skip_reason(spec) or open_variant(spec)
        if isinstance(loaded, BandKernel):
            return loaded.with_notes(tuple(f"{name} kernel not used: {why}" for name, why in passed_over))
        passed_over.append((spec.name, loaded))
    # the fallback's reason first: it is why SDPA runs
    reason = KernelUnavailable("; ".join([str(passed_over[-1][1])]
                                         + [f"{name} kernel not used: {why}" for name, why in passed_over[:-1]]))
    log.info("%s band kernel not used, fast attention keeps SDPA: %s", dtype, reason)
    return reason


def kernel(dtype: torch.dtype = torch.bfloat16) -> BandKernel | None:
    """The loaded kernel for `dtype`, or None where it cannot run."""
    loaded = load(dtype)
    return loaded if isinstance(loaded, BandKernel) else None


def status(dtype: torch.dtype = torch.bfloat16) -> str:
    """One line for readouts and results: whether the band kernel for `dtype` runs here, and if not why."""
    loaded = load(dtype)
    name = str(dtype).removeprefix("torch.")
    if not isinstance(loaded, BandKernel):
        return f"{name} band kernel off: {loaded}"
    return "; ".join([f"{name} band kernel: {loaded.path.name} ({loaded.spec.name})", *loaded.notes])
