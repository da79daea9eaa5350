"""The hand-written band kernels (bf16 on AMX and on AVX-512 BF16, fp32): against a dense masked attention and each
other, inside the model, and their build, selection and fallbacks.

Tests that run a kernel need a C compiler and a CPU with its instructions (bf16: AMX, AVX-512 BF16; fp32: AVX2 and
FMA); elsewhere they are skipped with the reason the loader gives, and the tests that check the fallback run. Which
variant is chosen, and the reasons for passing over the others, is tested on every machine with injected CPU flags
and kernels.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import math
import os
import re
import subprocess
import sys

import pytest
import torch

from strategies import band_kernel
from strategies.fast_attention import FastAttention, SlidingWindowSelfAttention
from tests.test_fast_attention import TINY, inputs, max_logit_gap, pair

pytestmark = pytest.mark.torch_threads  # the kernels split their work over torch.get_num_threads() threads
needs_kernel = pytest.mark.skipif(band_kernel.kernel() is None, reason=band_kernel.status())
BOTH = [pytest.param(dtype, marks=pytest.mark.skipif(band_kernel.kernel(dtype) is None,
                                                     reason=band_kernel.status(dtype)))
        for dtype in (torch.bfloat16, torch.float32)]
TOLERANCE = {torch.bfloat16: 0.02, torch.float32: 1e-5}  # bf16: probabilities and outputs rounded to 2^-8


def variant(spec: band_kernel.KernelBuild) -> band_kernel.BandKernel | band_kernel.KernelUnavailable:
    """One variant, built and loaded, whatever the loader would choose; or why it cannot run here."""
    return band_kernel.skip_reason(spec) or band_kernel.open_variant(spec)


VARIANTS = [pytest.param(spec, id=f"{spec.key}",
                         marks=pytest.mark.skipif(not isinstance(variant(spec), band_kernel.BandKernel),
                                                  reason=f"{spec.name}: {variant(spec)}"))
            for spec in (band_kernel.AMX_BUILD, band_kernel.BUILDS[torch.bfloat16], band_kernel.BUILDS[torch.float32])]


def dense_scores(q, k, v, k_global, v_global, key_ok, slot_used, w, precision=torch.float32):
    """Every query's scores (B, H, L, G+L) against every global and local key, -inf where its band of local keys
    and the used global slots do not allow the key; and the values (B, H, G+L, d) they weigh."""
    batch, length, heads, head_dim = q.shape
    qf, kf, vf = (x.to(precision).transpose(1, 2) for x in (q, k, v))  # (B, H, L, d)
    keys = torch.cat([k_global.to(precision), kf], 2)
    values = torch.cat([v_global.to(precision), vf], 2)
    position = torch.arange(length)
    band = (position[None, :] - position[:, None]).abs() <= w
    allowed = torch.cat([slot_used[:, None, :].expand(-1, length, -1), band[None] & key_ok[:, None, :]], -1)
    scores = (qf @ keys.transpose(-1, -2) / math.sqrt(head_dim)).masked_fill(~allowed[:, None], float("-inf"))
    return scores, values


def dense_reference(q, k, v, k_global, v_global, key_ok, slot_used, w, precision=torch.float32):
    """Every query over every key, masked to its band of local keys and the used global slots: (B, L, H, d)."""
    scores, values = dense_scores(q, k, v, k_global, v_global, key_ok, slot_used, w, precision)
    return (torch.softmax(scores, -1).nan_to_num(0.0) @ values).transpose(1, 2)  # rows with no key: zeros


def random_case(batch, length, heads, head_dim, n_global, seed=0, dtype=torch.bfloat16):
    generator = torch.Generator().manual_seed(seed)
    # q, k, v as the fused projection hands them: views of one (B, L, 5D) tensor, token stride 5D
    fused = torch.randn(batch, length, 5 * heads * head_dim, generator=generator).to(dtype)
    q, k, v, _, _ = (x.view(batch, length, heads, head_dim) for x in fused.split(heads * head_dim, -1))
    k_global = torch.randn(batch, heads, n_global, head_dim, generator=generator).to(dtype)
    v_global = torch.randn(batch, heads, n_global, head_dim, generator=generator).to(dtype)
    key_ok = torch.rand(batch, length, generator=generator) > 0.15
    slot_used = torch.rand(batch, n_global, generator=generator) > 0.3
    return q, k, v, k_global, v_global, key_ok, slot_used


@pytest.mark.parametrize("spec", VARIANTS)
@pytest.mark.parametrize("batch, length, heads, head_dim, w, n_global", [
    (1, 64, 2, 64, 8, 1), (2, 96, 3, 64, 5, 3), (1, 128, 2, 32, 16, 2), (2, 80, 2, 128, 20, 40),
    (1, 512, 4, 64, 64, 7), (3, 70, 2, 16, 3, 1), (1, 40, 1, 64, 100, 2), (1, 2048, 2, 64, 256, 5),
    (2, 5, 2, 64, 3, 0), (1, 300, 2, 64, 17, 33), (2, 1000, 3, 128, 300, 2)])
def test_matches_dense_masked_attention(spec, batch, length, heads, head_dim, w, n_global):
    """Odd windows, windows wider than the text, many global slots, none, unused slots, non-keys, strided inputs,
    a text shorter than one group of query rows, a length no group size divides."""
    dtype = spec.dtype
    case = random_case(batch, length, heads, head_dim, n_global, dtype=dtype)
    out = variant(spec)(*case, w)
    reference = dense_reference(*case, w)
    assert out.shape == reference.shape and out.dtype == dtype
    assert (out.float() - reference).abs().max().item() < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", BOTH[1:])
@pytest.mark.parametrize("head_dim", [8, 24, 40])
def test_fp32_takes_any_head_size_that_is_a_multiple_of_8(dtype, head_dim):
    case = random_case(2, 90, 3, head_dim, 2, dtype=dtype)
    assert (band_kernel.kernel(dtype)(*case, 7) - dense_reference(*case, 7)).abs().max().item() < 1e-5


@pytest.mark.parametrize("spec", VARIANTS)
def test_a_row_with_no_allowed_key_gets_zeros(spec):
    q, k, v, k_global, v_global, key_ok, slot_used = random_case(1, 64, 2, 64, 2, dtype=spec.dtype)
    key_ok[:] = False
    slot_used[:] = False
    slot_used[0, 0] = True
    key_ok[0, 40] = True  # only rows 36..44 see a local key; every row sees global slot 0
    out = variant(spec)(q, k, v, k_global, v_global, key_ok, slot_used, 4)
    assert torch.isfinite(out.float()).all()
    slot_used[0, 0] = False
    out = variant(spec)(q, k, v, k_global, v_global, key_ok, slot_used, 4).float()
    assert out[0, :36].abs().max() == 0 and out[0, 45:].abs().max() == 0 and out[0, 40].abs().max() > 0


@needs_kernel
def test_bad_arguments_are_refused_in_python():
    q, k, v, k_global, v_global, key_ok, slot_used = random_case(1, 64, 2, 64, 2)
    with pytest.raises(ValueError, match="bfloat16"):
        band_kernel.kernel()(q.float(), k, v, k_global, v_global, key_ok, slot_used, 4)
    with pytest.raises(ValueError, match="global"):
        band_kernel.kernel()(q, k, v, k_global[:, :1], v_global, key_ok, slot_used, 4)
    with pytest.raises(ValueError, match="masks"):
        band_kernel.kernel()(q, k, v, k_global, v_global, key_ok[:, :10], slot_used, 4)


@pytest.mark.parametrize("dtype", BOTH)
@pytest.mark.parametrize("window, message", [
    (-1, "0 or more"),  # before: round_up((size_t)w) wrapped and a memcpy wrote before its buffer (SIGSEGV)
    (-(2 ** 40), "0 or more"),
    (2 ** 63 - 1, "below 2\\^30"),  # before: the scratch sizes overflowed, then a wild pointer
    (2 ** 64, "below 2\\^30"),  # past int64: ctypes would have truncated it to 0
    (2 ** 30, "below 2\\^30"),  # before: the (int) casts of the band's columns gave a wrong band, silently
])
def test_windows_out_of_range_are_refused(dtype, window, message):
    case = random_case(1, 64, 2, 64, 2, dtype=dtype)
    with pytest.raises(ValueError, match=message):
        band_kernel.kernel(dtype)(*case, window)
    # the operator (and its fake while torch.compile traces); its schema's int is 64-bit: past it, torch refuses
    with pytest.raises(ValueError if window < 2 ** 63 else RuntimeError,
                       match=message if window < 2 ** 63 else "argument 'window'"):
        band_kernel.band_attention(*case, window)


@pytest.mark.parametrize("dtype", BOTH)
def test_a_window_past_the_text_is_the_texts_length(dtype):
    """A window wider than the text sees every key: computed as the text's length, not sized for 2^30 keys."""
    case = random_case(2, 50, 2, 64, 3, dtype=dtype)
    wide = band_kernel.kernel(dtype)(*case, 2 ** 30 - 1)
    assert torch.equal(wide, band_kernel.kernel(dtype)(*case, 49))
    assert (wide.float() - dense_reference(*case, 49)).abs().max().item() < TOLERANCE[dtype]
    assert band_kernel.clamped_window(2 ** 29, 50) == 49 and band_kernel.clamped_window(3, 50) == 3
    assert band_kernel.clamped_window(7, 0) == 0


