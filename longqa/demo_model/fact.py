"""The demo task's one fact and its question: the sentence and question templates that both the training generator
(`training.demo_task`) and the evaluation-only generator (`evals.eval_task`) write, nothing else they could share."""

from __future__ import annotations

from dataclasses import dataclass

QUESTION_FORM = "What is the <attribute> of <name>?"  # the one question shape the demo model was trained on
# the answer area says whether what is shown is a guess ("found": null) or that nothing was found: not the notice
FORM_NOTICE = (f"The demo model answers questions of the form \u201c{QUESTION_FORM}\u201d. This question is not of "
               "that form.")


@dataclass(frozen=True)
class Fact:
    attribute: str
    entity: str
    value: str

    @property
    def sentence(self) -> str:
        return f"The {self.attribute} of {self.entity} is {self.value}."

    @property
    def question(self) -> str:
        return f"What is the {self.attribute} of {self.entity}?"
