"""Entry point for `python -m longqa`."""

from longqa_core.openmp_wait import limit_spin_wait

limit_spin_wait()  # before the command line's imports load torch, and with it libgomp, which reads it once

from longqa.cli import main  # noqa: E402

raise SystemExit(main())