@pytest.mark.parametrize("dtype", BOTH)
@pytest.mark.parametrize("mask_dtype", [torch.uint8, torch.int64, torch.float32])
def test_masks_must_be_bool(dtype, mask_dtype):
    """Before, a mask of another dtype was cast to bytes: an integer 256 read as 0 (a key silently dropped)."""
    q, k, v, k_global, v_global, key_ok, slot_used = random_case(1, 64, 2, 64, 2, dtype=dtype)
    with pytest.raises(ValueError, match="key_ok: expected a bool mask"):
        band_kernel.kernel(dtype)(q, k, v, k_global, v_global, key_ok.to(mask_dtype) * 256, slot_used, 4)
    with pytest.raises(ValueError, match="slot_used: expected a bool mask"):
        band_kernel.kernel(dtype)(q, k, v, k_global, v_global, key_ok, slot_used.to(mask_dtype), 4)


def pointers_seen_by_c(kernel, monkeypatch) -> list[dict]:
    """Wrap the kernel's foreign call to record the struct it passes (the kernel object is the cached one)."""
    seen, call = [], kernel._call

    def record(args_pointer):
        args = args_pointer._obj
        seen.append({name: getattr(args, name) for name in ("q", "k", "v", "k_global", "v_global")})
        return call(args_pointer)

    monkeypatch.setattr(kernel, "_call", record)
    return seen


