"""The bundled demo model: its weights and tokenizer (the files beside this one, loaded by `longqa.loader`) and the
generators of the task it answers: `demo_task` and `broad_task` (what training saw: the classic task and the broad
one), `eval_task` (an independent generator for evaluation only), `fact` (the one sentence and question template
they share), `data/` (the training prose and nouns).

Imports nothing of the project: the generators make text, they load no model.
"""
