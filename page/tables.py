"""The page's readout tables: a gradio HTML block that shows a frame, or rows under its headers, as an HTML table
(`page.format.table_html`), one card per row at a phone's width (page/style.css). Not the rows: `page.format` makes
them, and the handlers return them as they would to a gradio Dataframe.

Why not gradio's Dataframe: in 6.31 it lays its rows out absolutely (a virtual table), so no stylesheet can turn
them into cards, and its columns cannot hold their longest words at a phone's width. gradio writes a stub
(tables.pyi) beside the source of every component class when the class is made, unless an up-to-date one is there:
it is kept in the repository, so that a deployment never writes into its own folder.
"""

from __future__ import annotations

import gradio as gr
import pandas as pd

from page import format as fmt


class ReadoutTable(gr.HTML):
    """A read-only table titled `label`: its value is a frame (its columns the headers), or rows under `headers`.

    What it sends is what gradio's Dataframe sent, `{"headers": [...], "data": [[...]]}` (API clients read the
    tables as before), with the table's HTML beside them (`"html"`), which the page shows."""

    def __init__(self, value=None, *, headers: list[str], label: str, **kwargs):
        self.headers = list(headers)
        kwargs.setdefault("js_on_load", None)  # no click event: nothing to click
        kwargs.setdefault("html_template", "${value.html}")
        super().__init__(value, label=label, **kwargs)

    def postprocess(self, value) -> dict:
        if isinstance(value, pd.DataFrame):
            headers, rows = list(value.columns), value.astype(object).values.tolist()
        else:
            headers, rows = self.headers, [list(row) for row in value or []]
        rows = [[None if cell is None or (isinstance(cell, float) and cell != cell) else cell for cell in row]
                for row in rows]  # no NaN: JSON has none
        return {"headers": headers, "data": rows, "html": fmt.table_html(self.label, headers, rows)}

    def api_info(self) -> dict:
        return {"type": "object", "properties": {"headers": {"type": "array", "items": {"type": "string"}},
                                                 "data": {"type": "array", "items": {"type": "array", "items": {}}},
                                                 "html": {"type": "string"}}}
