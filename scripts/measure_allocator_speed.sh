#!/bin/bash
# The forward pass's seconds under glibc's allocator settings, interleaved, one process per read (glibc reads its
# MALLOC_* variables at start): glibc's defaults, 2 arenas (what `python app.py` starts with), and 2 arenas with a
# 4 MB mmap threshold (tried for issue 40 item 6 and dropped: every large tensor then faults in fresh pages).
# Usage: scripts/measure_allocator_speed.sh [ROUNDS] [MODEL] [FILE]     (defaults: 4, arch:base, the expedition notes)
# Prints one line per read: setting, user and system CPU seconds, wall seconds, the forward pass's seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-4}; model=${2:-arch:base}; file=${3:-longqa/samples/expedition_notes.md}
out=$(mktemp -d)
for round in $(seq "$rounds"); do
  for setting in defaults arenas arenas+mmap4MB; do
    case $setting in
      defaults) env_set=() ;;
      arenas) env_set=(MALLOC_ARENA_MAX=2) ;;
      arenas+mmap4MB) env_set=(MALLOC_ARENA_MAX=2 MALLOC_MMAP_THRESHOLD_=4194304) ;;
    esac
    env -u MALLOC_ARENA_MAX -u MALLOC_MMAP_THRESHOLD_ "${env_set[@]}" /usr/bin/time -f "%U %S %e" -o "$out/time" \
      python -m longqa ask --model "$model" --profile cpu --reading full -q "What is the frequency of the beacon?" \
      "$file" --json > "$out/answer.json" 2>/dev/null
    forward=$(python -c "import json,sys; print(round(json.load(open(sys.argv[1]))['latency_s']['forward'], 3))" \
      "$out/answer.json")
    read -r user sys wall < "$out/time"
    echo "round $round $setting user_s $user sys_s $sys wall_s $wall forward_s $forward"
  done
done
rm -rf "$out"
