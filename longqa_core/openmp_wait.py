"""How long this process's idle OpenMP threads spin before they sleep, set before torch loads its OpenMP runtime
(libgomp on Linux): the entry points (`app.py`, `python -m longqa`, the measuring scripts) call `limit_spin_wait`
first. docs/cpu-floor-amx.md measures why.

It sets an environment variable only: it imports no torch, starts no thread and changes nothing once libgomp is
loaded (libgomp reads its settings once, when it loads). Where torch uses another OpenMP runtime (macOS, Windows,
Intel's) the variable is read by nothing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SPIN_VARIABLE = "GOMP_SPINCOUNT"
# The operator's settings win: libgomp's spin count, and the standard wait policy (PASSIVE sleeps at once, ACTIVE
# spins for minutes).
OPERATOR_VARIABLES = (SPIN_VARIABLE, "OMP_WAIT_POLICY")
# libgomp's default is 300,000 spins (its comment reckons 3 ms; one spin is a load and a `pause`: 9.5 ns on the Xeon
# with AMX of docs/cpu-floor-amx.md, so 2.9 ms there) after every parallel region, on each thread that finished its
# share. On a CPU shared with other processes those spins are CPU time taken from the threads that still have work:
# there a 4,096-token window of arch:base on 2 cores took 1.3x the wall time and 1.5x the CPU seconds
# (docs/cpu-floor-amx.md). 10,000 spins (about 0.1 ms there) still cover most gaps between one operator and the next
# in a forward pass (the same page measures them).
SERVER_SPIN_COUNT = 10_000
MAPS = Path("/proc/self/maps")


def is_openmp_loaded() -> bool:
    """Whether libgomp (or torch, which loads it) is in this process already: too late to set its spin count."""
    if "torch" in sys.modules:
        return True
    try:
        return "libgomp" in MAPS.read_text()
    except OSError:
        return False


def limit_spin_wait(spin_count: int = SERVER_SPIN_COUNT) -> dict[str, str]:
    """Set GOMP_SPINCOUNT to `spin_count` for this process and the processes it starts, unless the environment sets
    GOMP_SPINCOUNT or OMP_WAIT_POLICY (the operator's choice) or libgomp is loaded already. Returns what was set."""
    if any(name in os.environ for name in OPERATOR_VARIABLES) or is_openmp_loaded():
        return {}
    os.environ[SPIN_VARIABLE] = str(int(spin_count))
    return {SPIN_VARIABLE: os.environ[SPIN_VARIABLE]}
