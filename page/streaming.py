"""The best answer so far as the page shows it (issue 50): the answer area and the top answers while a read goes on,
labelled provisional. The request yields it after each batch of windows (`longqa.request.request_steps`) and the
page's Ask handler yields these outputs (`page.asking.ask`). Not the answer nor Stop (`page.asking`).
"""

from __future__ import annotations

import gradio as gr
import pandas as pd

from longqa.backend import Provisional
from longqa_core.documents import Document
from page import format as fmt


def provisional_outputs(best: Provisional, documents: list[Document]) -> dict:
    """The answer area and the top answers while a read goes on: the best answer so far, its score and place, in
    its passage, labelled provisional; the readout says so for API clients (`Provisional.to_json`)."""
    answer = best.answer
    if not best.plausible:  # under the model's not-found threshold: no span in large type, none marked
        return {"answer": gr.update(value="", label=fmt.implausible_label(best.windows_read, best.windows_total)),
                "answers": pd.DataFrame(fmt.provisional_rows(best, fmt.UNDER_THE_BAR), columns=fmt.ANSWER_HEADERS),
                "evidence": None, "readout": best.to_json()}
    return {"answer": gr.update(value=answer.text, label=fmt.answer_label(fmt.provisional_label(best))),
            "answers": pd.DataFrame(fmt.provisional_rows(best), columns=fmt.ANSWER_HEADERS),
            "evidence": fmt.evidence(documents[answer.document_index].text, answer.start_char, answer.end_char),
            "readout": best.to_json()}
