#!/usr/bin/env bash
# The band kernels under AddressSanitizer and UndefinedBehaviorSanitizer: builds both kernels (bf16, fp32) with
# -fsanitize=address,undefined into a scratch cache, checks that the sanitizers are live (an out-of-bounds read and a
# misaligned read passed straight to C must each stop the process with the sanitizer's report), then runs
# tests/test_band_kernel.py through the sanitized kernels: the differential fuzz (LONGQA_BAND_FUZZ_CASES per
# kernel), the refused inputs, the operator, the whole models (not the inductor compile, which builds its own C++).
#
#   scripts/band_kernel_asan.sh [pytest arguments...]      e.g. -x, or -k fuzz
#
# Environment: CC (default gcc; it must ship libasan), PYTHON (default python), LONGQA_BAND_FUZZ_CASES (default
# 2000). Python itself is not built with ASan: libasan is loaded first with LD_PRELOAD (then libstdc++), so that
# torch's allocations go through it too and a kernel reading past a tensor is caught. Leak checking is off (Python never frees
# everything at exit). Exit status: 0 when the sanitizers were live and every test passed; 1 otherwise; 2 when no
# libasan or no sanitized build.
set -uo pipefail
cd "$(dirname "$0")/.."

REAL_CC=${CC:-gcc}
PYTHON=${PYTHON:-python}
LIBASAN=$("$REAL_CC" -print-file-name=libasan.so)
if [ ! -f "$LIBASAN" ]; then
    echo "no libasan.so for $REAL_CC (Debian: apt-get install libasan8, or gcc's own)" >&2
    exit 2
fi
# libstdc++ too, loaded before the first C++ exception (torch's dispatcher throws them): ASan intercepts __cxa_throw
# and finds no real one when libstdc++ came after it ("CHECK failed: real___cxa_throw != 0")
LIBSTDCXX=$("$REAL_CC" -print-file-name=libstdc++.so.6)
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT

# band_kernel.build calls $CC with its own flags; this wrapper adds the sanitizers (and is part of the cache key,
# so the sanitized libraries never mix with the normal ones, which stay in the normal cache anyway)
cat > "$SCRATCH/cc-sanitized" <<EOF
#!/bin/sh
exec "$REAL_CC" "\$@" -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g
EOF
chmod +x "$SCRATCH/cc-sanitized"

export CC="$SCRATCH/cc-sanitized"
export LONGQA_CACHE="$SCRATCH/cache"
export LONGQA_BAND_FUZZ_CASES=${LONGQA_BAND_FUZZ_CASES:-2000}
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:exitcode=86:print_summary=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
# only python gets libasan: the compiler the tests call must not
sanitized() { LD_PRELOAD="$LIBASAN $LIBSTDCXX" "$@"; }

echo "== building both kernels with $REAL_CC -fsanitize=address,undefined"
sanitized "$PYTHON" - <<'EOF' || exit 2
import torch
from strategies import band_kernel
for dtype in band_kernel.DTYPES:
    print(band_kernel.status(dtype))
    if band_kernel.kernel(dtype) is None:
        raise SystemExit(1)
EOF
for library in "$LONGQA_CACHE"/kernels/*.so; do
    [[ "$(ldd "$library")" == *libasan* ]] || { echo "$library is not linked with libasan" >&2; exit 2; }
done

# The sanitizers must be live, else a clean run means nothing: each probe passes C a bad argument that the Python
# door would have refused, and must die with the sanitizer's report.
probe() {  # probe NAME EXPECTED_REPORT PYTHON_CODE
    local log="$SCRATCH/probe-$1.log"
    if sanitized "$PYTHON" -c "$3" >"$log" 2>&1; then
        echo "FAIL: the $1 probe ran to the end: the sanitizers are not live" >&2
        return 1
    fi
    if ! grep -q "$2" "$log"; then
        echo "FAIL: the $1 probe died without '$2':" >&2
        tail -20 "$log" >&2
        return 1
    fi
    echo "ok: the $1 probe was stopped: $(grep -m1 "$2" "$log" | cut -c1-150)"
}
PROBE_SETUP='
import ctypes, torch
from strategies import band_kernel
from tests.test_band_kernel import random_case, raw_args
kernel = band_kernel.kernel(torch.bfloat16)
case = list(random_case(1, 64, 2, 64, 2))
'
echo "== the sanitizers are live"
status=0
probe out-of-bounds "heap-buffer-overflow" "$PROBE_SETUP
case[5] = case[5][:, :8].clone()  # key_ok of 8 tokens for a text of 64
args, _ = raw_args(case)
kernel._call(ctypes.byref(args))" || status=1
# the AVX-512 BF16 kernel reads rows as 32-bit words; the AMX one copies query rows with memcpy (nothing to catch)
probe misaligned "misaligned address" "$PROBE_SETUP
kernel = band_kernel.open_kernel(band_kernel.BUILDS[torch.bfloat16])
storage = torch.empty(case[0].numel() + 1, dtype=torch.bfloat16)
case[0] = storage[1:].view(case[0].shape).copy_(case[0])  # contiguous, 2 bytes past a 4-byte boundary
args, _ = raw_args(case)
kernel._call(ctypes.byref(args))" || status=1
[ $status -eq 0 ] || exit 1

echo "== tests/test_band_kernel.py through the sanitized kernels ($LONGQA_BAND_FUZZ_CASES fuzz cases per kernel)"
sanitized "$PYTHON" -m pytest tests/test_band_kernel.py -q -p no:cacheprovider --capture=sys -k "not inductor" "$@"
result=$?
[ $result -eq 0 ] && echo "ASan + UBSan: every test passed" || echo "ASan + UBSan: pytest exited with $result" >&2
exit $((result == 0 ? 0 : 1))
