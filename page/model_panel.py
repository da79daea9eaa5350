"""The model panel: the notice, the profile and model pickers, the line saying what is loaded, the custom
strategies, and their events (a visit's load, each pick's reload). Not what loading does (`page.picks`).
"""

from __future__ import annotations

import gradio as gr
from gradio.blocks import Block

from page import format as fmt
from page import words
from page.context import AppContext, requests_group
from page.events import bind, listen
from page.picks import (ASKING, FOLLOWED, auto_profile, follow_loaded, load_profile, load_status, model_choices,
                        model_info, on_page_load, show_custom_controls, show_loaded, start_loading, start_model_pick,
                        start_profile_pick, strategy_choices)
from page.tables import ReadoutTable
from strategies.profiles import profile_choices

FOLLOW_EVERY_S = 10.0  # how often a page looks whether another visitor reloaded the shared model


def build_model_panel(ctx: AppContext) -> dict[str, Block]:
    """The notice, the profile and model pickers, the line saying what is loaded (or loading), and the custom
    strategies. The load readout (table and JSON) is made here and placed lower on the page (`render`)."""
    banner_box = gr.Markdown(visible=False, elem_id="banner", label="Notice")
    with gr.Row():
        locked = " Fixed on this deployment." if ctx.lock_profile else ""
        profile_dd = gr.Dropdown(profile_choices(ctx.hardware, auto_profile(ctx)), value=ctx.selection.profile,
                                 label="Hardware profile",
                                 info=f"{words.PROFILE_INFO} Detected: {ctx.hardware.describe()}.{locked}",
                                 interactive=not ctx.lock_profile, scale=2, min_width=300)
        model_dd = gr.Dropdown(model_choices(ctx), value=ctx.selection.model, label="Model",
                               info=model_info(ctx.selection.model), interactive=not ctx.lock_profile, scale=2,
                               min_width=300)
    status = gr.Markdown(load_status(ctx), elem_id="load-status")
    with gr.Row(elem_id="custom-strategies"):  # folded away (style.css) while its two components are hidden
        strategies_cb = gr.CheckboxGroup(strategy_choices(ctx.hardware), label="Custom strategies",
                                         info=words.STRATEGIES_INFO, visible=False, scale=4, min_width=300)
        apply_btn = gr.Button("Load custom profile", visible=False, scale=1, min_width=160)
    load_table = ReadoutTable(headers=fmt.LOAD_HEADERS, label="Load readout", render=False)
    load_json = gr.JSON(label="Load readout (JSON)", render=False, elem_id="load-json")
    shown = gr.State(None)  # the session's load generation the pickers and the line over the page show
    return {"banner": banner_box, "profile": profile_dd, "model": model_dd, "load_status": status,
            "strategies": strategies_cb, "apply": apply_btn, "load_table": load_table, "load_json": load_json,
            "shown": shown}


def loaded_outputs(model: dict[str, Block], question: dict[str, Block]) -> dict[str, Block]:
    """What `show_loaded` fills: the dropdowns, the load readouts, the line over the page and the ask buttons."""
    return {**{name: model[name] for name in ("profile", "model", "strategies", "banner", "load_table", "load_json",
                                              "load_status", "shown")},
            **{name: question[name] for name in ASKING}}


def show_loaded_after(ctx: AppContext, event, model: dict[str, Block], question: dict[str, Block]) -> None:
    """After `event` (a reload, or a comparison: it reloads the model for each profile and loads back the one used
    before), done or refused or stopped, the page shows what is loaded: its dropdowns, load readouts and the line
    over it, and Ask is enabled."""
    for outcome in (event.success, event.failure):  # `then` alone would not run after an error
        listen(outcome, bind(show_loaded, ctx), outputs=loaded_outputs(model, question), api_visibility="private")


def wire_model_panel(ctx: AppContext, demo: gr.Blocks, seen: gr.State, model: dict[str, Block],
                     question: dict[str, Block]) -> list:
    """Load on a visit and on each pick: while a reload runs, the line over the page says what is loading (its
    progress shows the elapsed time) and Ask is disabled. A pick loads what the select event says was picked, and a
    visit's outputs reach the page in turn with the reloads, so that neither undoes the other. Returns the reloads'
    events (the answer panel tells an answer of the model loaded before)."""
    reloads = []
    readouts = {name: model[name] for name in ("banner", "load_table", "load_json")}
    selection = {name: model[name] for name in ("profile", "model", "strategies")}
    # A visit and a reload both take their places in the lane (`on_page_load`, `load_profile`): a visit's outputs,
    # what was loaded when it ran, reach the page before those of a reload asked for after it, and never undo the
    # reload's `show_loaded`; both run in the requests group, so neither waits in gradio's queue.
    listen(demo.load, bind(on_page_load, ctx),
           outputs={**selection, "seen": seen, "shown": model["shown"], **readouts, "load_status": model["load_status"]},
           **requests_group(ctx), api_visibility="private", show_progress_on=[model["load_status"]])
    # Every open page follows another visitor's reload within one poll: a quick look, no turn on the model.
    listen(gr.Timer(FOLLOW_EVERY_S).tick, bind(follow_loaded, ctx), inputs=model["shown"],
           outputs={name: model[name] for name in FOLLOWED}, queue=False, show_progress="hidden",
           api_visibility="private")
    # `select`, the visitor's own pick: the strategies open when the visitor picks `custom`, not when a visit or
    # another visitor's reload shows it
    listen(model["profile"].select, show_custom_controls, inputs=model["profile"],
           outputs={"strategies": model["strategies"], "apply": model["apply"]}, queue=False,
           api_visibility="private")
    # `select`, not `input`: a dropdown fires `input` twice per pick in gradio 6.31 (two loads, two errors).
    for trigger, start, api_name in ((model["profile"].select, start_profile_pick, "load_profile"),
                                     (model["model"].select, start_model_pick, None),
                                     (model["apply"].click, start_loading, None)):
        starting = listen(trigger, bind(start, ctx), inputs=[model["profile"], model["model"]],
                          outputs={"load_status": model["load_status"], **{name: question[name] for name in ASKING},
                                   "profile": model["profile"], "model": model["model"]},
                          queue=False, api_visibility="private", show_progress="hidden")
        loading = listen(starting.then, bind(load_profile, ctx),
                         inputs=[model["profile"], model["model"], model["strategies"], seen],
                         outputs={"seen": seen, **readouts}, **requests_group(ctx), api_name=api_name,
                         show_progress_on=[model["load_status"]], api_visibility="public" if api_name else "private")
        # done or refused, the dropdowns then show what is loaded: the demo model after a fallback, the previous
        # choice after a refusal, and what `auto` picked
        show_loaded_after(ctx, loading, model, question)
        reloads.append(loading)
    return reloads
