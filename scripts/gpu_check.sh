#!/usr/bin/env bash
# The GPU check in one command: the CUDA-gated tests, then the strategy bench on Longformer-large at 4,096 tokens,
# batch 1 and 8, for every profile and stack one GPU can run, with the planner's prediction beside every row (its
# peak beside torch's peak allocated bytes, its need with the CUDA context and the allocator's slack beside NVML's
# used bytes), and `python -m longqa plan` for this GPU and the same model into plan.json.
# Made for one H200 with no internet: it installs only the wheels --fetch-wheels put in .whl/, and
# ends within GPU_CHECK_BUDGET_S (default 470 s): a bench cut short keeps and reports the rows it measured.
#
#   scripts/gpu_check.sh [--out DIR]        on the GPU machine; writes DIR (default docs/results/bench-gpu):
#                                           results.json, results.md, results.png, workers.log, gpu_check.log
#   scripts/gpu_check.sh --dry [--out DIR]  the same steps on CPU with the bundled demo model at 1,024 tokens, 1
#                                           check and 1 timed run per row (GPU profiles are listed as skipped),
#                                           into DIR (default a new temporary folder), never docs/results/bench-gpu
#   scripts/gpu_check.sh --fetch-wheels [--out DIR]   on a machine with internet: downloads the wheels the GPU
#                                           machine lacks into DIR (default .whl/, git-ignored), for the check to
#                                           install there with pip --no-index. That machine has Python 3.12 on
#                                           x86-64, no internet, and its own torch, accelerate, tokenizers,
#                                           huggingface_hub 1.x, numpy, matplotlib, nvidia-ml-py and pytest.
#   What and why:
#     transformers 5.23.0   the oldest release our requirements allow; 5.24 and later need huggingface_hub 2.x,
#                           which needs httpx2 and more, none of them on that machine
#     regex                 transformers checks regex >= 2025.10.22 at import; the machine's may be older
#     pypdf                 longqa_core.documents imports it, so every test and bench worker does
#     bitsandbytes 0.50.2   the bnb_4bit / bnb_8bit rows; its CUDA libraries for other CUDA versions are dropped
#                           (the wheel is 43 MB with them, about 5 MB without) since the whole working tree that
#                           travels to the GPU machine is limited to 64 MiB
#   gradio is not carried (31 MB, plus its dependencies): the one CUDA-gated app test is skipped there.
#
# Environment: PYTHON, the interpreter every step runs (default python3 from PATH): name the one that has torch, e.g.
# PYTHON=.venv/bin/python scripts/gpu_check.sh --dry for a virtual environment that is not activated (relative to
# where you call from). The script prints it with its version first, and stops before any step when it cannot import
# torch. Also GPU_CHECK_BUDGET_S, TEST_BUDGET_S (default 150), TOKENS, CHECKS, REPEAT, GPU_CHECK_PROFILES (the bench's
# --profiles, default the list below; the suite's dry run measures one); for --fetch-wheels KEEP_CUDA
# (default 13, the CUDA major version of the GPU machine's torch) and MAX_MIB (default 40).
# Exit status: 0 when every test passed and every bench row was measured, 1 otherwise, 2 for bad usage, a PYTHON that
# is missing or cannot import torch, or (on the GPU machine) a torch that sees no GPU.
set -uo pipefail

