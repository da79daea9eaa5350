"""Entry point for `python -m longqa` and for the `longqa` console script (which imports this module and calls
`main`): either way the spin count is set before the command line's imports load torch."""

from longqa_core.openmp_wait import limit_spin_wait

limit_spin_wait()  # before the command line's imports load torch, and with it libgomp, which reads it once

from longqa.cli import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
