"""The workshop's evaluations: the independent evaluation generator (`eval_task`: documents that share no word list,
name code or prose with training), long documents with paraphrased questions (`long_eval`), questions whose answer
is absent (`no_answer_eval`), and the layout evaluations (`layouts`: the evaluation documents laid out as people's
files are; `fact_breaks`: where their lines break around the asked fact; `line_breaking`: a paragraph's lines as a
typesetter breaks them; `pages`: lines poured into pages and PDFs written); and the evaluations that run the demo
model over them, one command each (`python -m evals NAME`, `__main__`): `exact_match` (demo-model), `not_found_rule`
(no-answer), `guided_reading` (reading), `layout_answers` (layouts); `dispatch` runs a command by its name, for
`python -m bench` too.

Imported only by `scripts/`, `tests/` and the workshop (`bench`), never by the product (`longqa_core`, `strategies`,
`longqa`, `page`); not in the wheel. May import the product (the demo model's fact template, the readers, the
loader and the engine). The generators never import the training tasks (`training`): an evaluation that saw them
would not be independent; only `exact_match` does, for its training-generator set, which measures how well the
model learned the generator it was trained on.
"""
