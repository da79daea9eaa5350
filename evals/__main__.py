"""`python -m evals NAME ...`: one of the workshop's evaluations of the demo model, each with its own arguments
(`python -m evals NAME --help`); each writes its result into docs/results/ (docs/results/README.md lists them with the
commands that made them), and docs/demo-model.md, docs/no-answer.md, docs/reading.md and docs/documents.md say what
they found.
"""

from longqa_core.openmp_wait import limit_spin_wait

limit_spin_wait()  # before the evaluations' imports load torch, and with it libgomp, which reads it once

import sys  # noqa: E402

from evals import exact_match, guided_reading, layout_answers, not_found_rule  # noqa: E402
from evals.dispatch import run_named  # noqa: E402

EVALUATIONS = {
    "demo-model": exact_match,  # exact match on four sets (training generator, independent, notes, hand-written)
    "no-answer": not_found_rule,  # the not-found rule: right answers still found, unanswerable ones not found
    "reading": guided_reading,  # guided reading against the full read on long documents
    "layouts": layout_answers,  # documents laid out as people's files are, read as uploads and asked
}


def main(argv: list[str]) -> int:
    return run_named(EVALUATIONS, argv, "python -m evals")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
