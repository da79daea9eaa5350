"""The demo model's training tasks and their data, beside the product: `demo_task` (facts hidden in English prose,
the classic task; also the documents many tests and measurements use) and `broad_task` (the broad task built on
it), and `data/` (the training prose and nouns). `scripts/train_demo_model.py` trains on them; the weights it makes
go to `longqa/demo_model`.

Imported only by `scripts/`, `tests/` and the workshop (`bench`), never by the product; not in the wheel. May
import the demo model's fact template (`longqa.demo_model.fact`).
"""