@needs_kernel
def test_misaligned_bf16_views_are_copied_to_aligned_memory(monkeypatch):
    """A contiguous view that starts 2 bytes into its storage: `.contiguous()` returned it as it was, and the kernel
    read its rows as misaligned 32-bit words (undefined behaviour); now the kernel gets an aligned copy."""
    q, k, v, k_global, v_global, key_ok, slot_used = random_case(2, 96, 3, 64, 3)

    def shifted(x):  # the same values, contiguous, one bf16 element past a 4-byte boundary
        storage = torch.empty(x.numel() + 1, dtype=x.dtype)
        view = storage[1:].view(x.shape)
        view.copy_(x)
        assert view.is_contiguous() and view.data_ptr() % 4 == 2
        return view

    views = [shifted(x) for x in (q, k, v, k_global, v_global)]
    seen = pointers_seen_by_c(band_kernel.kernel(), monkeypatch)
    out = band_kernel.kernel()(*views, key_ok, slot_used, 5)
    assert all(pointer % 4 == 0 for pointer in seen[0].values())
    assert torch.equal(out, band_kernel.kernel()(q, k, v, k_global, v_global, key_ok, slot_used, 5))
    # an odd token stride misaligns every other row even where the first one is aligned
    odd = torch.randn(2, 96, 3 * 64 + 1).to(torch.bfloat16)[..., :3 * 64].view(2, 96, 3, 64)
    assert not band_kernel.is_row_aligned(odd)
    out = band_kernel.kernel()(odd, k, v, k_global, v_global, key_ok, slot_used, 5)
    assert all(pointer % 4 == 0 for pointer in seen[-1].values())
    assert (out.float() - dense_reference(odd, k, v, k_global, v_global, key_ok, slot_used, 5)).abs().max() < 0.02


def header_text() -> str:
    return band_kernel.HEADER.read_text()


C_TYPES = {"int64_t": ctypes.c_int64, "int32_t": ctypes.c_int32, "float": ctypes.c_float}


def declared_fields() -> list[tuple[str, type]]:
    """longqa_band_args' fields as band_attention.h declares them: (name, the ctypes type of its C type)."""
    body = re.search(r"typedef struct \{(.*?)\} longqa_band_args;", header_text(), re.S).group(1)
    fields = []
    for line in body.splitlines():
        code = line.split("/*")[0].strip().rstrip(";")
        if code:
            base, names = re.fullmatch(r"(?:const )?(\w+)\s+(.*)", code).groups()
            for name in (name.strip() for name in names.split(",")):
                c_type = ctypes.c_void_p if name.startswith("*") else C_TYPES[base]
                count = re.search(r"\[(\d+)\]", name)
                c_type = c_type * int(count.group(1)) if count else c_type
                fields.append((re.sub(r"\W", "", name.split("[")[0]), c_type))
    return fields


def test_the_python_struct_mirrors_the_c_declaration():
    """BandArgs has longqa_band_args' fields, in its order, of its types."""
    declared = declared_fields()
    assert [name for name, _ in declared] == [name for name, _ in band_kernel.BandArgs._fields_]
    for (name, c_type), (_, py_type) in zip(declared, band_kernel.BandArgs._fields_):
        same_kind = c_type is py_type or (issubclass(c_type, ctypes.Array) and issubclass(py_type, ctypes.Array) and
                                          (c_type._type_, c_type._length_) == (py_type._type_, py_type._length_))
        assert same_kind, (name, c_type, py_type)


@pytest.mark.skipif(band_kernel.shutil.which(band_kernel.compiler_name()) is None, reason="no C compiler")
def test_the_c_compiler_lays_the_struct_out_as_ctypes_does(tmp_path):
    """Offsets and size as the C compiler computes them, against ctypes': the kernels read what Python wrote."""
    names = [name for name, _ in band_kernel.BandArgs._fields_]
    program = tmp_path / "layout.c"
    program.write_text(f'''#include <stdio.h>
#include "{band_kernel.HEADER}"
int main(void) {{
    printf("%zu", sizeof(longqa_band_args));
{"".join(f'    printf(" %zu", offsetof(longqa_band_args, {name}));{chr(10)}' for name in names)}    return 0;
}}
''')
    subprocess.run([band_kernel.compiler_name(), "-o", str(tmp_path / "layout"), str(program)], check=True)
    printed = [int(x) for x in subprocess.run([str(tmp_path / "layout")], capture_output=True, text=True,
                                              check=True).stdout.split()]
    assert printed == [ctypes.sizeof(band_kernel.BandArgs)] + [getattr(band_kernel.BandArgs, n).offset for n in names]


