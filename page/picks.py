"""The profile and model picks: which models the page may load, loading the one picked (or the first on a visit),
and what the dropdowns, the banner and the load readout show. Not the panel's layout (`page.model_panel`), nor the
load itself (`page.loading.load_selection`: a request's first one loads the model too).
"""

from __future__ import annotations

import html

import gradio as gr
import pandas as pd

from longqa.backend import Selection
from longqa.models import DEFAULT_MODEL, KNOWN_MODELS, is_offline, needs_download
from longqa.session import NO_MODEL
from longqa_core.errors import LongQAError, ProfileError
from page import format as fmt
from page.context import AppContext
from page.asking import model_turn, page_session, seen_now, visitor_keys, waiting_shown
from page.loading import ensure_loaded, falls_back_to_demo, load_selection, loaded_now
from page.hardening import abandonment_check, cut, escape, expect, expect_texts, user_errors
from page.words import MODEL_INFO, MODEL_NAMES, PICK_MODEL
from strategies.hardware import Hardware
from strategies.profiles import Profile, custom_profile, device_for, profile_choices
from strategies.registry import make_strategy, strategy_cards

def model_note(ref: str) -> str:
    """What the Model dropdown adds to a model's name where it is not on this machine: that its first load downloads
    it, or, offline, that it cannot load here; for a model that falls back to the bundled demo model when it cannot
    be fetched (`falls_back_to_demo`), that the demo model answers instead. Nothing for a model on disk."""
    if not needs_download(ref):
        return ""
    if is_offline():
        if falls_back_to_demo(ref):
            return " (not in the local cache, and downloads are off: the bundled demo model answers instead)"
        return " (cannot load here: not in the local cache, and downloads are off)"
    if falls_back_to_demo(ref):
        return (" (not in the local cache: the first load downloads it from the Hub; if it cannot, the bundled demo "
                "model answers instead)")
    return " (not in the local cache: the first load downloads it from the Hub)"


def model_choices(ctx: AppContext) -> list[tuple[str, str]]:
    """The models the page may load, each by a short name (`model_name`): the whole choice shows on a phone, and the
    line under the dropdown says the rest of the one chosen (`model_info`)."""
    return [(model_name(ref), ref) for ref in ctx.models]


def model_name(ref: str) -> str:
    """A model's short name in the dropdown: the page's own (`words.MODEL_NAMES`), else the last part of its id or
    path."""
    return MODEL_NAMES.get(ref) or str(ref).rstrip("/").rsplit("/", 1)[-1]


def model_info(ref: str) -> str:
    """The line under the Model dropdown: the chosen model's id, what it is and, where it is not on this machine,
    whether it can load here (`model_note`)."""
    return f"{ref}: {KNOWN_MODELS.get(ref, 'given with --model')}{model_note(ref)}. {MODEL_INFO}"


def strategy_choices(hardware: Hardware) -> list[tuple[str, str]]:
    """The custom strategies as the checkbox group shows them: each with what it does, and, where this machine
    cannot run it (a GPU-only strategy on a CPU, a kernel this torch build lacks), why."""
    choices = []
    for card in strategy_cards():
        device = device_for(custom_profile([card["name"]]), hardware)  # where `custom` would put the model here
        reason = make_strategy(card["name"], hardware, device).unavailable_reason(hardware)
        why_not = f" (cannot run here: {reason})" if reason else ""
        choices.append((f"{card['name']}: {card['description']}{why_not}", card["name"]))
    return choices


def demo_stands_in(ctx: AppContext) -> tuple[str, str] | None:
    """The model the bundled demo model answers for, and why, while it does: the load now loaded fell back to it
    (its readout says why), or the demo model is loaded after a reload while the page's own model still falls back
    to it because it cannot be fetched here (`falls_back_to_demo`, offline and not in the cache). None otherwise:
    the named model loaded, or a model given with --model that is not the default."""
    loaded = ctx.session.loaded
    if loaded is None:
        return None
    if loaded.readout.fallback_reason:
        wanted = ctx.session.selection.model if ctx.session.selection else DEFAULT_MODEL
        return wanted, loaded.readout.fallback_reason
    named = ctx.start.model
    if ctx.session.model_ref == "demo" and named != "demo" and falls_back_to_demo(named) and is_offline() \
            and needs_download(named):
        return named, (f"{named!r} is not in this machine's cache, and downloads are off here (HF_HUB_OFFLINE is "
                       "set).")
    return None


