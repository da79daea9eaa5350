"""The workshop's evaluations: generators of evaluation documents and what they need beside them (`layouts`: the
demo task's documents laid out as people's files are; `fact_breaks`: where their lines break around the asked fact;
`line_breaking`: a paragraph's lines as a typesetter breaks them; `pages`: lines poured into pages and PDFs written).

Imported only by `scripts/` and `tests/`, never by the product (`longqa_core`, `strategies`, `longqa`, `page`); not
in the wheel. May import the product's demo-task generators (`longqa.demo_model.eval_task`).
"""