def test_the_status_codes_are_the_headers():
    declared = {name: int(value) for name, value in re.findall(r"LONGQA_BAND_(\w+) = (\d+)", header_text())}
    assert declared == {status.name: status.value for status in band_kernel.Status}
    assert int(re.search(r"LONGQA_BAND_MAX_SIZE \(\(int64_t\)1 << (\d+)\)", header_text()).group(1)) == 30
    assert band_kernel.MAX_SIZE == 2 ** 30


def raw_args(case, **changes) -> tuple[band_kernel.BandArgs, torch.Tensor]:
    q, k, v, k_global, v_global, key_ok, slot_used = case
    batch, length, heads, head_dim = q.shape
    out = torch.zeros(batch, length, heads, head_dim, dtype=q.dtype)
    fields = dict(struct_size=ctypes.sizeof(band_kernel.BandArgs), q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(),
                  q_strides=q.stride()[:3], k_strides=k.stride()[:3], v_strides=v.stride()[:3],
                  k_global=k_global.contiguous().data_ptr(), v_global=v_global.contiguous().data_ptr(),
                  key_ok=key_ok.view(torch.uint8).data_ptr(), slot_used=slot_used.view(torch.uint8).data_ptr(),
                  out=out.data_ptr(), batch=batch, length=length, heads=heads, head_dim=head_dim, window=4,
                  n_global=k_global.shape[2], scale=1 / math.sqrt(head_dim), threads=1)
    return band_kernel.BandArgs(**{**fields, **changes}), out


@pytest.mark.parametrize("spec", VARIANTS)
def test_the_c_side_refuses_sizes_out_of_its_range(spec):
    """Behind the Python checks, the C door itself answers BAD_ARGUMENTS, writing nothing, rather than crash."""
    kernel = variant(spec)
    case = random_case(1, 64, 2, 64, 2, dtype=spec.dtype)
    args, out = raw_args(case)
    assert kernel._call(ctypes.byref(args)) == band_kernel.Status.OK and out.abs().max() > 0
    for changes in ({"window": -1}, {"window": 2 ** 63 - 1}, {"window": 2 ** 30}, {"length": -5},
                    {"n_global": 2 ** 30}, {"batch": -1}, {"threads": 0},
                    {"struct_size": ctypes.sizeof(band_kernel.BandArgs) - 8}):
        args, out = raw_args(case, **changes)
        assert kernel._call(ctypes.byref(args)) == band_kernel.Status.BAD_ARGUMENTS, changes
        assert out.abs().max() == 0
    args, _ = raw_args(case, head_dim=12)
    assert kernel._call(ctypes.byref(args)) == band_kernel.Status.BAD_HEAD_SIZE


def test_the_operator_says_when_no_kernel_computes_its_dtype():
    case = random_case(1, 64, 2, 64, 2, dtype=torch.float16)
    with pytest.raises(band_kernel.KernelUnavailable, match="no band kernel for torch.float16 runs here"):
        band_kernel.band_attention(*case, 4)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", BOTH)
def test_opcheck(dtype):
    """torch.library's own test of the operator: schema, fake against real, autograd registration, AOT dispatch."""
    for case, window in ((random_case(2, 96, 3, 64, 3, dtype=dtype), 5),
                         (random_case(1, 40, 1, 64, 2, dtype=dtype), 99)):
        results = torch.library.opcheck(torch.ops.longqa.band_attention.default, (*case, window))
        assert set(results.values()) == {"SUCCESS"}, results


