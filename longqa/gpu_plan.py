"""Plan for a machine you do not have: each profile's predicted memory per device for a model, a window length and
a batch on a described machine (a catalog GPU or one given by its memory, how many, the host's RAM), and the profile
`auto` would choose there. Composition only: the numbers are the memory planner's (fed the described hardware, not
this machine's), the choice is `strategies.auto`'s rule, the GPUs the catalog's; nothing is loaded or allocated.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from longqa.article_check import ArticleCheck, check_article
from longqa.models import model_config
from longqa_core.errors import InputError, ProfileError
from strategies.auto import choose_auto
from strategies.gpu_catalog import GpuModel, gpu_model, parse_compute_capability, planned_hardware
from strategies.hardware import Hardware
from strategies.memory_planner import (CPU_PROCESS_BYTES, FIT_MARGIN, ModelShape, MemoryPlan, device_totals,
                                       plan_profile)
from strategies.profiles import PROFILES, SPEED_ORDER, Profile, custom_profile, unavailable_reason

GB = 10**9
DEFAULT_HOST_GB = 16.0  # the planned machine's RAM when none is given: the free Spaces CPU tier's
# Stacks beside the registry's, for what no profile shows (auto never picks them): 4-bit weights.
EXTRA_STACKS = {
    "custom: fp16 + 4-bit": (("half_precision", "bnb_4bit"), {"half_precision": {"dtype": "fp16"}}),
}


@dataclass(frozen=True)
class Machine:
    """A described machine: its hardware, and how it was described."""

    hardware: Hardware
    gpu: str | None  # the catalog's name, "N GB GPU", or None for a CPU-only machine
    gpu_count: int
    host_memory_assumed: bool  # the host's RAM was not given: DEFAULT_HOST_GB

    @property
    def description(self) -> str:
        return describe_hardware(self)

    def to_json(self) -> dict:
        first = self.hardware.gpus[0] if self.hardware.gpus else None
        capability = first.compute_capability if first else None
        return {
            "gpu": self.gpu, "gpu_count": self.gpu_count,
            "gpu_memory_bytes": first.total_bytes if first else None,
            "compute_capability": f"{capability[0]}.{capability[1]}" if capability else None,
            "bf16": first.supports_bf16 if first else None, "fp16": bool(first),
            "host_memory_bytes": self.hardware.host_memory_bytes, "host_memory_assumed": self.host_memory_assumed,
            "cpu_bf16": self.hardware.cpu_bf16, "description": self.description,
        }


@dataclass(frozen=True)
class DevicePlan:
    """One device's predicted need and what it is made of (bytes); `total_bytes` None where nothing is checked
    (disk)."""

    device: str  # "cuda:0", "cpu" (the host), "disk"
    need_bytes: int
    total_bytes: int | None
    parts_bytes: dict[str, int]
    fits: bool | None


@dataclass(frozen=True)
class ProfilePlan:
    """One profile (or extra stack) on the described machine: predicted, never measured."""

    name: str
    strategies: tuple[str, ...]
    fits: bool
    peak_bytes: int | None  # the largest device's predicted need (None: the profile cannot run there)
    devices: tuple[DevicePlan, ...]
    why: str
    precision: str | None = None
    attention: str | None = None
    tokens: int | None = None
    batch: int | None = None
    auto_candidate: bool = True  # one of the profiles `auto` chooses among


@dataclass(frozen=True)
class MachinePlan:
    model: str
    machine: Machine
    tokens: int | None  # as asked (None: each profile's own window)
    batch: int | None  # as asked (None: each profile's own batch)
    recommended: str | None
    recommendation_reason: str
    profiles: tuple[ProfilePlan, ...]
    article: ArticleCheck | None = None  # the article's advice for this GPU and where it is wrong (no GPU: None)

    def profile(self, name: str) -> ProfilePlan:
        return next(plan for plan in self.profiles if plan.name == name)

    def to_json(self) -> dict:
        """The plan as JSON types (what `--json` prints and `/plan` returns); "predicted" says what every number
        is."""
        return plain({"model": self.model, "hardware": self.machine.to_json(), "tokens": self.tokens,
                      "batch": self.batch, "recommended": self.recommended,
                      "recommendation_reason": self.recommendation_reason, "predicted": True,
                      "profiles": [asdict(plan) for plan in self.profiles],
                      "article": asdict(self.article) if self.article else None})


def plain(value):
    """Tuples as lists, all the way down: the same value as after a JSON round trip."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


