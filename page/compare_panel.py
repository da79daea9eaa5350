"""The page's "Compare profiles" panel: the action that asks the question above under each chosen profile in turn,
reloading the model for each, as one table with ratios to the first profile, the runs added to the history; plus
the `/compare` API endpoint.

UI only: the comparison is `longqa.compare`'s, the formatting `page.format`'s; it reads and cleans a request as an
answer does and takes an exclusive turn on the model (`page.asking`): one comparison in the lane at a time, whoever
asks, its reads within the deployment's limit for a comparison (`--max-compare-s`), off under --lock-profile unless
the operator allows them (`--allow-compare`).
"""

from __future__ import annotations

import time

import gradio as gr
import pandas as pd

from longqa.compare import Comparison, choices_from, compare_profiles
from longqa_core.errors import Cancelled, InputError, ProfileError
from page import format as fmt
from page import panel_format as panel_fmt
from page.asking import model_turn, read_before_turn, request_settings, seen_now, stop_enabled, stop_pressed_from_now
from page.loading import ensure_loaded, loaded_now
from page.context import AppContext, requests_group
from page.events import bind, listen
from page.hardening import expect_texts, user_errors
from page.history_panel import history_outputs, recolour_after
from page.picks import ASKING, asking_enabled
from page.tables import ReadoutTable
from strategies.profiles import describe_profiles
from strategies.registry import strategy_cards

DEFAULT_COMPARED = ("cpu", "baseline-fp32")  # where both run here: the profile for a CPU against the original
LOCKED = ("This deployment fixes the model and profile ({loaded}): comparing profiles reloads the model for each "
          "one, so it is turned off here. Run the page yourself (`python app.py`) to compare.")
STOPPED = "Comparison stopped: {loaded} is loaded again."
OVER_TIME = ("The comparison passed this deployment's limit of {limit:g} s for a comparison's reads (it holds the "
             "model alone while it runs): {loaded} is loaded again. Compare fewer profiles or a shorter text.")
GRACE_S = 5.0  # past its limit, a comparison still predicted to fit ends at the next step or batch


def is_compare_allowed(ctx: AppContext) -> bool:
    """Comparisons reload the shared model: off under --lock-profile unless the operator allows them."""
    return not ctx.lock_profile or ctx.allow_compare


def compare_limits(ctx: AppContext, settings: dict, profiles: int) -> dict:
    """The engine settings of each profile's read: the request's, with each read's time limit its share of the
    comparison's (`max_compare_s`), so that a read predicted (or, on a fresh load, measured on its first batch) to
    go over is refused before it holds the model for long."""
    if ctx.max_compare_s is None:
        return settings
    share = ctx.max_compare_s / max(1, profiles)
    limit = settings.get("max_request_s")
    return {**settings, "max_request_s": min(limit, share) if limit else share}


def comparable_profiles(hardware) -> list[str]:
    """The profiles that can run on this machine, in the registry's order."""
    return [row["name"] for row in describe_profiles(hardware) if row["available"]]