CALL="$0${*:+ $*}"  # to show how to call again with another PYTHON
MODE=gpu
OUT=""
while [ $# -gt 0 ]; do
    case "$1" in
        --dry) MODE=dry ;;
        --fetch-wheels) MODE=fetch ;;
        --out) OUT=${2:?--out needs a folder}; shift ;;
        --out=*) OUT=${1#--out=} ;;
        -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;  # the comment block above
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

# Resolved before the cd below, so that a relative PYTHON (.venv/bin/python) names the file it named to the caller.
PYTHON=${PYTHON:-python3}
if ! resolved=$(command -v "$PYTHON"); then
    echo "PYTHON=$PYTHON: no such interpreter (give a path to a python that has torch, or a name on PATH)" >&2
    exit 2
fi
case $resolved in /*) PYTHON=$resolved ;; *) PYTHON=$PWD/$resolved ;; esac

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
# Nothing is fetched: the GPU machine has no network, and a library that tries would wait for a timeout first.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 PYTHONUNBUFFERED=1
BUDGET_S=${GPU_CHECK_BUDGET_S:-470}
TEST_BUDGET_S=${TEST_BUDGET_S:-150}
RESERVE_S=55  # for the rescore, the plan command and the summary after the bench
BATCHES=1,8
# fp32 reference; fast vs eager attention in fp32 and in bf16; fp16; the registry's one-GPU profiles; bnb 4-bit;
# offload. multi-gpu (replicas) and model_split need two GPUs: their tests use fakes.
PROFILES="baseline-fp32,custom:fast_attention,custom:half_precision,custom:half_precision(dtype=bf16)"
PROFILES+=",custom:half_precision(dtype=bf16)+fast_attention,rtx-3090-24gb,t4-16gb,consumer-gpu,datacenter"
PROFILES+=",custom:half_precision+bnb_4bit,custom:offload"
PROFILES=${GPU_CHECK_PROFILES:-$PROFILES}

fetch_wheels() (  # in a subshell: its steps stop at the first failure, the check's steps do not
    set -e
    DEST=$1
    PACKAGES=(transformers==5.23.0 regex==2026.5.9 pypdf==7.1.1 bitsandbytes==0.50.2)
    KEEP_CUDA=${KEEP_CUDA:-13}  # CUDA major version of the GPU machine's torch (2.11.0+cu130)
    MAX_MIB=${MAX_MIB:-40}  # what the wheels may take of the 64 MiB, leaving the rest for the working tree

    mkdir -p "$DEST"
    "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any \
        -d "$DEST" "${PACKAGES[@]}"

    # Keep one version of each of these packages: two wheels of one name stop the whole install there.
    "$PYTHON" - "$DEST" "${PACKAGES[@]}" <<'EOF'
import re, sys
from pathlib import Path

dest, wanted = Path(sys.argv[1]), dict(p.split("==") for p in sys.argv[2:])
for wheel in dest.glob("*.whl"):
    name, version = wheel.name.split("-")[:2]
    key = re.sub(r"[-_.]+", "-", name).lower()
    if key in wanted and version != wanted[key]:
        print(f"removing {wheel.name}: another version than {wanted[key]}")
        wheel.unlink()
EOF

    # bitsandbytes: drop the CUDA libraries of other CUDA versions and ROCm/XPU (and their RECORD lines).
    "$PYTHON" - "$KEEP_CUDA" "$DEST"/bitsandbytes-*.whl <<'EOF'
import re, sys, zipfile
from pathlib import Path

keep_major, wheel = sys.argv[1], Path(sys.argv[2])
library = re.compile(r"bitsandbytes/libbitsandbytes_(cuda(\d+)|rocm\d+|xpu\d+)\.(so|dll|dylib)$")

def dropped(name: str) -> bool:
    match = library.search(name)
    return bool(match) and not (match.group(2) or "").startswith(keep_major)

with zipfile.ZipFile(wheel) as source:
    entries = [(info, source.read(info)) for info in source.infolist()]
if any(dropped(info.filename) for info, _ in entries):
    pruned = wheel.with_suffix(".pruning")
    with zipfile.ZipFile(pruned, "w", zipfile.ZIP_DEFLATED) as target:
        for info, data in entries:
            if dropped(info.filename):
                continue
            if info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines()
                data = ("\n".join(line for line in lines if not dropped(line.split(",")[0])) + "\n").encode()
            target.writestr(info, data)
    pruned.replace(wheel)
    print(f"pruned {wheel.name} to the CUDA {keep_major}.x libraries: {wheel.stat().st_size / 2**20:.1f} MiB")
EOF

    total_kib=$(du -sk "$DEST" | cut -f1)
    ls -la "$DEST"
    echo "wheels: $((total_kib / 1024)) MiB in $DEST"
    if [ $((total_kib / 1024)) -gt "$MAX_MIB" ]; then
        echo "error: more than $MAX_MIB MiB of wheels; the working tree and the wheels must fit in 64 MiB" >&2
        exit 1
    fi
)

if [ "$MODE" = fetch ]; then
    fetch_wheels "${OUT:-$ROOT/.whl}"
    exit $?
fi

if [ "$MODE" = dry ]; then
    MODEL=demo
    TOKENS=${TOKENS:-1024}  # the demo model reads 4,096 too, but 2 CPU cores take a minute longer
    CHECKS=${CHECKS:-1}
    REPEAT=${REPEAT:-1}
    if [ -n "$OUT" ] && [ "$(cd "$(dirname "$OUT")" 2>/dev/null && pwd)/$(basename "$OUT")" \
            = "$ROOT/docs/results/bench-gpu" ]; then
        echo "--dry never writes docs/results/bench-gpu: give another --out" >&2
        exit 2
    fi
else
    MODEL=arch:large
    TOKENS=${TOKENS:-4096}
    CHECKS=${CHECKS:-5}
    REPEAT=${REPEAT:-3}
    OUT=${OUT:-docs/results/bench-gpu}
fi

# Every step runs PYTHON, and without torch each would fail on its own, after minutes, with only a traceback: a
# python3 on PATH that is not the virtual environment's (one not activated) looks exactly like that. So check once,
# before anything is written, and name the interpreter. From here on PYTHON is that interpreter's own path (a pyenv
# shim or a venv link resolved as Python itself reports it), so that every step runs the very one named here.
if ! PYTHON_ID=$("$PYTHON" -c 'import platform, sys; print(sys.executable, platform.python_version())'); then
    echo "PYTHON=$PYTHON does not run as Python (its error is above): give a python that has torch" >&2
    exit 2
fi
PYTHON_VERSION=${PYTHON_ID##* }
if [ -n "${PYTHON_ID% *}" ]; then PYTHON=${PYTHON_ID% *}; fi  # sys.executable is empty where Python cannot tell
if ! torch_error=$("$PYTHON" -c "import torch" 2>&1); then
    echo "$PYTHON (Python $PYTHON_VERSION) cannot import torch: $(printf '%s\n' "$torch_error" | tail -n 1)" >&2
    echo "Choose an interpreter that has torch with PYTHON, e.g. PYTHON=/path/to/venv/bin/python $CALL" \
         "(the default is python3 from PATH, which an unactivated virtual environment does not change)" >&2
    exit 2
fi

if [ -z "$OUT" ]; then OUT=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-dry.XXXXXX") || exit 2; fi  # --dry's default
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
LOG="$OUT/gpu_check.log"
SITE=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-site.XXXXXX")
trap 'rm -rf "$SITE"' EXIT

step() { printf '\n===== %s (%d s in)\n' "$*" "$SECONDS"; }

install_wheels() {
    # Each wheel on its own, so that in --dry a wheel built for another Python (regex for 3.12) is only
    # reported; on the GPU machine every one must install.
    local wheel failed=0
    if ! compgen -G ".whl/*.whl" >/dev/null; then
        echo "no wheels in .whl/ (run scripts/gpu_check.sh --fetch-wheels where there is internet): using what is installed"
        return 0
    fi
    for wheel in .whl/*.whl; do
        if "$PYTHON" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
                --target "$SITE" "$wheel" 2>"$SITE.err"; then
            echo "installed $(basename "$wheel")"
        elif [ "$MODE" = dry ] && grep -q "is not a supported wheel" "$SITE.err"; then
            echo "skipped $(basename "$wheel"): built for another Python than this one"
        else
            cat "$SITE.err"
            failed=1
        fi
    done
    rm -f "$SITE.err"
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
    return $failed
}

cuda_test_files() {
    # The test files with CUDA-gated tests whose imports this machine has (gradio is not carried to the GPU).
    # Whether gradio is installed is asked once, of its files (importing it takes seconds).
    local file has_gradio=1
    "$PYTHON" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('gradio') is None)" || has_gradio=0
    for file in $(grep -l "requires_cuda" tests/test_*.py); do
        if grep -qE "^(import app|from app |import gradio|from gradio)" "$file" && [ "$has_gradio" = 0 ]; then
            echo "not run (gradio is not installed): $file" >&2
            continue
        fi
        echo "$file"
    done
}

summarize() {
    "$PYTHON" - "$OUT/results.json" <<'EOF'
import json, sys

results = json.load(open(sys.argv[1]))
rows = results["rows"]
gb = lambda v: f"{v / 1e9:6.2f}" if v is not None else "     –"
print(f"{len(rows)} rows, {sum(1 for r in rows if r.get('error'))} failed, {len(results.get('skipped', []))} "
      "profiles skipped here")
for r in rows:
    if r.get("error"):
        print(f"  {r['kind']:9} {r['profile']:48} b{r['batch']}: ERROR {r['error']}")
        continue
    label = r["profile"] + (" + checkpointing" if r.get("checkpointing") else "")
    error, need_error = r.get("prediction_error_pct"), r.get("need_error_pct")
    need = "" if r.get("predicted_need_bytes") is None else (
        f", NVML used {gb(r.get('nvml_used_bytes'))} GB, planned need {gb(r['predicted_need_bytes'])} GB "
        f"({'–' if need_error is None else f'{need_error:+.0f} %'})")
    print(f"  {r['kind']:9} {label:48} b{r['batch']}: peak {gb(r.get('peak_bytes'))} GB, predicted "
          f"{gb(r.get('predicted_peak_bytes'))} GB ({'–' if error is None else f'{error:+.0f} %'}){need}, "
          f"{r['latency_s_median'] * 1000:8.1f} ms")
for s in results.get("skipped", []):
    print(f"  skipped {s['profile']}: {s['reason']}")
settings = results["settings"]
measured = {(r["kind"], r["profile"], r["batch"]) for r in rows}
planned = [("inference", p, b) for b in settings["batch"] for p in settings["profiles"]]
planned += [("training", "baseline-fp32", min(settings["batch"]))]
missing = [row for row in planned if row not in measured]
if missing:
    print(f"  not measured (out of time): {', '.join(f'{k} {p} b{b}' for k, p, b in missing)}")
EOF
}

main() {
    local tests_rc=0 bench_rc=0 install_rc=0 files
    step "GPU check ($MODE) into $OUT"
    echo "python: $PYTHON (Python $PYTHON_VERSION; choose another with PYTHON=...)"
    date -u
    git log -1 --format='commit %H %s' 2>/dev/null
    if command -v nvidia-smi >/dev/null; then nvidia-smi -L; fi

    step "wheels"
    install_wheels || install_rc=1
    "$PYTHON" - <<'EOF' || return 1
import importlib, platform, torch
print("python", platform.python_version(), "| torch", torch.__version__, "| CUDA", torch.version.cuda,
      "| GPUs", [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])
for name in ("transformers", "accelerate", "tokenizers", "huggingface_hub", "bitsandbytes", "pypdf", "pynvml"):
    try:
        module = importlib.import_module(name)
        print(f"  {name} {getattr(module, '__version__', '?')} from {module.__file__}")
    except Exception as exc:
        print(f"  {name}: not importable ({type(exc).__name__}: {exc})")
EOF
    if [ "$MODE" = gpu ] && ! "$PYTHON" -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; then
        echo "torch sees no CUDA GPU here: run scripts/gpu_check.sh --dry on CPU instead"
        return 2
    fi

    step "CUDA-gated tests (pytest -m requires_cuda)"
    files=$(cuda_test_files)
    # shellcheck disable=SC2086  # one word per file
    timeout --signal=INT --kill-after=20 "$TEST_BUDGET_S" "$PYTHON" -m pytest -m requires_cuda -q -rs \
        -p no:cacheprovider $files
    tests_rc=$?

    local left=$((BUDGET_S - SECONDS - RESERVE_S))
    step "bench: $MODEL, $TOKENS tokens, batch $BATCHES, $CHECKS checks, $REPEAT timed runs, at most $left s"
    timeout --signal=INT --kill-after=30 "$left" "$PYTHON" -m longqa bench --model "$MODEL" --profiles "$PROFILES" \
        --tokens "$TOKENS" --batch "$BATCHES" --checks "$CHECKS" --repeat "$REPEAT" --out "$OUT"
    bench_rc=$?
    if [ $bench_rc -ge 124 ] && [ -f "$OUT/results.json" ]; then
        echo "the bench ran out of time: reporting the rows it measured"
        "$PYTHON" -m longqa bench --rescore --out "$OUT"
    fi

    step "the plan command for this GPU (predictions made without it, beside the rows above)"
    local gpu_args=(--gpu H200)  # --dry: the card the check is made for
    if [ "$MODE" = gpu ]; then
        read -r -a gpu_args < <("$PYTHON" -c "import torch; p = torch.cuda.get_device_properties(0); print(
            f'--gpu-memory {p.total_memory / 1e9:.1f} --compute-capability {p.major}.{p.minor}')")
    fi
    if "$PYTHON" -m longqa plan --model "$MODEL" "${gpu_args[@]}" --tokens "$TOKENS" --batch 8 --json \
            >"$OUT/plan.json"; then
        echo "python -m longqa plan ${gpu_args[*]}: recommends $("$PYTHON" -c \
            "import json, sys; print(json.load(open(sys.argv[1]))['recommended'])" "$OUT/plan.json"), in $OUT/plan.json"
    else
        echo "the plan command failed"
    fi

    step "summary"
    if [ -f "$OUT/results.json" ]; then summarize; else echo "no results.json"; fi
    echo "install rc=$install_rc, tests rc=$tests_rc, bench rc=$bench_rc; took $SECONDS s; outputs in $OUT"
    [ $install_rc -eq 0 ] && [ $tests_rc -eq 0 ] && [ $bench_rc -eq 0 ]
}

main 2>&1 | tee "$LOG"
exit "${PIPESTATUS[0]}"