# ------------------------------------------------------------------------------------------------ the machine
def describe_machine(*, gpu: str | None = None, gpu_memory_gb: float | None = None, compute_capability=None,
                     gpus: int = 1, cpu_memory_gb: float | None = None, cpu_bf16: bool = False) -> Machine:
    """The machine the command line or the page describes. A GPU by catalog name or by memory (with an optional
    compute capability, "8.6"); without either, a CPU-only machine, which needs its RAM (`cpu_memory_gb`)."""
    capability = parse_compute_capability(compute_capability)
    model: GpuModel | None = gpu_model(gpu) if gpu not in (None, "") else None
    if model is None and gpu_memory_gb is None and cpu_memory_gb is None:
        raise InputError("Describe the machine: a GPU by name (--gpu T4) or by memory (--gpu-memory 16), or a "
                         "CPU-only machine by its RAM (--cpu-memory 16).")
    if model is None and gpu_memory_gb is None and (capability is not None or gpus != 1):
        raise InputError("A compute capability or a number of GPUs describes GPUs: name the GPU or give its memory.")
    assumed = cpu_memory_gb is None
    hardware = planned_hardware(model, gpu_memory_gb=gpu_memory_gb, compute_capability=capability, gpus=gpus,
                                host_memory_gb=DEFAULT_HOST_GB if assumed else cpu_memory_gb, cpu_bf16=cpu_bf16)
    name = model.name if model else (hardware.gpus[0].name if hardware.gpus else None)
    return Machine(hardware=hardware, gpu=name, gpu_count=len(hardware.gpus), host_memory_assumed=assumed)


def describe_hardware(machine: Machine) -> str:
    """"2× T4 (16 GB, compute 7.5: fp16, no bf16); host 16 GB RAM (assumed), CPU without native bf16"."""
    hardware = machine.hardware
    host = (f"host {hardware.host_memory_bytes / GB:g} GB RAM{' (assumed)' if machine.host_memory_assumed else ''}, "
            f"CPU {'with' if hardware.cpu_bf16 else 'without'} native bf16")
    if not hardware.gpus:
        return f"no GPU; {host}"
    first = hardware.gpus[0]
    capability = first.compute_capability
    known = (f"compute {capability[0]}.{capability[1]}: fp16, {'bf16' if first.supports_bf16 else 'no bf16'}"
             if capability else "compute capability not given: fp16, bf16 not assumed")
    size = "" if machine.gpu.endswith(" GB GPU") else f"{first.total_bytes / GB:g} GB, "  # by memory: named by it
    return f"{len(hardware.gpus)}× {machine.gpu} ({size}{known}); {host}"


# ------------------------------------------------------------------------------------------------ the model
def plan_config(model_ref: str):
    """The model's config (offline for the registry), refused when it is not a Longformer: the planner's formulas
    are Longformer's."""
    config = model_config(model_ref)
    if getattr(config, "model_type", None) != "longformer":
        raise InputError(f"{model_ref!r} is a {getattr(config, 'model_type', 'unknown')!r} model: the planner "
                         "predicts Longformer's memory only.")
    return config


def check_request(config, tokens: int | None, batch: int | None) -> None:
    limit = ModelShape.from_config(config).positions - 2
    if tokens is not None and not (isinstance(tokens, int) and 1 <= tokens <= limit):
        raise InputError(f"Tokens per window must be a whole number from 1 to the model's limit of {limit:,}, got "
                         f"{tokens}: a longer document is cut into windows, and the plan is per batch of windows.")
    if batch is not None and not (isinstance(batch, int) and 1 <= batch <= 4096):
        raise InputError(f"Batch (windows per forward) must be a whole number from 1 to 4,096, got {batch}.")


# ------------------------------------------------------------------------------------------------ planning
def candidate_profiles() -> list[tuple[str, Profile, bool]]:
    """(name, profile, whether `auto` chooses among it): the registry's concrete profiles fastest first, then the
    extra stacks."""
    rows = [(name, PROFILES[name], True) for name in SPEED_ORDER]
    for name, (strategies, options) in EXTRA_STACKS.items():
        rows.append((name, custom_profile(strategies, device="cuda", options=options), False))
    return rows


