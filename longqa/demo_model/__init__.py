"""The bundled demo model: its weights and tokenizer (the files beside this one, loaded by `longqa.loader`) and
`fact` (the one sentence and question template of its task, whose question form the product states). The task's
generators and training data are the workshop's (`training/`, `evals/`).

Imports nothing of the project.
"""