def banner(ctx: AppContext) -> dict:
    """The warning over the page: the demo model standing in for the page's model (`demo_stands_in`: on every
    visit, after any reload), or nothing loaded."""
    stand_in = demo_stands_in(ctx)
    if ctx.session.loaded is None and ctx.load_error:
        text = f"**{NO_MODEL}** {fmt.escape_markdown(ctx.load_error)} {PICK_MODEL}"
    elif stand_in is not None:  # one line, its reason folded: the Ask row stays on a laptop's first screen
        wanted, reason = stand_in
        text = (f"<details><summary><b>Running on the bundled demo model</b>, not {html.escape(wanted)}: it answers "
                "only questions like <i>What is the frequency of …?</i></summary>\n\n"
                f"{fmt.escape_markdown(reason)} The demo model is tiny: it answers questions like *What is the "
                "frequency of …?* about sentences *The frequency of … is ….*, as in the examples below.\n\n"
                "</details>")
    else:
        return gr.update(value="", visible=False)
    return gr.update(value=text, visible=True)


def load_status(ctx: AppContext) -> str:
    """One line over the page: what is loaded now, and how long its load took."""
    loaded = ctx.session.loaded
    if loaded is None:
        return "**No model loaded yet.**"
    readout = loaded.readout
    return (f"Loaded **{fmt.escape_markdown(ctx.session.model_ref)}** with profile "
            f"**{fmt.escape_markdown(ctx.session.profile_name)}** in "
            f"{fmt.format_seconds(readout.load_time_s)}.")


def load_outputs(ctx: AppContext) -> dict:
    """The banner and the load readout (table and JSON) for the model loaded now."""
    loaded = ctx.session.loaded
    rows = [dict(fmt.load_rows(loaded.readout))] if loaded is not None else []
    return {"banner": banner(ctx), "load_table": pd.DataFrame(rows, columns=fmt.LOAD_HEADERS),
            "load_json": loaded.readout.to_dict() if loaded is not None else {}}


def auto_profile(ctx: AppContext) -> Profile | None:
    """What `auto` stands for with the model shown, by the loader's own rule (see `Session.auto_profile`)."""
    return ctx.session.auto_profile(ctx.selection.model)


def shown_selection(ctx: AppContext) -> dict:
    """The dropdowns as they must read now: the profile chosen, with `auto` naming what it picked for the model;
    the model loaded (the demo model after a fallback); the strategies ticked."""
    selection = ctx.selection
    return {"profile": gr.update(choices=profile_choices(ctx.hardware, auto_profile(ctx)), value=selection.profile),
            "model": gr.update(value=selection.model, info=model_info(selection.model)),
            "strategies": gr.update(value=list(selection.strategies))}


def on_page_load(ctx: AppContext, request: gr.Request = None, progress=gr.Progress()) -> dict:
    """A new visitor: load the model if none is yet, and show what is selected and loaded now (the custom strategies
    folded away until the visitor picks `custom`: they would fill a phone's first screen). It takes its place
    at the lane's door (counted in the visitor's share) after the reloads asked for before it, so that what it
    shows is what they loaded; a reload asked for after it waits for it, so its outputs never undo the reload's."""
    with user_errors("Opening the page"):
        with ctx.lane.door(visitor_keys(ctx, request), after_exclusive=True, should_stop=abandonment_check(),
                           on_wait=waiting_shown(progress)):
            try:
                ensure_loaded(ctx, progress)
            except LongQAError:
                pass  # the banner shows why; the page stays usable to pick another model
            return {**shown_selection(ctx), "seen": seen_now(ctx), "shown": ctx.session.generation,
                    **load_outputs(ctx), "load_status": load_status(ctx)}


def load_profile(ctx: AppContext, profile_name: str, model_ref: str, strategies=None, seen=None,
                 request: gr.Request = None, progress=gr.Progress()) -> dict:
    """Reload with another profile or model, in turn with the answers; a failed load keeps the previous model.
    Refused when locked; nothing to do (no turn taken) when it is what is loaded now. A visitor has one reload or
    comparison in line at a time (`ModelLane`): another is refused at once."""
    with user_errors("Loading"):
        profile_name = expect("profile", profile_name, str)
        model_ref = expect("model", model_ref, str)
        strategies = expect_texts("strategies", strategies)
        if ctx.lock_profile:
            raise ProfileError(f"This deployment fixes the model and profile: it runs {loaded_now(ctx)}, and "
                               "they cannot be changed from the page or the API.")
        selection = Selection.of(model_ref, profile_name, strategies)
        if not is_loaded_now(ctx, selection):
            with model_turn(ctx, request, progress, exclusive=True):
                try:
                    load_selection(ctx, selection, progress)
                except ProfileError as exc:
                    if page_session(request) is None or request.headers.get("x-gradio-user"):
                        raise  # an API call's refusal is its error (gradio's client names itself "api")
                    # on the page a profile this machine cannot run is a refused pick, not a failure: said as a
                    # warning, and the pickers go back to what is loaded (`show_loaded`)
                    gr.Warning(escape(str(exc)))
    return {"seen": seen_now(ctx), **load_outputs(ctx)}


