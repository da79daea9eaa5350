"""The page's run history: a table and two bar plots coloured by profile, one bar per run, kept per browser tab; an
answer and a comparison each add their runs. Not the runs themselves: the answer and compare panels make them.
"""

from __future__ import annotations

from datetime import datetime, timezone

import gradio as gr
import pandas as pd

from longqa.readout import Readout
from page import format as fmt
from page.tables import ReadoutTable
from strategies.profiles import PROFILES


def build_history_panel() -> dict:
    """This page's runs: a table and two bar plots with one bar per row of the table, coloured by profile (the answer
    and compare panels fill them)."""
    history = gr.State([])
    history_table = ReadoutTable(headers=fmt.HISTORY_HEADERS, label="Run history (this page)")
    # What gradio 6.31 draws right (tests/test_app_browser.py counts the bars drawn in Chromium):
    # - An update carries the plot's data only. An update that also changes a plot property (y_lim, sort, ...)
    #   rebuilds the chart from the data the plot held before the update, while the new data goes to the chart
    #   being replaced: the bars lagged one answer behind the table. So the y axis starts from zero here (left
    #   alone, it starts at the smallest bar and hides it), and its top (`format.plot_top`: with y_lim set, Vega-Lite
    #   leaves the axis un-"niced", and the tallest bar touched the plot's top) comes after the data, with the colours.
    # - No data until the first answer: a chart first drawn from an empty frame keeps that frame's layout after
    #   data arrives, its axis titles and labels cut; with none, the first answer draws it whole.
    # - Colour by profile: the chart's colour scale keeps the profiles of the data it was drawn from, and a bar of a
    #   profile it does not know is not drawn. So the data goes first, and an event after it (`recolour_after`)
    #   sets the colours of the profiles in the history, which redraws the chart from the data it now holds when a
    #   new profile arrives (the map changes only then).
    # - Except the first data, which comes with the colours (`plot_outputs`): gradio applies an update's keys one
    #   at a time, its value last, so the colour map is set while the plot has no chart yet and the data then
    #   draws the chart once, coloured. Sent after it, the map would start a second drawing while the first was
    #   still loading Vega, and whichever finished last stayed: in default colours 3 times in 6 under load.
    # Run numbers stand upright: twenty of them fit side by side in a plot on a 400 px phone.
    plot = dict(x="run", color="profile", y_lim=[0, None], x_label_angle=-90,
                tooltip=["profile", "strategies", "reading"], color_title="profile")
    with gr.Row(elem_id="plots"):
        memory_plot = gr.BarPlot(None, y=fmt.PLOT_MEMORY, label="Peak memory by run",
                                 y_title="peak memory (MB, GPU else host RSS)", min_width=300, **plot)
        latency_plot = gr.BarPlot(None, y=fmt.PLOT_LATENCY, label="Latency by run", min_width=300, **plot)
    return {"history": history, "history_table": history_table, "memory_plot": memory_plot,
            "latency_plot": latency_plot}


def profile_colours(runs: list[dict]) -> dict[str, str]:
    """The plots' colour for each profile in the history."""
    return fmt.profile_colours(list(PROFILES), runs)


def plot_outputs(earlier: list[dict], runs: list[dict]) -> dict:
    """Both plots' new data, one bar per run of `runs`, after `earlier` runs: the data alone, but for the page's
    first data, which comes with the profiles' colours (see build_history_panel)."""
    plotted = fmt.history_frame(runs)
    if earlier:
        return {"memory_plot": gr.update(value=plotted), "latency_plot": gr.update(value=plotted)}
    # one update per plot: gradio takes the value out of the update it processes
    return dict(zip(("memory_plot", "latency_plot"), plot_properties(runs, plotted, value=plotted)))


def plot_properties(runs: list[dict], plotted: pd.DataFrame | None = None, **value) -> tuple[dict, dict]:
    """Each plot's properties over the history `runs` (`plotted`: its data, where already made): the profiles'
    colours and the y axis's range (and `value`, for the page's first data)."""
    frame = plotted if plotted is not None else fmt.history_frame(runs)
    colours, limits = profile_colours(runs), fmt.plot_limits(frame)
    return (gr.update(color_map=colours, y_lim=limits[fmt.PLOT_MEMORY], **value),
            gr.update(color_map=colours, y_lim=limits[fmt.PLOT_LATENCY], **value))


def history_outputs(runs: list[dict] | None, readouts: list[Readout], documents: list[str] | None = None) -> dict:
    """The history (the page's state) with one run added per readout (`documents`: their names, else each readout's
    own), its table, and the plots' data (`plot_outputs`): what an answer and a comparison both show."""
    earlier = list(runs or [])
    runs = list(earlier)
    finished_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    for readout in readouts:
        runs.append(fmt.history_entry(readout, len(runs) + 1, documents, finished_at))
    return {"history": runs, "history_table": pd.DataFrame(fmt.history_rows(runs),
                                                           columns=fmt.HISTORY_HEADERS),
            **plot_outputs(earlier, runs)}


def recolour_after(history: dict, *events) -> None:
    """After each event that adds runs: the plots' colours for the profiles in the history and their y axes' tops
    over its runs (see build_history_panel)."""
    def recolour(runs):
        return plot_properties(runs or [])

    for event in events:
        event.then(recolour, inputs=history["history"], outputs=[history["memory_plot"], history["latency_plot"]],
                   queue=False, show_progress="hidden", api_visibility="private")
