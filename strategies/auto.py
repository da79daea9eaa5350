"""The one `auto` rule: which concrete profile `auto` means on this machine for this model. With the model's
config, the fastest profile that can run here and whose predicted peak fits; without it (nothing known yet about
the model), the profile the GPU's size calls for. It only chooses; `longqa.loader` loads.
"""

from __future__ import annotations

from strategies.hardware import Hardware
from strategies.memory_planner import plan_profile
from strategies.profiles import PROFILES, SPEED_ORDER, Profile, auto_by_gpu, get_profile, is_available


def resolve_auto(hardware: Hardware, config=None, *, document_tokens: int | None = None, tokens: int | None = None,
                 batch: int | None = None, runtime_bytes: int | None = None) -> Profile:
    """The concrete profile `auto` means here.

    With the model's config: the fastest profile (SPEED_ORDER) that can run here and whose predicted peak fits
    every device with a 10 % margin, for a document of `document_tokens` (None: one that fills the profile's
    batch). Without a config: `auto_by_gpu`, the profile the GPU's size calls for. `tokens`, `batch` and
    `runtime_bytes` go to the planner as they are (a plan for another machine fixes the window, the batch and the
    process's own memory; None: the profile's and this process's).
    """
    if config is None:
        return auto_by_gpu(hardware)
    for name in SPEED_ORDER:
        profile = PROFILES[name]
        if is_available(profile, hardware) and plan_profile(
                config, profile, hardware, document_tokens=document_tokens, tokens=tokens, batch=batch,
                runtime_bytes=runtime_bytes).fits(hardware):
            return profile
    return PROFILES["cpu"] if is_available(PROFILES["cpu"], hardware) else PROFILES["baseline-fp32"]


def resolve_profile(profile: Profile | str, hardware: Hardware, config=None) -> Profile:
    """A profile object from a name or object, with `auto` resolved for `hardware` (and the model's config)."""
    profile = get_profile(profile) if isinstance(profile, str) else profile
    return resolve_auto(hardware, config) if profile.name == "auto" else profile
