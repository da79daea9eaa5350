"""The article's advice for a GPU beside ours: the stack the article this project grew from gives a card of that
size, and where the memory planner's numbers (predicted for that card, never measured) say the advice is wrong.
Composition only: it reads the planner and the profile registry; which profile we recommend is `gpu_plan`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from strategies.hardware import Hardware
from strategies.memory_planner import (CPU_PROCESS_BYTES, ModelShape, MemoryPlan, plan_profile,
                                       training_step_bytes)
from strategies.device_map import GPU_HEADROOM
from strategies.profiles import PROFILES, Profile, auto_candidate, custom_profile, is_available

GB = 10**9
MAX_BATCH = 1024  # the search for the largest batch that fits stops here

# The article's three answers, by the registry profile that implements each (the registry's rows came from it):
# profile -> (the cards it speaks of, its advice in its own terms).
ARTICLE = {
    "rtx-3090-24gb": ("an RTX 3090 (24 GB)", "fp16, gradient checkpointing and batch 8"),
    "t4-16gb": ("a T4 (16 GB)", "fp16 with dynamic batching and memory-mapped loading"),
    "consumer-gpu": ("consumer cards (12 GB and less)", "quantization (8-bit) and CPU/disk offload"),
}


@dataclass(frozen=True)
class ArticleCheck:
    profile: str  # the registry profile that implements the advice
    cards: str  # the cards the article speaks of
    advice: str
    corrections: tuple[str, ...]  # where the planner's numbers disagree, each with its numbers


def article_profile(hardware: Hardware) -> str | None:
    """The article's answer for this machine's GPU: by the card's size, as the registry reads the article (the
    article stops at 24 GB cards: bigger ones get its 3090 answer); None without a GPU (it has no CPU answer)."""
    if not hardware.usable_gpus:
        return None
    name = auto_candidate(replace(hardware, gpus=hardware.usable_gpus[:1]))
    return "rtx-3090-24gb" if name == "datacenter" else name


def check_article(config, hardware: Hardware, *, tokens: int | None) -> ArticleCheck | None:
    """The article's advice for `hardware`'s GPU and the planner's corrections, at `tokens` per window."""
    name = article_profile(hardware)
    if name is None:
        return None
    profile = PROFILES[name]
    plan = predicted(config, profile, hardware, tokens=tokens)
    checks = {"rtx-3090-24gb": checkpointing_and_batch, "t4-16gb": mapping_and_batching,
              "consumer-gpu": quantization_and_offload}[name]
    cards, advice = ARTICLE[name]
    return ArticleCheck(name, cards, advice, tuple(checks(config, profile, plan, hardware)))


def predicted(config, profile: Profile, hardware: Hardware, *, tokens: int | None = None,
              batch: int | None = None) -> MemoryPlan:
    return plan_profile(config, profile, hardware, tokens=tokens, batch=batch, runtime_bytes=CPU_PROCESS_BYTES)


def gb(value: float) -> str:
    return f"{value / GB:.2f} GB"


def need(plan: MemoryPlan) -> int:
    return plan.device_need_bytes.get(plan.device, max(plan.device_need_bytes.values()))


def verdict(plan: MemoryPlan, hardware: Hardware) -> str:
    return "fits" if plan.fits(hardware) else "does not fit"


def largest_batch(config, profile: Profile, hardware: Hardware, tokens: int) -> int:
    """The largest batch of `profile` predicted to fit (0: not even one window), up to MAX_BATCH."""
    def fits(batch):
        return predicted(config, profile, hardware, tokens=tokens, batch=batch).fits(hardware)

    if not fits(1):
        return 0
    low, high = 1, 2
    while high <= MAX_BATCH and fits(high):
        low, high = high, high * 2
    high = min(high, MAX_BATCH + 1)
    while high - low > 1:  # fits(low), not fits(high)
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def batch_line(config, profile: Profile, plan: MemoryPlan, hardware: Hardware) -> str:
    most = largest_batch(config, profile, hardware, plan.tokens)
    limit = f"at least {MAX_BATCH}" if most >= MAX_BATCH else str(most)
    return (f"Batch {plan.batch} at {plan.tokens:,} tokens needs {gb(need(plan))} here ({verdict(plan, hardware)}); "
            f"the largest batch of this stack predicted to fit is {limit}.")