@pytest.mark.slow
@pytest.mark.parametrize("dtype", BOTH)
def test_torch_compile_traces_the_operator_into_one_graph(dtype):
    graphs = []

    def capture(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    def scaled_band(q, k, v, k_global, v_global, key_ok, slot_used):
        return band_kernel.band_attention(q * 2, k, v, k_global, v_global, key_ok, slot_used, 6) + 1

    case = random_case(2, 70, 2, 64, 2, dtype=dtype)
    compiled = torch.compile(scaled_band, fullgraph=True, backend=capture)(*case)
    assert len(graphs) == 1 and "torch.ops.longqa.band_attention" in graphs[0].code
    assert torch.equal(compiled, scaled_band(*case))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", BOTH)
def test_inductor_compiles_around_the_operator(dtype):
    """With inductor's generated code before and after it (about 30 s of compiling on a loaded 2-core machine)."""
    def scaled_band(q, k, v, k_global, v_global, key_ok, slot_used):
        return band_kernel.band_attention(q * 2, k, v, k_global, v_global, key_ok, slot_used, 6).float().softmax(-1)

    case = random_case(2, 70, 2, 64, 2, dtype=dtype)
    compiled = torch.compile(scaled_band, fullgraph=True)(*case)
    assert (compiled - scaled_band(*case)).abs().max() < 1e-6


@needs_kernel
def test_the_model_calls_the_operator():
    _, fast = pair(TINY)
    fast = fast.to(torch.bfloat16)
    x = inputs(1, 300, TINY.vocab_size)
    with torch.no_grad(), torch.profiler.profile() as profile:
        fast(**x)
    counts = {event.key: event.count for event in profile.key_averages()}
    assert counts.get("longqa::band_attention") == TINY.num_hidden_layers
    assert counts.get(band_kernel.PROFILER_NAME) == TINY.num_hidden_layers


FUZZ_CASES = int(os.environ.get("LONGQA_BAND_FUZZ_CASES", "1000"))  # per kernel; scripts/band_kernel_asan.sh sets it
# allowed error, as a fraction of max|v|: the rounding of probabilities and outputs (bf16: 8-bit mantissas), plus
# the scores' fp32 rounding (a few units of 2^-24 of the largest score), which the softmax passes on to the output
FUZZ_ROUNDING = {torch.bfloat16: 2 ** -6, torch.float32: 0.0}
FUZZ_SCORE_ROUNDING = 2 ** -21


def strided_heads(generator, batch, length, heads, head_dim, dtype, scale):
    """A (B, L, H, d) tensor with unit last stride but otherwise any layout: token-major or head-major storage,
    padding after each token, head or batch, a storage offset (bf16: often off a 4-byte boundary), or one head's
    storage broadcast to all heads (stride 0)."""
    pad = [int(x) for x in torch.randint(0, 3, (3,), generator=generator)]
    offset = int(torch.randint(0, 3, (), generator=generator))
    layout = int(torch.randint(0, 4, (), generator=generator))
    if layout == 0:  # as the fused projection's split gives them: (B, L, H*d + pad) rows
        storage = torch.empty(batch, length, heads * head_dim + pad[0] + offset, dtype=dtype)
        x = storage[..., offset:offset + heads * head_dim].view(batch, length, heads, head_dim)
    elif layout == 1:  # head-major storage (B, H, L, d + pad) seen as (B, L, H, d)
        storage = torch.empty(batch, heads, length, head_dim + pad[1] + offset, dtype=dtype)
        x = storage[..., offset:offset + head_dim].transpose(1, 2)
    elif layout == 2:  # padded heads, padded batches
        storage = torch.empty(batch, length * heads * (head_dim + pad[1]) + pad[2] + offset, dtype=dtype)
        x = storage[:, offset:offset + length * heads * (head_dim + pad[1])].view(
            batch, length, heads, head_dim + pad[1])[..., :head_dim]
    else:  # every head reads the same storage: head stride 0
        storage = torch.empty(batch, length, 1, head_dim + offset, dtype=dtype)
        x = storage[..., offset:].expand(batch, length, heads, head_dim)
    storage.fill_(float("nan"))  # padding and offsets: a kernel that reads them returns NaN
    values = torch.randn(batch, length, heads, head_dim, generator=generator) * scale
    if layout == 3:  # one head's values, seen by every head
        storage[..., offset:].copy_(values[:, :, :1].to(dtype))
    else:
        x.copy_(values.to(dtype))
    return x


def fuzz_case(seed: int, dtype: torch.dtype):
    """One random call: shapes, window (0, odd, wider than the text), global slots (none to many), strides and
    offsets, masks from empty to full, magnitudes over five decades. Returns (arguments, window, a description)."""
    g = torch.Generator().manual_seed(seed)

    def pick(*choices):
        return choices[int(torch.randint(0, len(choices), (), generator=g))]

    def integer(low, high):  # inclusive
        return int(torch.randint(low, high + 1, (), generator=g))

    batch, heads = integer(1, 3), integer(1, 4)
    length = pick(integer(1, 9), integer(10, 80), integer(81, 400))
    head_dim = pick(*band_kernel.BUILDS[dtype].head_sizes)
    window = pick(0, integer(1, 8), integer(1, length + 40), integer(length, 3 * length + 100))
    n_global = pick(0, integer(1, 4), integer(5, 70))
    q_scale, v_scale = (10 ** (torch.rand((), generator=g).item() * 4 - 2) for _ in range(2))
    q, k = (strided_heads(g, batch, length, heads, head_dim, dtype, q_scale ** 0.5) for _ in range(2))
    v = strided_heads(g, batch, length, heads, head_dim, dtype, v_scale)
    globals_ = [torch.randn(batch, heads, n_global, head_dim, generator=g) * scale
                for scale in (q_scale ** 0.5, v_scale)]
    if pick(True, False):  # as the fast attention gathers them: (B, G, H, d) transposed, not contiguous
        globals_ = [x.transpose(1, 2).contiguous().transpose(1, 2) for x in globals_]
    k_global, v_global = (x.to(dtype) for x in globals_)
    density = pick(0.0, 0.3, 0.9, 1.0)
    key_ok = torch.rand(batch, length, generator=g) < density
    slot_used = torch.rand(batch, n_global, generator=g) < pick(0.0, 0.5, 1.0)
    description = (f"seed {seed}: B={batch} L={length} H={heads} d={head_dim} w={window} G={n_global} "
                   f"strides {q.stride()}/{k.stride()}/{v.stride()} offsets "
                   f"{[x.storage_offset() for x in (q, k, v)]} density {density} |q|~{q_scale:.3g} |v|~{v_scale:.3g}")
    return (q, k, v, k_global, v_global, key_ok, slot_used), window, description


@contextlib.contextmanager
def one_torch_thread():
    """The fuzz's fp64 references on one thread (the kernel keeps torch's count): their matrices are small, and on 2
    threads beside other work they took most of the fuzz's time."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def fuzz_error(dtype: torch.dtype, seed: int) -> tuple[float, float, str]:
    """The kernel's largest error against the dense reference in fp64 on one fuzz case, the case's allowed error
    (relative to max|v| over local and global values, see FUZZ_ROUNDING), and the case."""
    case, window, description = fuzz_case(seed, dtype)
    out = band_kernel.band_attention(*case, window)  # at torch's thread count (the module's mark)
    with one_torch_thread():
        reference = dense_reference(*case, window, precision=torch.float64)
    assert out.shape == reference.shape and out.dtype == dtype and out.is_contiguous()
    if not out.numel():
        return 0.0, 0.0, description
    with one_torch_thread():
        scores, values = dense_scores(*case, window, precision=torch.float64)
    allowed_scores = scores[scores.isfinite()]
    max_score = allowed_scores.abs().max().item() if allowed_scores.numel() else 0.0
    v_max = values.abs().max().item()
    allowed = v_max * (FUZZ_ROUNDING[dtype] + FUZZ_SCORE_ROUNDING * (1.0 + max_score))
    return (out.double() - reference).abs().max().item(), allowed, description


@pytest.mark.slow
@pytest.mark.parametrize("spec", VARIANTS)
def test_differential_fuzz_against_dense_attention(spec, monkeypatch):
    """FUZZ_CASES random calls per kernel variant (AMX, AVX-512 BF16, fp32) through the operator, each against every
    query over every key in fp32 masked to its band; the error allowed is relative to the values' largest
    magnitude."""
    dtype = spec.dtype
    monkeypatch.setenv(band_kernel.DISABLE_VARIABLE, spec.key)  # the operator loads this variant only
    band_kernel.load.cache_clear()
    failures = []
    try:
        assert band_kernel.kernel(dtype).spec is spec
        for seed in range(FUZZ_CASES):
            error, allowed, description = fuzz_error(dtype, seed)
            if not error <= allowed:  # NaN fails too
                failures.append(f"{description}: error {error:.3g} > {allowed:.3g}")
    finally:
        monkeypatch.undo()
        band_kernel.load.cache_clear()
    assert not failures, f"{len(failures)} of {FUZZ_CASES} cases:\n" + "\n".join(failures[:10])


def band_sdpa_calls(model, x) -> int:
    """How many fused SDPA calls one forward makes (the global rows take one per layer; the band one more on SDPA)."""
    with torch.no_grad(), torch.profiler.profile() as profile:
        model(**x)
    return sum(event.count for event in profile.key_averages()
               if event.key == "aten::_scaled_dot_product_flash_attention_for_cpu")


@pytest.mark.slow
@pytest.mark.parametrize("dtype", BOTH[1:])
def test_fp32_model_runs_the_kernel_and_matches_eager(dtype):
    eager, fast = pair(TINY)
    x = inputs(3, 1000, TINY.vocab_size)
    assert band_sdpa_calls(fast, x) == TINY.num_hidden_layers  # the band never on SDPA
    with torch.no_grad():
        assert max_logit_gap(eager(**x), fast(**x), x["attention_mask"]) < 1e-4


@needs_kernel
def test_bf16_model_runs_the_kernel_and_stays_within_eagers_rounding():
    eager, fast = pair(TINY)
    x = inputs(3, 1000, TINY.vocab_size)
    fast_bf16 = copy.deepcopy(fast).to(torch.bfloat16)
    assert band_sdpa_calls(fast_bf16, x) == TINY.num_hidden_layers  # the band never on SDPA
    with torch.no_grad():
        reference = eager(**x)
        eager_bf16 = copy.deepcopy(eager).to(torch.bfloat16)(**x)
        kernel_out = fast_bf16(**x)
    eager_error = max_logit_gap(reference, eager_bf16, x["attention_mask"])
    assert max_logit_gap(reference, kernel_out, x["attention_mask"]) <= 1.5 * eager_error + 1e-3


@needs_kernel
def test_kernel_and_sdpa_paths_agree(monkeypatch):
    _, fast = pair(TINY)
    fast = fast.to(torch.bfloat16)
    x = inputs(2, 777, TINY.vocab_size, questions=(12, 1), padding=(40, 0))
    with torch.no_grad():
        kernel_out = fast(**x)
        monkeypatch.setattr(SlidingWindowSelfAttention, "use_band_kernel", False)
        sdpa_out = fast(**x)
    assert max_logit_gap(kernel_out, sdpa_out, x["attention_mask"]) < 0.1


@pytest.mark.slow
@pytest.mark.parametrize("dtype", BOTH)
@pytest.mark.parametrize("training, grad", [(True, False), (False, True), (True, True)])
def test_gradients_and_dropout_never_reach_the_kernel(monkeypatch, dtype, training, grad):
    """The kernel has no backward and no dropout: a forward with either takes SDPA, and gradients flow."""
    def refuse(*args, **kwargs):
        raise AssertionError("the band kernel was called")

    monkeypatch.setattr(band_kernel.BandKernel, "__call__", refuse)
    _, fast = pair(TINY)
    fast = fast.to(dtype).train(training)
    x = inputs(1, 300, TINY.vocab_size)
    with torch.set_grad_enabled(grad):
        out = fast(**x)
    if grad:
        out.start_logits.float().sum().backward()
        grads = [p.grad for p in fast.parameters() if p.grad is not None]
        assert grads and all(torch.isfinite(g.float()).all() for g in grads)


def test_disabled_by_environment(monkeypatch):
    monkeypatch.setenv(band_kernel.DISABLE_VARIABLE, "0")
    band_kernel.load.cache_clear()
    try:
        assert band_kernel.kernel() is None
        assert "disabled by LONGQA_BAND_KERNEL=0" in band_kernel.status()
    finally:
        band_kernel.load.cache_clear()


def test_no_compiler_is_a_clear_reason(tmp_path):
    with pytest.raises(band_kernel.KernelUnavailable, match="no C compiler"):
        band_kernel.build(compiler="no-such-cc-here", folder=tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(band_kernel.shutil.which(band_kernel.compiler_name()) is None, reason="no C compiler")
def test_a_kernel_built_once_needs_no_compiler_after(tmp_path, monkeypatch):
    """An image that ships the built kernel but no compiler still runs it."""
    built = band_kernel.build(torch.float32, folder=tmp_path)
    monkeypatch.setattr(band_kernel.shutil, "which", lambda name: None)
    assert band_kernel.build(torch.float32, folder=tmp_path) == built
    with pytest.raises(band_kernel.KernelUnavailable, match="no C compiler"):
        band_kernel.build(torch.bfloat16, folder=tmp_path)  # not built yet: this one would need the compiler


def test_an_unwritable_cache_is_a_clear_reason(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(band_kernel.KernelUnavailable, match="cannot build into"):
        band_kernel.build(torch.float32, folder=blocker / "kernels")


def test_a_cpu_without_bf16_keeps_the_fp32_kernel_only(tmp_path, monkeypatch):
    avx2 = tmp_path / "cpuinfo"
    avx2.write_text("processor\t: 0\nflags\t\t: fpu sse sse2 avx avx2 fma\n")
    assert band_kernel.cpu_flags(avx2) >= {"avx2", "fma"} and band_kernel.cpu_flags(tmp_path / "missing") == set()
    monkeypatch.setattr(band_kernel, "cpu_flags", lambda: frozenset({"avx", "avx2", "fma"}))
    band_kernel.load.cache_clear()
    try:
        assert band_kernel.kernel(torch.bfloat16) is None
        assert "lacks avx512_bf16, avx512bw" in band_kernel.status(torch.bfloat16)
        if band_kernel.is_buildable(torch.float32):
            assert band_kernel.kernel(torch.float32) is not None
    finally:
        band_kernel.load.cache_clear()


@pytest.mark.slow
@pytest.mark.skipif(band_kernel.shutil.which(band_kernel.compiler_name()) is None, reason="no C compiler")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_built_once_per_source_then_reused(tmp_path, dtype):
    first = band_kernel.build(dtype, folder=tmp_path)
    stamp = first.stat().st_mtime_ns
    assert band_kernel.build(dtype, folder=tmp_path) == first and first.stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no scratch left behind


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16])
def test_the_load_readout_says_whether_the_band_kernel_runs(dtype):
    """On CPU the strategy's load note is the kernel's status for the model's dtype (its file, or why not)."""
    eager, _ = pair(TINY)
    strategy = FastAttention()
    strategy.transform(eager.to(dtype))
    if dtype == torch.float16:
        assert strategy.load_notes() == ()  # no kernel computes fp16: SDPA, nothing to say
        return
    name = str(dtype).removeprefix("torch.")
    assert strategy.load_notes() == (band_kernel.status(dtype),)
    running = band_kernel.kernel(dtype) is not None
    assert band_kernel.status(dtype).startswith(f"{name} band kernel: " if running else f"{name} band kernel off: ")


AMX, AVX512 = band_kernel.AMX_BUILD, band_kernel.BUILDS[torch.bfloat16]
AMX_CPU = AVX512.cpu_flags | {"amx_tile", "amx_bf16", "amx_int8"}


@pytest.mark.skipif(not all(isinstance(variant(spec), band_kernel.BandKernel) for spec in (AMX, AVX512)),
                    reason="; ".join(f"{spec.name}: {variant(spec)}" for spec in (AMX, AVX512)
                                     if not isinstance(variant(spec), band_kernel.BandKernel)))
def test_amx_and_avx512_kernels_agree_at_the_models_shape():
    """Base-model heads and window (d 64, w 256) over 1,024 tokens: the two bf16 kernels differ by bf16 rounding
    only (AMX rounds the softmax's numerators, AVX-512 the probabilities), both within it of the dense result."""
    case = random_case(1, 1024, 3, 64, 9, seed=3)
    reference = dense_reference(*case, 256)
    amx, avx512 = (variant(spec)(*case, 256).float() for spec in (AMX, AVX512))
    scale = reference.abs().max().item()
    assert (amx - reference).abs().max().item() < 2 ** -7 * scale
    assert (amx - avx512).abs().max().item() < 2 ** -6 * scale


def fake_kernel(spec: band_kernel.KernelBuild) -> band_kernel.BandKernel:
    """A BandKernel for `spec` without a library behind it: the selection tests never call it."""
    kernel = object.__new__(band_kernel.BandKernel)
    kernel.dtype, kernel.path, kernel.spec, kernel.notes = spec.dtype, band_kernel.Path(f"{spec.key}.so"), spec, ()
    return kernel


@pytest.fixture
def selection(monkeypatch):
    """Injected CPU flags and per-variant outcomes (a kernel, or a KernelUnavailable) for `band_kernel.load`."""
    outcomes = {}

    def choose(flags, **by_key):
        monkeypatch.setattr(band_kernel, "cpu_flags", lambda: frozenset(flags))
        outcomes.clear()
        outcomes.update(by_key)
        band_kernel.load.cache_clear()
        return band_kernel.load(torch.bfloat16)

    monkeypatch.setattr(band_kernel, "open_variant",
                        lambda spec: outcomes.get(spec.key) or fake_kernel(spec))
    monkeypatch.delenv(band_kernel.DISABLE_VARIABLE, raising=False)
    yield choose
    band_kernel.load.cache_clear()


def test_amx_is_chosen_where_the_cpu_has_it(selection):
    loaded = selection(AMX_CPU)
    assert loaded.spec is AMX and loaded.notes == ()
    assert band_kernel.status(torch.bfloat16) == "bfloat16 band kernel: amx.so (AMX)"


def test_without_amx_the_avx512_kernel_runs_and_the_readout_says_why(selection):
    loaded = selection(AVX512.cpu_flags)
    assert loaded.spec is AVX512
    assert loaded.notes == ("AMX kernel not used: the CPU lacks amx_bf16, amx_tile",)
    assert band_kernel.status(torch.bfloat16) == ("bfloat16 band kernel: avx512.so (AVX-512 BF16); "
                                                  "AMX kernel not used: the CPU lacks amx_bf16, amx_tile")


@pytest.mark.parametrize("why", ["Linux refused the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM): "
                                 "Operation not permitted",
                                 "cc failed to build band_attention_amx.c: unrecognized option '-mamx-tile'"])
def test_amx_refused_or_unbuildable_falls_back_to_avx512(selection, why):
    loaded = selection(AMX_CPU, amx=band_kernel.KernelUnavailable(why))
    assert loaded.spec is AVX512 and loaded.notes == (f"AMX kernel not used: {why}",)
    assert why in band_kernel.status(torch.bfloat16)


def test_the_environment_can_ask_for_the_avx512_kernel(selection, monkeypatch):
    monkeypatch.setenv(band_kernel.DISABLE_VARIABLE, "avx512")
    loaded = selection(AMX_CPU)
    assert loaded.spec is AVX512
    assert loaded.notes == ("AMX kernel not used: LONGQA_BAND_KERNEL=avx512 asks for another kernel",)


def test_the_environment_turns_every_variant_off(selection, monkeypatch):
    monkeypatch.setenv(band_kernel.DISABLE_VARIABLE, "off")
    assert str(selection(AMX_CPU)) == "disabled by LONGQA_BAND_KERNEL=off"


def test_when_no_variant_runs_the_fallbacks_reason_comes_first(selection):
    loaded = selection(AMX_CPU, amx=band_kernel.KernelUnavailable("refused"),
                       avx512=band_kernel.KernelUnavailable("no C compiler ('cc' not found; set CC to another)"))
    assert isinstance(loaded, band_kernel.KernelUnavailable)
    assert band_kernel.status(torch.bfloat16) == ("bfloat16 band kernel off: no C compiler ('cc' not found; set CC "
                                                  "to another); AMX kernel not used: refused")


@pytest.mark.skipif(not AMX.cpu_flags <= band_kernel.cpu_flags(),
                    reason=f"the CPU lacks {', '.join(sorted(AMX.cpu_flags - band_kernel.cpu_flags()))}")
def test_on_an_amx_cpu_the_loader_runs_the_amx_kernel():
    """Here for real: built, granted the tile state by Linux (a second request is granted too), loaded first."""
    loaded = band_kernel.load(torch.bfloat16)
    assert isinstance(loaded, band_kernel.BandKernel), loaded
    assert loaded.spec is AMX and loaded.notes == ()
    loaded.prepare()


def test_the_kernels_tests_run_at_torchs_own_count():
    """`torch_threads` tests run at the count torch picks for this machine in a process started as the run was,
    though the processes the tests start (under `-n 2` the workers too) inherit OMP_NUM_THREADS=1 from conftest."""
    environment = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS" and not k.startswith("LONGQA_TEST_")}
    if os.environ.get("LONGQA_TEST_OMP_NUM_THREADS"):  # the run's own setting, as the run was started
        environment["OMP_NUM_THREADS"] = os.environ["LONGQA_TEST_OMP_NUM_THREADS"]
    own = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"], env=environment,
                         capture_output=True, text=True, timeout=120, check=True).stdout.split()
    assert torch.get_num_threads() == int(own[-1])
