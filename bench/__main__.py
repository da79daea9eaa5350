"""`python -m bench NAME ...`: one of the workshop's measurements, each with its own arguments
(`python -m bench NAME --help`); docs/cpu-floor.md, docs/reading.md and docs/streaming.md say what they found,
docs/results/ keeps it. The strategy table for a user's own machine is the product's: `python -m longqa bench`.
"""

from longqa_core.openmp_wait import limit_spin_wait

limit_spin_wait()  # before the measurements' imports load torch, and with it libgomp, which reads it once

import sys  # noqa: E402

from bench import (band_kernels, cpu_seconds, first_answer, floor, heap, levers, page_wait, peers,  # noqa: E402
                   reading_sweep, streaming, window_profile)
from evals.dispatch import run_named  # noqa: E402

MEASUREMENTS = {
    "floor": floor,  # this CPU's compute floor of one window per precision, written as JSON
    "window": window_profile,  # where one window's time goes, under torch.profiler
    "levers": levers,  # the cpu stack's levers one at a time, side by side
    "cpu-seconds": cpu_seconds,  # one window against its floors in one thread's CPU seconds
    "kernels": band_kernels,  # the bf16 band kernels side by side
    "first-answer": first_answer,  # a 100-page PDF read whole, guided, and guided in sized windows: the first answer
    "heap": heap,  # a CPU forward's large buffers kept in the heap against glibc's defaults, side by side
    "page-wait": page_wait,  # the visitor's wait in chromium, click to answer, against the engine's time
    "peers": peers,  # one window through the cpu profile and its peers: eager, torch.compile, OpenVINO, ONNX Runtime
    "reading": reading_sweep,  # the cost-growth curve of reading, full against guided, by document length
    "stream": streaming,  # what streaming the best answer so far costs and gains
}


def main(argv: list[str]) -> int:
    return run_named(MEASUREMENTS, argv, "python -m bench")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