def checkpointing_and_batch(config, profile: Profile, plan: MemoryPlan, hardware: Hardware) -> list[str]:
    shape = ModelShape.from_config(config)
    without = training_step_bytes(shape, tokens=plan.tokens, batch=1, checkpointing=False)
    with_it = training_step_bytes(shape, tokens=plan.tokens, batch=1, checkpointing=True)
    lines = [f"Gradient checkpointing saves nothing at inference: it acts only while gradients are computed, so "
             f"this stack's inference need ({gb(need(plan))}) is the same without it. In a training step (fp32, "
             f"{plan.tokens:,} tokens, batch 1) it would save {gb(without - with_it)} of {gb(without)} beyond the "
             "weights.",
             batch_line(config, profile, plan, hardware)]
    datacenter = PROFILES["datacenter"]
    if is_available(datacenter, hardware):
        fast = predicted(config, datacenter, hardware, tokens=plan.tokens, batch=plan.batch)
        lines.append(f"This card has bf16 (compute capability 8.0+): bf16 with the fast attention at batch "
                     f"{plan.batch} needs {gb(need(fast))} instead of fp16 eager's {gb(need(plan))}.")
    return lines


def mapping_and_batching(config, profile: Profile, plan: MemoryPlan, hardware: Hardware) -> list[str]:
    without = custom_profile([name for name in profile.strategies if name != "mmap_loading"], device="cuda",
                             batch_size=profile.batch_size, options=profile.options)
    unmapped = predicted(config, without, hardware, tokens=plan.tokens)
    same = "the same" if need(unmapped) == need(plan) else f"{gb(need(unmapped))} instead of {gb(need(plan))}"
    return [f"Memory-mapped loading saves host RAM while loading, not GPU memory: without it the GPU's predicted need "
            f"is {same} ({gb(need(plan))}). transformers 5 maps safetensors anyway; the strategy converts a .bin "
            "checkpoint once.",
            "Dynamic batching halves a batch after an out-of-memory error; it does not lower a batch's peak. "
            + batch_line(config, profile, plan, hardware)]


def quantization_and_offload(config, profile: Profile, plan: MemoryPlan, hardware: Hardware) -> list[str]:
    weights = plan.predicted_weight_bytes_per_device
    on_gpu = weights.get(plan.device, 0)
    elsewhere = {device: size for device, size in weights.items() if device in ("cpu", "disk")}
    if elsewhere:
        places = {"cpu": "the host", "disk": "disk"}
        offload = ("Offload puts " + " and ".join(f"{gb(size)} of weights on {places[device]}"
                                                  for device, size in elsewhere.items())
                   + ", copied to the GPU on every forward.")
    else:
        offload = (f"Offload moves nothing here: the 8-bit weights ({gb(on_gpu)}) fit in the card's weight budget "
                   f"({GPU_HEADROOM:.0%} of its memory), so the host holds none of them.")
    fp16 = custom_profile(["half_precision"], device="cuda", batch_size=plan.batch,
                          options={"half_precision": {"dtype": "fp16"}})
    half = predicted(config, fp16, hardware, tokens=plan.tokens)
    parts = plan.device_parts.get(plan.device, {})
    rest = parts.get("activations", 0) + parts.get("cuda_context", 0)
    larger = "more than the weights" if rest > on_gpu else "less than the weights"
    return [offload,
            f"At {plan.tokens:,} tokens and batch {plan.batch} the weights are {gb(on_gpu)} of the {gb(need(plan))} "
            f"predicted; activations ({gb(parts.get('activations', 0))}) and the CUDA context "
            f"({gb(parts.get('cuda_context', 0))}) take {larger}, and quantization shrinks neither. fp16 without "
            f"quantization needs {gb(need(half))} here ({verdict(half, hardware)}).",
            batch_line(config, profile, plan, hardware)]