def build_compare_panel(ctx: AppContext, question: dict, history: dict, seen, load_status) -> dict:
    """Lays out the panel and wires its button and the `/compare` endpoint to the question panel's inputs; returns
    its components and the event (the page shows what is loaded when it ends). While it runs, the line over the page
    (`load_status`) says what is compared and Ask is disabled, as during a reload.
    The page's Stop ends a comparison between steps or inside a read (it does not cancel the event, so the
    comparison ends as it does on an error: the profile used before loaded back, then the page shows it)."""
    available = comparable_profiles(ctx.hardware)
    chosen = [name for name in DEFAULT_COMPARED if name in available] or available[:2]
    with gr.Accordion("Compare profiles", open=False, elem_id="compare-panel"):
        gr.Markdown("Asks the question above, over the documents above, under each profile ticked here, one after "
                    "another, loading the model afresh for each; then loads back the profile you had. One column per "
                    "profile, with ratios to the first one ticked. Stop ends it.")
        if not is_compare_allowed(ctx):
            gr.Markdown(fmt.escape_markdown(LOCKED.format(loaded=loaded_now(ctx))), elem_id="compare-locked")
        profiles = gr.CheckboxGroup(available, value=chosen, label="Profiles to compare",
                                    info="the first one ticked is the reference for the ratios",
                                    interactive=is_compare_allowed(ctx))
        strategies = gr.CheckboxGroup([card["name"] for card in strategy_cards()], label="Strategies for custom",
                                      visible="custom" in chosen)
        compare_btn = gr.Button("Compare profiles", interactive=is_compare_allowed(ctx))
        table = ReadoutTable(comparison_frame(None), headers=[panel_fmt.COMPARE_MEASURE], label="Profile comparison",
                             elem_id="compare-table")
        summary = gr.Markdown(elem_id="compare-summary", label="Comparison summary")  # the label names it in the API
        with gr.Accordion("Comparison (JSON: what /compare and `python -m longqa compare --json` return)",
                          open=False):
            comparison_json = gr.JSON(label="Comparison (JSON)")

    outputs = {"table": table, "summary": summary, **history, "seen": seen, "json": comparison_json}

    def compare(files, pasted_text, question, top_k, reading, no_answer_below, names, custom_strategies,
                runs, request: gr.Request = None, progress=gr.Progress()):
        """The question asked under each chosen profile in turn (each loaded afresh): the comparison's rows with
        ratios to the first, the history with one run per profile, and the comparison's JSON (last)."""
        with user_errors("Comparing profiles"):
            if not is_compare_allowed(ctx):
                raise ProfileError(LOCKED.format(loaded=loaded_now(ctx)))
            choices = choices_from(expect_texts("profiles", names), expect_texts("strategies", custom_strategies))
            reading, settings = request_settings(ctx, top_k, reading, no_answer_below)
            settings = compare_limits(ctx, settings, len(choices))
            read = read_before_turn(ctx, files, pasted_text, question, request, progress)
            stop_pressed = stop_pressed_from_now(ctx, request)
            with model_turn(ctx, request, progress, exclusive=True, only_one="comparison") as abandoned:
                deadline = (time.monotonic() + ctx.max_compare_s + GRACE_S if ctx.max_compare_s is not None
                            else float("inf"))

                def over_time() -> bool:
                    return time.monotonic() > deadline

                ensure_loaded(ctx, progress)
                try:
                    comparison = compare_profiles(
                        ctx.session, ctx.selection.model, choices, read.documents, read.question, reading,
                        extract_s=read.extract_s, should_stop=lambda: stop_pressed() or abandoned() or over_time(),
                        on_progress=lambda fraction, message: progress(fraction, desc=message), **settings)
                except Cancelled:
                    if stop_pressed():
                        raise Cancelled(STOPPED.format(loaded=loaded_now(ctx))) from None
                    if over_time():
                        raise InputError(OVER_TIME.format(limit=ctx.max_compare_s, loaded=loaded_now(ctx))) from None
                    raise
        return {"table": comparison_frame(comparison),
                "summary": panel_fmt.compare_summary(comparison),
                **history_outputs(runs, [run.readout for run in comparison.runs], comparison.documents),
                "seen": seen_now(ctx), "json": comparison.to_json()}

    inputs = [question["files"], question["pasted"], question["question"], question["top_k"], question["reading"],
              question["no_answer_below"], profiles, strategies, history["history"]]
    starting = listen(compare_btn.click, bind(start_comparing, ctx), inputs=[profiles, strategies],
                      outputs={"load_status": load_status, **{name: question[name] for name in ASKING},
                               "stop": question["stop"]},
                      queue=False, api_visibility="private", show_progress="hidden")
    comparing = listen(starting.then, compare, inputs=inputs, outputs=outputs, api_name="compare",
                       **requests_group(ctx), show_progress_on=[table])
    for ended in (comparing.success, comparing.failure):  # Stop stops a comparison too, while it runs
        listen(ended, lambda: stop_enabled(False), outputs={"stop": question["stop"]},
               queue=False, show_progress="hidden", api_visibility="private")
    recolour_after(history, comparing)
    profiles.change(lambda names: gr.update(visible="custom" in (names or [])), inputs=profiles, outputs=strategies,
                    queue=False, api_visibility="private")
    return {"profiles": profiles, "strategies": strategies, "compare": compare_btn, "table": table,
            "summary": summary, "json": comparison_json, "event": comparing}


def start_comparing(ctx: AppContext, names, custom_strategies) -> dict:
    """The moment a comparison is asked for: the line over the page says which profiles are compared and what is
    loaded back after, asking is disabled until it ends (the model panel's `show_loaded`), and Stop enabled."""
    named = [f"custom ({', '.join(custom_strategies)})" if name == "custom" and custom_strategies else name
             for name in names or []]
    which = f"{', '.join(named[:-1])} and {named[-1]}" if len(named) > 1 else (named[0] if named else "none")
    return {"load_status": f"**Comparing profiles {fmt.escape_markdown(which)}** on your question, each loaded "
                           f"in turn; then {fmt.escape_markdown(loaded_now(ctx))} is loaded back. Ask and the "
                           "question are disabled until it ends.",
            **asking_enabled(False), **stop_enabled(True)}


def comparison_frame(comparison: Comparison | None) -> pd.DataFrame:
    """The comparison table: a row per measure, a column per profile (`panel_fmt.compare_rows`); before any
    comparison, the measures alone."""
    if comparison is None:
        return pd.DataFrame([[measure] for measure in panel_fmt.COMPARE_MEASURES], columns=[panel_fmt.COMPARE_MEASURE])
    return pd.DataFrame(panel_fmt.compare_rows(comparison), columns=panel_fmt.compare_headers(comparison))