def is_loaded_now(ctx: AppContext, selection: Selection) -> bool:
    """Whether a load of `selection` asks for what is loaded now, as the session tells (what was asked for, not what
    `auto` became)."""
    return ctx.session.loaded is not None and ctx.session.selection == selection


def start_loading(ctx: AppContext, profile_name: str, model_ref: str) -> dict:
    """The moment a reload is asked for: say what is loading, and disable asking until it ends (`show_loaded`)."""
    wanted = cut(model_ref or ctx.selection.model)
    return {"load_status": f"**Loading {fmt.escape_markdown(wanted)} with profile "
                           f"{fmt.escape_markdown(cut(profile_name))}…** Ask is disabled until it ends.",
            **asking_enabled(False)}


def asking_enabled(enabled: bool) -> dict:
    """The ways to ask under the documents, enabled or not: Ask, "Read the whole document", and the question box,
    whose Enter asks (disabled, it cannot queue an ask unseen while a reload or a comparison holds the model)."""
    return {name: gr.update(interactive=enabled) for name in ASKING}


ASKING = ("ask", "full", "question")  # the question panel's components `asking_enabled` sets


def start_profile_pick(ctx: AppContext, profile_name: str, model_ref: str, picked: gr.SelectData = None) -> dict:
    """A profile picked: `start_loading` for the pick, which the dropdown is set to again. The load that follows
    reads the dropdown, and another event's outputs (a visit's `on_page_load`, computed before the pick) may have
    set it back in between: the pick itself is the event's data (a raw call without it: the dropdown's value)."""
    profile_name = picked_value(picked, profile_name)
    return {**start_loading(ctx, profile_name, model_ref), "profile": gr.update(value=profile_name)}


def start_model_pick(ctx: AppContext, profile_name: str, model_ref: str, picked: gr.SelectData = None) -> dict:
    """A model picked: as `start_profile_pick`, for the model dropdown."""
    model_ref = picked_value(picked, model_ref)
    return {**start_loading(ctx, profile_name, model_ref),
            "model": gr.update(value=model_ref, info=model_info(model_ref))}


def picked_value(picked: gr.SelectData | None, shown):
    """What a select event picked, as text; the dropdown's value where a raw call sent no event data."""
    value = getattr(picked, "value", None)
    return str(value if value is not None else shown or "")


def show_loaded(ctx: AppContext) -> dict:
    """After a load, done or refused: the dropdowns, the readouts and the line over the page show what is loaded
    now (the page's `shown` generation), and asking is enabled again."""
    return {**shown_selection(ctx), **load_outputs(ctx), "load_status": load_status(ctx), **asking_enabled(True),
            "shown": ctx.session.generation}


def follow_loaded(ctx: AppContext, shown) -> dict:
    """A page's poll (`model_panel.FOLLOW_EVERY_S`): where what is loaded changed since the page last showed it
    (`shown`: the session's load generation then), another visitor's reload, the pickers, the banner, the load
    readouts and the line over the page show what is loaded now, with the custom strategies folded away (they open
    when this visitor picks `custom`); otherwise, or while a reload or a comparison holds the model, nothing
    changes."""
    if shown == ctx.session.generation or ctx.lane.is_reloading():
        return {name: gr.skip() for name in FOLLOWED}
    selection = shown_selection(ctx)
    selection["strategies"]["visible"] = False
    return {**selection, **load_outputs(ctx), "load_status": load_status(ctx), "apply": gr.update(visible=False),
            "shown": ctx.session.generation}


FOLLOWED = ("profile", "model", "strategies", "banner", "load_table", "load_json", "load_status", "apply", "shown")


def show_custom_controls(profile_name: str | None, picked: gr.SelectData = None) -> dict:
    """The custom strategies and their button: shown when the profile picked (the select event's own pick, else
    `profile_name`) is `custom`, folded away otherwise."""
    custom = picked_value(picked, profile_name) == "custom"
    return {"strategies": gr.update(visible=custom), "apply": gr.update(visible=custom)}
