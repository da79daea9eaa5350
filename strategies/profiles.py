"""Hardware profiles: one literal registry of ordered strategy stacks plus engine settings, and the rules for
composing them, picking one for the detected hardware and explaining what cannot run. `loader` does the loading.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from longqa_core.errors import ProfileError
from strategies.base import PHASE_NAMES, Strategy
from strategies.hardware import Hardware
from strategies.registry import STRATEGIES, make_strategy, strategy_class

GB = 10**9  # marketing gigabytes, as on the cards' boxes (a "24 GB" card reports about 25.4e9 bytes)


@dataclass(frozen=True)
class Profile:
    """An ordered stack of strategies plus engine settings. An entry "a|b" means: a if it can run here, else b."""

    name: str
    targets: str
    strategies: tuple[str, ...] = ()
    batch_size: int = 1
    max_seq_len: int | None = None  # None: the model's limit (4,096)
    doc_stride: int | None = None  # None: the engine's default, min(max_seq_len // 2, 128)
    device: str = "best"  # "cuda" (needs a GPU) | "cpu" | "best" (CUDA when present)
    options: dict = field(default_factory=dict, hash=False)  # {strategy name: keyword options}
    # Where `auto` and the planner place it: `speed_rank` orders the concrete profiles fastest first (None: not one
    # `auto` chooses among: `auto` itself, `custom`); a GPU profile is named for the cards with at least
    # `min_gpus` GPUs of at least `min_gpu_bytes` each.
    speed_rank: int | None = None
    min_gpus: int = 1
    min_gpu_bytes: int = 0

    def __post_init__(self):
        object.__setattr__(self, "strategies", compose(self.strategies, self.options))
        if self.device not in ("cuda", "cpu", "best"):
            raise ProfileError(f"Profile {self.name!r}: device must be cuda, cpu or best, not {self.device!r}.")
        if self.batch_size < 1:
            raise ProfileError(f"Profile {self.name!r}: batch size must be at least 1.")


def alternatives(entry: str) -> list[str]:
    return [name.strip() for name in entry.split("|")]


def compose(entries, options: dict | None = None) -> tuple[str, ...]:
    """Validate an ordered strategy stack: known names, no repeats, phase order, no conflicts; returns it."""
    entries = tuple(entries)
    names = [name for entry in entries for name in alternatives(entry)]
    for name in names:
        strategy_class(name)
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ProfileError(f"Strategy {repeated[0]!r} is listed twice.")
    for later_index, later in enumerate(entries):
        for earlier in entries[:later_index]:
            for a in alternatives(earlier):
                for b in alternatives(later):
                    _check_pair(a, b)
    for name in options or {}:
        if name not in names:
            raise ProfileError(f"Options given for {name!r}, which is not in the profile.")
    return entries


def _check_pair(earlier: str, later: str) -> None:
    first, second = STRATEGIES[earlier], STRATEGIES[later]
    if later in first.conflicts_with or earlier in second.conflicts_with:
        raise ProfileError(f"Strategies {earlier!r} and {later!r} conflict: choose one of them.")
    if first.phase > second.phase:
        raise ProfileError(f"Strategy {earlier!r} ({PHASE_NAMES[first.phase]}) must come after {later!r} "
                           f"({PHASE_NAMES[second.phase]}): order is precision, placement, transform, runtime.")


def _row(name, targets, strategies=(), **settings) -> Profile:
    return Profile(name, targets, tuple(strategies), **settings)


# `speed_rank`: fastest first. On CPU the order is measured (docs/results/bench-cpu); the GPU order follows the
# strategies (bigger batches and the fused attention first, quantization and offload last) until a GPU bench row
# measures it.
PROFILES: dict[str, Profile] = {profile.name: profile for profile in (
    _row("auto", "whatever is detected (resolves to a profile below)"),  # any machine: NVML/torch decide
    _row("rtx-3090-24gb", "RTX 3090/4090, 24 GB",  # Ampere/Ada consumer cards, 24 GB
         ("half_precision", "gradient_checkpointing", "dynamic_batching"), batch_size=8, device="cuda",
         options={"half_precision": {"dtype": "fp16"}}, speed_rank=2, min_gpu_bytes=20 * GB),
    _row("t4-16gb", "T4, 16 GB",  # Colab / free-tier cloud T4 (Turing: fp16 tensor cores, no bf16)
         ("half_precision", "mmap_loading", "dynamic_batching"), batch_size=4, device="cuda",
         options={"half_precision": {"dtype": "fp16"}}, speed_rank=3, min_gpu_bytes=14 * GB),
    _row("consumer-gpu", "consumer GPU, 12 GB and less",  # RTX 3060/4070, laptops
         ("half_precision", "bnb_8bit", "offload", "dynamic_batching"), batch_size=2, device="cuda",
         options={"half_precision": {"dtype": "fp16"}}, speed_rank=4),
    _row("multi-gpu", "2+ GPUs",  # a box with several cards: one replica per GPU
         ("half_precision", "replicas", "dynamic_batching"), batch_size=16, device="cuda", speed_rank=0, min_gpus=2),
    _row("datacenter", "40 GB+ (A100/H100/H200)",  # Ampere+ datacenter cards: bf16 and room for big batches
         ("half_precision", "fast_attention", "dynamic_batching"), batch_size=32, device="cuda",
         options={"half_precision": {"dtype": "bf16"}}, speed_rank=1, min_gpu_bytes=40 * GB),
    _row("cpu", "no GPU, e.g. the free Spaces tier",  # CPU only: bf16 where the CPU has it, else int8; fused attention;
         ("half_precision|int8_dynamic", "fast_attention", "prepacked_linear"),  # prepacked oneDNN Linear layers
         batch_size=1, device="cpu", speed_rank=5),
    _row("baseline-fp32", "reference: the original model",  # any machine: plain fp32, nothing applied
         (), batch_size=1, device="best", speed_rank=6),
    _row("custom", "any: the strategies you tick",  # any machine
         (), batch_size=1, device="best"),
)}
CHOSEN_BY_HAND = ("auto", "custom")  # the profiles with no speed rank: every other one must have one


def speed_order(profiles: dict[str, Profile] = PROFILES) -> tuple[str, ...]:
    """The profiles `auto` and the planner choose among, fastest first; ProfileError for a profile that has no
    speed rank (it would silently never be chosen) or shares one."""
    unranked = [name for name, p in profiles.items() if p.speed_rank is None and name not in CHOSEN_BY_HAND]
    if unranked:
        raise ProfileError(f"Profile {unranked[0]!r} has no speed rank: `auto` and the planner would never offer it.")
    ranked = sorted((p for p in profiles.values() if p.speed_rank is not None), key=lambda p: p.speed_rank)
    ranks = [p.speed_rank for p in ranked]
    if len(set(ranks)) != len(ranks):
        raise ProfileError("Two profiles share a speed rank: the order between them would be the list's.")
    return tuple(p.name for p in ranked)


# Fastest first, for `auto` and the planner.
SPEED_ORDER = speed_order()
# What a single card steps down through when the profile named for it cannot run: every ranked profile but those
# that need more than one GPU.
AUTO_FALLBACKS = tuple(name for name in SPEED_ORDER if PROFILES[name].min_gpus <= 1)


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ProfileError(f"Unknown profile {name!r}; choose one of {', '.join(PROFILES)}.") from None


def custom_profile(strategy_names, *, batch_size: int = 1, max_seq_len: int | None = None,
                   doc_stride: int | None = None, device: str = "best", options: dict | None = None) -> Profile:
    """The `custom` profile for ticked strategies, put in canonical order; conflicts raise ProfileError."""
    order = list(STRATEGIES)
    for name in strategy_names:
        strategy_class(name)
    names = sorted(dict.fromkeys(strategy_names), key=lambda name: (STRATEGIES[name].phase, order.index(name)))
    return Profile("custom", PROFILES["custom"].targets, tuple(names), batch_size=batch_size,
                   max_seq_len=max_seq_len, doc_stride=doc_stride, device=device, options=dict(options or {}))


def device_for(profile: Profile, hardware: Hardware) -> str:
    if profile.device == "best":
        return "cuda" if hardware.usable_gpus else "cpu"
    return profile.device


def _strategy(profile: Profile, name: str, hardware: Hardware) -> Strategy:
    return make_strategy(name, hardware, device_for(profile, hardware), profile.options.get(name))


def _entry_choice(profile: Profile, entry: str, hardware: Hardware) -> tuple[str, str | None]:
    """The alternative of `entry` that can run here (or the first one) and why it cannot, if none can."""
    reasons = []
    for name in alternatives(entry):
        reason = _strategy(profile, name, hardware).unavailable_reason(hardware)
        if reason is None:
            return name, None
        reasons.append(f"{name}: {reason}")
    return alternatives(entry)[0], "; ".join(reasons)


def unavailable_reason(profile: Profile, hardware: Hardware) -> str | None:
    """Why `profile` cannot run on `hardware`, or None when it can."""
    if profile.name == "auto":
        return None
    if profile.device == "cuda" and not hardware.usable_gpus:
        seen = " (NVML sees a GPU, but this torch build has no CUDA)" if hardware.gpus else " (none detected)"
        return f"needs a CUDA GPU{seen}"
    for entry in profile.strategies:
        _, reason = _entry_choice(profile, entry, hardware)
        if reason is not None:
            return reason
    return None


def is_available(profile: Profile, hardware: Hardware) -> bool:
    return unavailable_reason(profile, hardware) is None


def select_strategies(profile: Profile, hardware: Hardware) -> tuple[str, ...]:
    """The concrete strategy names this machine would run: each "a|b" entry resolved."""
    return tuple(_entry_choice(profile, entry, hardware)[0] for entry in profile.strategies)


def check_runnable(profile: Profile, hardware: Hardware) -> None:
    """ProfileError naming why `profile` cannot run on `hardware`; nothing when it can. The one such check: the
    loader, the session (the page, the CLI) and `build_strategies` all raise through it."""
    reason = unavailable_reason(profile, hardware)
    if reason is not None:
        raise ProfileError(f"Profile {profile.name!r} cannot run on this machine: {reason}.")


def build_strategies(profile: Profile, hardware: Hardware) -> list[Strategy]:
    """Strategy instances for `profile` on `hardware`, in order; ProfileError when one cannot run here."""
    check_runnable(profile, hardware)
    return [_strategy(profile, name, hardware) for name in select_strategies(profile, hardware)]


def auto_candidate(hardware: Hardware) -> str:
    """The profile named for the detected hardware: the fastest GPU profile whose GPU count and memory thresholds
    the GPUs meet (the first GPU's memory), or without a GPU the fastest CPU profile."""
    gpus = hardware.usable_gpus
    if not gpus:
        return next(name for name in SPEED_ORDER if PROFILES[name].device == "cpu")
    return next(name for name in SPEED_ORDER if PROFILES[name].device == "cuda"
                and len(gpus) >= PROFILES[name].min_gpus and gpus[0].total_bytes >= PROFILES[name].min_gpu_bytes)


def auto_by_gpu(hardware: Hardware) -> Profile:
    """The profile `auto` stands for when the model is not known yet: the one the GPU's size calls for, or the next
    smaller one that can run here. With the model's config, `strategies.auto.resolve_auto` decides instead."""
    for name in card_order(hardware):
        if is_available(PROFILES[name], hardware):
            return PROFILES[name]
    return PROFILES["baseline-fp32"]


def card_order(hardware: Hardware) -> tuple[str, ...]:
    """The profile named for the hardware's cards (`auto_candidate`), then the ones a single such card steps down
    to, slower and smaller (`AUTO_FALLBACKS`)."""
    first = auto_candidate(hardware)
    one_gpu = auto_candidate(replace(hardware, gpus=hardware.usable_gpus[:1]))  # what a single card would get
    return tuple(dict.fromkeys([first, *AUTO_FALLBACKS[AUTO_FALLBACKS.index(one_gpu):]]))


def describe_profiles(hardware: Hardware, auto: Profile | None = None) -> list[dict]:
    """One row per profile for `python -m longqa profiles [--json]`: what it is and whether it runs here.

    `auto`: the profile `auto` stands for, as `strategies.auto.resolve_auto` picked it with the model's config
    (the loader's own rule); without it, `auto` is resolved without a config, from the GPUs alone."""
    rows = []
    for profile in PROFILES.values():
        reason = unavailable_reason(profile, hardware)
        here = (auto or auto_by_gpu(hardware)) if profile.name == "auto" else profile
        rows.append({
            "name": profile.name, "targets": profile.targets, "strategies": list(profile.strategies),
            "strategies_here": list(select_strategies(here, hardware)) if reason is None else [],
            "batch_size": here.batch_size, "max_seq_len": here.max_seq_len, "doc_stride": here.doc_stride,
            "device": device_for(here, hardware), "available": reason is None, "reason": reason,
            "resolves_to": here.name if profile.name == "auto" else None,
        })
    return rows


def detected_summary(hardware: Hardware) -> str:
    """What auto saw, e.g. "1× Tesla T4, 15.6 GB" or "no GPU"."""
    if not hardware.usable_gpus:
        return "no GPU"
    names = [gpu.name for gpu in hardware.usable_gpus]
    groups = {name: [g for g in hardware.usable_gpus if g.name == name] for name in dict.fromkeys(names)}
    return ", ".join(f"{len(gpus)}× {name}, {gpus[0].total_bytes / 1e9:.1f} GB" for name, gpus in groups.items())


def profile_choices(hardware: Hardware, auto: Profile | None = None) -> list[tuple[str, str]]:
    """(label, value) pairs for the UI dropdown; unavailable profiles say why in their label, and `auto` names
    the profile it stands for (`auto` as in `describe_profiles`)."""
    choices = []
    for row in describe_profiles(hardware, auto):
        if row["name"] == "auto":
            label = f"auto: {detected_summary(hardware)} → {row['resolves_to']}"
        elif row["available"]:
            label = f"{row['name']}: {row['targets']}"
        else:
            label = f"{row['name']}: {row['targets']} (unavailable: {row['reason']})"
        choices.append((label, row["name"]))
    return choices