def plan_one(config, name: str, profile: Profile, hardware: Hardware, *, tokens: int | None, batch: int | None,
             auto_candidate: bool) -> ProfilePlan:
    reason = unavailable_reason(profile, hardware)
    if reason is not None and profile.device == "cuda" and not hardware.usable_gpus:
        reason = "needs a CUDA GPU; this machine has none"
    if reason is None:
        try:
            plan = plan_profile(config, profile, hardware, tokens=tokens, batch=batch, runtime_bytes=CPU_PROCESS_BYTES)
        except ProfileError as exc:
            reason = str(exc)
    if reason is not None:
        return ProfilePlan(name=name, strategies=profile.strategies, fits=False, peak_bytes=None, devices=(),
                           why=f"cannot run there: {reason}", auto_candidate=auto_candidate)
    devices = device_plans(plan, hardware)
    return ProfilePlan(name=name, strategies=plan.strategies, fits=plan.fits(hardware),
                       peak_bytes=max(device.need_bytes for device in devices if device.device != "disk"),
                       devices=devices, why=why(plan, hardware, devices), precision=plan.precision,
                       attention=plan.attention, tokens=plan.tokens, batch=plan.batch, auto_candidate=auto_candidate)


def device_plans(plan: MemoryPlan, hardware: Hardware) -> tuple[DevicePlan, ...]:
    totals = device_totals(hardware)
    over = plan.devices_over(hardware)
    devices = [DevicePlan(device=device, need_bytes=plan.device_need_bytes[device], total_bytes=totals.get(device),
                          parts_bytes=dict(parts), fits=device not in over if device in totals else None)
               for device, parts in plan.device_parts.items()]
    disk = plan.predicted_weight_bytes_per_device.get("disk")
    if disk:
        devices.append(DevicePlan(device="disk", need_bytes=disk, total_bytes=None, parts_bytes={"weights": disk},
                                  fits=None))
    return tuple(devices)


OFFLOAD_PLACES = {"cpu": "the host", "disk": "disk"}


def why(plan: MemoryPlan, hardware: Hardware, devices: tuple[DevicePlan, ...]) -> str:
    """Why a planned profile fits or not, in the planner's numbers."""
    over = plan.devices_over(hardware)
    if over:
        return "; ".join(f"{device} needs {need / GB:.2f} GB, over {100 * (1 - FIT_MARGIN):.0f} % of its "
                         f"{total / GB:g} GB" for device, (need, total) in over.items())
    shares = [f"{d.device} {100 * d.need_bytes / d.total_bytes:.0f} % of {d.total_bytes / GB:g} GB"
              for d in devices if d.total_bytes]
    notes = [f"{d.parts_bytes['weights'] / GB:.2f} GB of weights offloaded to {OFFLOAD_PLACES[d.device]}"
             for d in devices if d.device in OFFLOAD_PLACES and plan.device != "cpu"]
    return "fits: " + ", ".join(shares + notes)


def plan_machine(model_ref: str, machine: Machine, *, tokens: int | None = None,
                 batch: int | None = None) -> MachinePlan:
    """Every profile's predicted need on `machine` for `model_ref` at `tokens` per window and `batch` windows per
    forward (None: each profile's own), and the profile `auto` would load there."""
    config = plan_config(model_ref)
    check_request(config, tokens, batch)
    hardware = machine.hardware
    plans = tuple(plan_one(config, name, profile, hardware, tokens=tokens, batch=batch, auto_candidate=candidate)
                  for name, profile, candidate in candidate_profiles())
    chosen, why_chosen = choose_auto(hardware, config, tokens=tokens, batch=batch, runtime_bytes=CPU_PROCESS_BYTES)
    article = check_article(config, hardware, tokens=tokens)
    if next(plan for plan in plans if plan.name == chosen.name).fits:
        reason = f"{why_chosen}, by the rule auto loads with (strategies/auto.py)"
        return MachinePlan(model_ref, machine, tokens, batch, chosen.name, reason, plans, article)
    smallest = min((plan for plan in plans if plan.peak_bytes), key=lambda plan: plan.peak_bytes, default=None)
    reason = "nothing fits: " + (f"the smallest predicted need is {smallest.name}'s ({smallest.why})" if smallest
                                 else "no profile can run on this machine")
    return MachinePlan(model_ref, machine, tokens, batch, None, reason, plans, article)


def plan_request(model_ref: str, *, gpu: str | None = None, gpu_memory_gb: float | None = None,
                 compute_capability=None, gpus: int = 1, cpu_memory_gb: float | None = None, cpu_bf16: bool = False,
                 tokens: int | None = None, batch: int | None = None) -> MachinePlan:
    """`describe_machine` then `plan_machine`: what the command line and the page's API call."""
    machine = describe_machine(gpu=gpu, gpu_memory_gb=gpu_memory_gb, compute_capability=compute_capability,
                               gpus=gpus, cpu_memory_gb=cpu_memory_gb, cpu_bf16=cpu_bf16)
    return plan_machine(model_ref, machine, tokens=tokens, batch=batch)
