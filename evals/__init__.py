"""The workshop's evaluations: the independent evaluation generator (`eval_task`: documents that share no word list,
name code or prose with training), long documents with paraphrased questions (`long_eval`), questions whose answer
is absent (`no_answer_eval`), and the layout evaluations (`layouts`: the evaluation documents laid out as people's
files are; `fact_breaks`: where their lines break around the asked fact; `line_breaking`: a paragraph's lines as a
typesetter breaks them; `pages`: lines poured into pages and PDFs written).

Imported only by `scripts/`, `tests/` and the workshop (`bench`), never by the product (`longqa_core`, `strategies`,
`longqa`, `page`); not in the wheel. May import the product (the demo model's fact template, the readers), never
the training tasks (`training`): an evaluation that saw them would not be independent.
"""
