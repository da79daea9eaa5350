"""The page's run history and its "Compare profiles" panel: the history table and two bar plots coloured by profile
(one bar per run), and the action that asks the question above under each chosen profile in turn, reloading the
model for each, as one table with ratios to the first profile; plus the `/compare` API endpoint.

UI only: the comparison is `longqa.compare`'s, the formatting `ui_format`'s. It cannot import the page (app.py
imports it), so what it borrows from the page (its error handling, an answer's reading and cleaning of the request,
its turn on the model, ...) comes in `PageHooks`.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Callable

import gradio as gr
import pandas as pd

import ui_format
from page_events import listen
from longqa.compare import Comparison, choices_from, compare_profiles
from longqa.readout import Readout
from longqa_core.errors import Cancelled, ProfileError
from longqa.serving import policy
from strategies.profiles import PROFILES, describe_profiles
from strategies.registry import strategy_cards

# Wide enough for each header on two lines; the table scrolls sideways where the page is narrower.
HISTORY_COLUMN_WIDTHS = ["56px", "150px", "110px", "240px", "140px", "140px", "80px", "80px", "90px", "110px",
                         "100px", "100px", "90px", "120px"]
DEFAULT_COMPARED = ("cpu", "baseline-fp32")  # where both run here: the profile for a CPU against the original
LOCKED = ("This deployment fixes the model and profile ({loaded}): comparing profiles reloads the model for each "
          "one, so it is turned off here. Run the page yourself (`python app.py`) to compare.")
STOPPED = "Comparison stopped: {loaded} is loaded again."


@dataclass
class PageHooks:
    """What the panel borrows from the page: its error handling (`errors(action)`: domain errors become gr.Error),
    an answer's cleaning of the request's settings (`settings(top_k, reading, no_answer_below)`: the reading mode
    and the engine settings, limits included) and reading of its documents (`read_documents(files, pasted_text,
    question, request, progress)`: the documents and the seconds reading them, at the lane's door), an exclusive
    turn on the model (`model_turn(request, progress)`, yielding the key of its stop check), whether the visitor's
    page presses Stop from now on (`stop_pressed(request)`, a check), loading the first model if none is yet
    (`ensure_loaded(progress)`), what is loaded in words (`loaded_now()`), and what a visitor has seen loaded
    (`seen_now()`)."""

    errors: Callable[[str], AbstractContextManager]
    settings: Callable[[object, object, object], tuple[str, dict]]
    read_documents: Callable[[object, object, object, object, object], tuple[list, float]]
    model_turn: Callable[[object, object], AbstractContextManager]
    stop_pressed: Callable[[object], Callable[[], bool]]
    ensure_loaded: Callable[[object], None]
    loaded_now: Callable[[], str]
    seen_now: Callable[[], dict]


def build_history_panel() -> dict:
    """This page's runs: a table and two bar plots with one bar per row of the table, coloured by profile (the answer
    and compare panels fill them)."""
    history = gr.State([])
    history_table = gr.Dataframe(headers=ui_format.HISTORY_HEADERS, label="Run history (this page)",
                                 interactive=False, wrap=True, max_height=420, column_widths=HISTORY_COLUMN_WIDTHS)
    # What gradio 6.31 draws right (tests/test_app_browser.py counts the bars drawn in Chromium):
    # - An update carries the plot's data only. An update that also changes a plot property (y_lim, sort, ...)
    #   rebuilds the chart from the data the plot held before the update, while the new data goes to the chart
    #   being replaced: the bars lagged one answer behind the table. So the y axis is fixed from zero here (left
    #   alone, it starts at the smallest bar and hides it).
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
        memory_plot = gr.BarPlot(None, y=ui_format.PLOT_MEMORY, label="Peak memory by run",
                                 y_title="peak memory (MB, GPU else host RSS)", min_width=300, **plot)
        latency_plot = gr.BarPlot(None, y=ui_format.PLOT_LATENCY, label="Latency by run", min_width=300, **plot)
    return {"history": history, "history_table": history_table, "memory_plot": memory_plot,
            "latency_plot": latency_plot}


def profile_colours(runs: list[dict]) -> dict[str, str]:
    """The plots' colour for each profile in the history."""
    return ui_format.profile_colours(list(PROFILES), runs)


def plot_outputs(earlier: list[dict], runs: list[dict]) -> dict:
    """Both plots' new data, one bar per run of `runs`, after `earlier` runs: the data alone, but for the page's
    first data, which comes with the profiles' colours (see build_history_panel)."""
    plotted = ui_format.history_frame(runs)
    colours = {} if earlier else {"color_map": profile_colours(runs)}
    # one update per plot: gradio takes the value out of the update it processes
    return {"memory_plot": gr.update(value=plotted, **colours), "latency_plot": gr.update(value=plotted, **colours)}


def history_outputs(runs: list[dict] | None, readouts: list[Readout], documents: list[str] | None = None) -> dict:
    """The history (the page's state) with one run added per readout (`documents`: their names, else each readout's
    own), its table, and the plots' data (`plot_outputs`): what an answer and a comparison both show."""
    earlier = list(runs or [])
    runs = list(earlier)
    for readout in readouts:
        runs.append(ui_format.history_entry(readout, len(runs) + 1, documents))
    return {"history": runs, "history_table": pd.DataFrame(ui_format.history_rows(runs),
                                                           columns=ui_format.HISTORY_HEADERS),
            **plot_outputs(earlier, runs)}


def recolour_after(history: dict, *events) -> None:
    """After each event that adds runs: the plots' colours for the profiles in the history (see build_history_panel)."""
    def recolour(runs):
        colours = profile_colours(runs or [])
        return gr.update(color_map=colours), gr.update(color_map=colours)

    for event in events:
        event.then(recolour, inputs=history["history"], outputs=[history["memory_plot"], history["latency_plot"]],
                   queue=False, show_progress="hidden", api_visibility="private")


