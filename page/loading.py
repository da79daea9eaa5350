"""The model a request runs on: the listed models only, a Hub model this machine cannot fetch refused in words (the
default model falls back to the bundled demo model), loaded on first use (`ensure_loaded`) or by a pick
(`load_selection`), named in words. Not the pickers (`page.picks`), what a visitor has seen loaded
(`page.asking.seen_now`), nor the loading itself (the session's).
"""

from __future__ import annotations

from longqa.backend import Selection
from longqa.models import DEFAULT_MODEL, is_offline, needs_download
from longqa_core.errors import LongQAError, ModelLoadError
from page.context import AppContext


def check_model_allowed(ctx: AppContext, model_ref: str) -> None:
    if model_ref not in ctx.models:
        raise ModelLoadError(f"This page can only load the listed models ({', '.join(ctx.models)}); "
                             f"{str(model_ref)[:200]!r} is not one of them.")


def falls_back_to_demo(model_ref: str) -> bool:
    """Whether a load of `model_ref` that cannot fetch it from the Hub loads the bundled demo model instead (the
    default model does, so that the page always starts with something that answers; any other is refused)."""
    return model_ref == DEFAULT_MODEL


def check_model_reachable(model_ref: str) -> None:
    """A Hub model that is not in the local cache while downloads are off is refused in plain words before the
    loader tries (the default model still falls back to the demo model there, as the loader decides)."""
    if not falls_back_to_demo(model_ref) and is_offline() and needs_download(model_ref):
        raise ModelLoadError(f"Could not fetch {model_ref!r} from the Hugging Face Hub: it is not in this machine's "
                             "cache, and downloads are off here (HF_HUB_OFFLINE is set). Pick a model not marked "
                             "'cannot load here', such as the bundled demo model.")


def current_model(ctx: AppContext) -> str:
    session = ctx.session
    if session.loaded is None:
        return "No model is loaded now."
    return f"Still using {loaded_now(ctx)}."


def loaded_now(ctx: AppContext) -> str:
    """The model loaded now, in words: "demo with profile cpu" (or that none is)."""
    session = ctx.session
    if session.loaded is None:
        return "no model loaded yet"
    return f"{session.model_ref} with profile {session.profile_name}"


def load_selection(ctx: AppContext, selection: Selection, progress=None) -> None:
    """Load the selection (model, profile, `custom`'s strategies) into the session; on failure the previous model
    stays and the error says so. The page's selection then names the model that did load: the bundled demo model
    when the default could not be fetched."""
    on_progress = (lambda fraction, message: progress(fraction, desc=message)) if progress else None
    try:
        check_model_allowed(ctx, selection.model)
        check_model_reachable(selection.model)
        profile = ctx.session.runnable_profile(selection.profile, selection.strategies)
        ctx.session.load(selection.model, profile, on_progress=on_progress,
                         fallback_to_demo=falls_back_to_demo(selection.model), strategies=selection.strategies)
    except LongQAError as exc:
        raise type(exc)(f"{exc} {current_model(ctx)}") from exc
    ctx.load_error = None


def ensure_loaded(ctx: AppContext, progress=None) -> None:
    """Load the selected model if none is loaded yet (the first visit or request after start)."""
    if ctx.session.loaded is not None:
        return
    with ctx.session.lock:
        if ctx.session.loaded is not None:
            return
        try:
            load_selection(ctx, ctx.start, progress)
        except LongQAError as exc:
            ctx.load_error = str(exc)
            raise
