"""The one `auto` rule: which concrete profile `auto` means on this machine for this model. On a GPU, the profile
named for the card (by its thresholds), else the next smaller one, that can run here and, with the model's config,
whose predicted peak fits: the GPU profiles' speeds are not measured apart, so among those that fit the card's own
wins. Without a GPU, the fastest CPU profile that fits (their order is measured). It only chooses; `longqa.loader`
loads.
"""

from __future__ import annotations

from strategies.hardware import Hardware
from strategies.memory_planner import plan_profile
from strategies.memory_planner import FIT_MARGIN
from strategies.profiles import (PROFILES, SPEED_ORDER, Profile, auto_by_gpu, auto_candidate, card_order, get_profile,
                                 is_available)


def resolve_auto(hardware: Hardware, config=None, *, document_tokens: int | None = None, tokens: int | None = None,
                 batch: int | None = None, runtime_bytes: int | None = None) -> Profile:
    """The concrete profile `auto` means here (`choose_auto`)."""
    return choose_auto(hardware, config, document_tokens=document_tokens, tokens=tokens, batch=batch,
                       runtime_bytes=runtime_bytes)[0]


def choose_auto(hardware: Hardware, config=None, *, document_tokens: int | None = None, tokens: int | None = None,
                batch: int | None = None, runtime_bytes: int | None = None) -> tuple[Profile, str]:
    """The concrete profile `auto` means here, and why in one line.

    With the model's config: on a GPU, the first of `card_order` (the profile named for the card, then the
    smaller ones) that can run here and whose predicted peak fits every device with a 10 % margin; without a GPU,
    the fastest (SPEED_ORDER) such profile. For a document of `document_tokens` (None: one that fills the
    profile's batch). Without a config: `auto_by_gpu`, the profile the GPU's size calls for. `tokens`, `batch`
    and `runtime_bytes` go to the planner as they are (a plan for another machine fixes the window, the batch and
    the process's own memory; None: the profile's and this process's).
    """
    if config is None:
        return auto_by_gpu(hardware), "the profile the GPU's size calls for (the model's config is not known yet)"
    named = auto_candidate(hardware)
    order = card_order(hardware) if hardware.usable_gpus else SPEED_ORDER
    for name in order:
        profile = PROFILES[name]
        if is_available(profile, hardware) and plan_profile(
                config, profile, hardware, document_tokens=document_tokens, tokens=tokens, batch=batch,
                runtime_bytes=runtime_bytes).fits(hardware):
            return profile, _why(name, named, hardware)
    profile = PROFILES["cpu"] if is_available(PROFILES["cpu"], hardware) else PROFILES["baseline-fp32"]
    return profile, "nothing is predicted to fit: the plainest profile that can run here"


def _why(name: str, named: str, hardware: Hardware) -> str:
    fits = f"predicted to fit every device with a {FIT_MARGIN:.0%} margin"
    if not hardware.usable_gpus:
        return f"the fastest CPU profile {fits} (their order is measured)"
    if name == named:
        return f"the profile named for this card (GPU profiles are not measured apart: its own wins), {fits}"
    return f"the profile named for this card ({named}) cannot run or fit: the next smaller one {fits}"


def resolve_profile(profile: Profile | str, hardware: Hardware, config=None) -> Profile:
    """A profile object from a name or object, with `auto` resolved for `hardware` (and the model's config)."""
    profile = get_profile(profile) if isinstance(profile, str) else profile
    return resolve_auto(hardware, config) if profile.name == "auto" else profile