def comparable_profiles(hardware) -> list[str]:
    """The profiles that can run on this machine, in the registry's order."""
    return [row["name"] for row in describe_profiles(hardware) if row["available"]]


def build_compare_panel(ctx, question: dict, history: dict, seen, hooks: PageHooks) -> dict:
    """Lays out the panel and wires its button and the `/compare` endpoint to the question panel's inputs (`ctx` is
    the page's AppContext); returns its components and the event (the page shows what is loaded when it ends).
    The page's Stop ends a comparison between steps or inside a read (it does not cancel the event, so the
    comparison ends as it does on an error: the profile used before loaded back, then the page shows it)."""
    available = comparable_profiles(ctx.hardware)
    chosen = [name for name in DEFAULT_COMPARED if name in available] or available[:2]
    with gr.Accordion("Compare profiles", open=False, elem_id="compare-panel"):
        gr.Markdown("Asks the question above, over the documents above, under each profile ticked here, one after "
                    "another, loading the model afresh for each; then loads back the profile you had. One column per "
                    "profile, with ratios to the first one ticked. Stop ends it.")
        if ctx.lock_profile:
            gr.Markdown(ui_format.escape_markdown(LOCKED.format(loaded=hooks.loaded_now())), elem_id="compare-locked")
        profiles = gr.CheckboxGroup(available, value=chosen, label="Profiles to compare",
                                    info="the first one ticked is the reference for the ratios",
                                    interactive=not ctx.lock_profile)
        strategies = gr.CheckboxGroup([card["name"] for card in strategy_cards()], label="Strategies for custom",
                                      visible="custom" in chosen)
        compare_btn = gr.Button("Compare profiles", interactive=not ctx.lock_profile)
        table = gr.Dataframe(comparison_frame(None), label="Profile comparison", interactive=False, wrap=True,
                             elem_id="compare-table", column_widths=comparison_widths(0))
        summary = gr.Markdown(elem_id="compare-summary")
        with gr.Accordion("Comparison (JSON: what /compare and `python -m longqa compare --json` return)",
                          open=False):
            comparison_json = gr.JSON(label="Comparison (JSON)")

    outputs = {"table": table, "summary": summary, **history, "seen": seen, "json": comparison_json}

    def compare(files, pasted_text, question_text, top_k, reading, no_answer_below, names, custom_strategies,
                runs, request: gr.Request = None, progress=gr.Progress()):
        """The question asked under each chosen profile in turn (each loaded afresh): the comparison's rows with
        ratios to the first, the history with one run per profile, and the comparison's JSON (last)."""
        with hooks.errors("Comparing profiles"):
            if ctx.lock_profile:
                raise ProfileError(LOCKED.format(loaded=hooks.loaded_now()))
            choices = choices_from(list(names or []), custom_strategies or [])
            reading, settings = hooks.settings(top_k, reading, no_answer_below)
            documents, extract_s = hooks.read_documents(files, pasted_text, question_text, request, progress)
            stop_pressed = hooks.stop_pressed(request)
            with hooks.model_turn(request, progress) as stop_key:
                abandoned = policy.stop_check(stop_key) or (lambda: False)
                hooks.ensure_loaded(progress)
                try:
                    comparison = compare_profiles(
                        ctx.session, ctx.selection["model"], choices, documents, question_text, reading,
                        extract_s=extract_s, should_stop=lambda: stop_pressed() or abandoned(),
                        on_progress=lambda fraction, message: progress(fraction, desc=message), **settings)
                except Cancelled:
                    if not stop_pressed():
                        raise
                    raise Cancelled(STOPPED.format(loaded=hooks.loaded_now())) from None
        return {"table": gr.update(value=comparison_frame(comparison),
                                   column_widths=comparison_widths(len(comparison.runs))),
                "summary": ui_format.compare_summary(comparison),
                **history_outputs(runs, [run.readout for run in comparison.runs], comparison.documents),
                "seen": hooks.seen_now(), "json": comparison.to_json()}

    inputs = [question["files"], question["pasted"], question["question"], question["top_k"], question["reading"],
              question["no_answer_below"], profiles, strategies, history["history"]]
    comparing = listen(compare_btn.click, compare, inputs=inputs, outputs=outputs, api_name="compare",
                       concurrency_id="model", show_progress_on=[table])
    recolour_after(history, comparing)
    profiles.change(lambda names: gr.update(visible="custom" in (names or [])), inputs=profiles, outputs=strategies,
                    queue=False, api_visibility="private")
    return {"profiles": profiles, "strategies": strategies, "compare": compare_btn, "table": table,
            "summary": summary, "json": comparison_json, "event": comparing}


def comparison_frame(comparison: Comparison | None) -> pd.DataFrame:
    """The comparison table: a row per measure, a column per profile (`ui_format.compare_rows`); before any
    comparison, the measures alone."""
    if comparison is None:
        return pd.DataFrame([[measure] for measure in ui_format.COMPARE_MEASURES], columns=[ui_format.COMPARE_MEASURE])
    return pd.DataFrame(ui_format.compare_rows(comparison), columns=ui_format.compare_headers(comparison))


def comparison_widths(profiles: int) -> list[str]:
    """Column widths that share the panel's width, whatever it is: the measures' column, then an equal share per
    profile (gradio resolves percentages against the table's width, so nothing scrolls sideways)."""
    if not profiles:
        return ["100%"]
    return ["30%", *[f"{70 / profiles:.2f}%"] * profiles]

