"""The workshop's commands by name (`python -m bench NAME ...`, `python -m evals NAME ...`): one module of a table
answers to its name with the arguments after it, and a refused input is one line, as the product's command line
does it. Here rather than in `bench` because `bench` imports `evals`, never the reverse.
"""

from __future__ import annotations

import sys

from longqa_core.errors import LongQAError


def run_named(table: dict, argv: list[str], prog: str) -> int:
    """`table[argv[0]].main(argv[1:])`; the usage line (on stdout for -h/--help, exit 0; else on stderr, exit 2)
    where `argv` names none of the table's entries; 2 and `error: ...` on stderr for a refused input."""
    asked_for_help = argv[:1] in (["-h"], ["--help"])
    if not argv or argv[0] not in table:
        usage = f"usage: {prog} {{{','.join(table)}}} [ARGUMENTS ...]  ({prog} NAME --help)"
        print(usage, file=sys.stdout if asked_for_help else sys.stderr)
        return 0 if asked_for_help else 2
    try:
        return table[argv[0]].main(argv[1:])
    except LongQAError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
