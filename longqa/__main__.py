"""Entry point for `python -m longqa`."""

from longqa.cli import main

raise SystemExit(main())
