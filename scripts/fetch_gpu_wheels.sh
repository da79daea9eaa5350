#!/usr/bin/env bash
# Download, on a machine with internet, the wheels the GPU machine lacks, into .whl/ (git-ignored), for
# scripts/gpu_check.sh to install there with pip --no-index. That machine has Python 3.12 on x86-64, no internet,
# and its own torch, accelerate, tokenizers, huggingface_hub 1.x, numpy, matplotlib, nvidia-ml-py and pytest.
#
#   scripts/fetch_gpu_wheels.sh [DEST]      (default .whl)
#
# What and why:
#   transformers 5.23.0   the oldest release our requirements allow; 5.24 and later need huggingface_hub 2.x,
#                         which needs httpx2 and more, none of them on that machine
#   regex                 transformers checks regex >= 2025.10.22 at import; the machine's may be older
#   pypdf                 longqa_core.documents imports it, so every test and bench worker does
#   bitsandbytes 0.50.2   the bnb_4bit / bnb_8bit rows; its CUDA libraries for other CUDA versions are dropped
#                         (the wheel is 43 MB with them, about 5 MB without) since the whole working tree that
#                         travels to the GPU machine is limited to 64 MiB
# gradio is not carried (31 MB, plus its dependencies): the one CUDA-gated app test is skipped there.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEST=${1:-$ROOT/.whl}
PYTHON=${PYTHON:-python3}
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
