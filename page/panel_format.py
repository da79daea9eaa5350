"""Formatting for the panels beside the answer: "Compare profiles" (a column per profile, each figure with its ratio
to the first) and "Plan for another machine" (each profile's predicted fit, the recommendation, the article's
advice beside it). Pure functions of the readouts, as `page.format`'s are, whose units they share.
"""

from __future__ import annotations

from page.format import MISSING, escape_markdown, format_bytes, format_seconds


COMPARE_MEASURE = "measure"  # the first column's header; a column per profile follows
COMPARE_MEASURES = ["time", "peak memory (process)", "this request's own peak", "windows/s",
                    "same answer as the first", "answer"]


def compare_headers(comparison) -> list[str]:
    """The comparison table's headers: the measures' column, then each profile compared, in order ("auto → cpu"
    where a profile answered as another)."""
    headings = []
    for run in comparison.runs:
        answered = f" → {run.profile}" if run.profile and run.profile != run.choice.name else ""
        headings.append(f"{run.choice.label}{answered}")
    return [COMPARE_MEASURE, *headings]


def compare_rows(comparison) -> list[list]:
    """A comparison (`longqa.compare.Comparison`, fields read) as rows of COMPARE_MEASURES with a column per profile
    (`compare_headers`: the two or three profiles usually compared fit a phone's width side by side), each figure
    with its ratio to the first profile's: "1.20 s (0.52×)"."""
    columns = []
    for run in comparison.runs:
        ratios = comparison.ratios(run)
        columns.append([with_ratio(format_seconds(run.time_s), ratios["time"]),
                        with_ratio(format_bytes(run.peak_bytes), ratios["peak"]),
                        with_ratio(format_bytes(run.request_peak_bytes), ratios["request_peak"]),
                        with_ratio(MISSING if run.windows_per_s is None else f"{run.windows_per_s:.2f}",
                                   ratios["windows_per_s"]),
                        "yes" if comparison.same_answer(run) else "no", run.answer_text or "(not found)"])
    return [[measure, *(column[index] for column in columns)] for index, measure in enumerate(COMPARE_MEASURES)]


def with_ratio(text: str, ratio: float | None) -> str:
    return text if ratio is None else f"{text} ({ratio:.2f}×)"


def compare_summary(comparison) -> str:
    """Markdown under the table: what was compared, and what the memory rows measure."""
    first = comparison.first
    if first is None:
        return ""
    measured = first.readout.request_memory.measured_as
    return (f"{len(comparison.runs)} profiles, each loaded afresh, asked *{escape_markdown(comparison.question)}* "
            f"over {escape_markdown(', '.join(comparison.documents))} with {escape_markdown(comparison.model)}. "
            f"Ratios (×) are to the first profile. Peak memory is the process's {measured} at its peak; this "
            f"request's own peak is that peak above the {measured} right before the request (the model loaded), "
            "which depends much less on what ran before than the process's peak; a few MB either way is noise. "
            "Windows/s counts forward passes only.")


# ------------------------------------------------------------------------------------------------ plan for a machine
PLAN_HEADERS = ["profile", "fits (predicted)", "window × batch", "predicted peak", "per device (predicted)", "why"]
PLAN_PART_LABELS = {"weights": "weights", "activations": "activations", "offload_stream": "offloaded layer",
                    "allocator_slack": "allocator slack", "cuda_context": "CUDA context", "process": "process",
                    "overhead": "allocator/scratch"}


def plan_device_text(device) -> str:
    """"cuda:0 5.4 GB of 16 GB: weights 0.9 GB + activations 3.5 GB + ..." from a plan's device (fields read)."""
    total = f" of {format_bytes(device.total_bytes)}" if device.total_bytes else ""
    parts = " + ".join(f"{PLAN_PART_LABELS.get(name, name)} {format_bytes(value)}"
                       for name, value in device.parts_bytes.items() if value)
    return f"{device.device} {format_bytes(device.need_bytes)}{total}: {parts}"


def plan_rows(plan) -> list[list]:
    """One row per profile of a machine plan (`longqa.gpu_plan.MachinePlan`, fields read)."""
    rows = []
    for profile in plan.profiles:
        name = profile.name + (" (recommended)" if profile.name == plan.recommended else "")
        setting = f"{profile.tokens:,} × {profile.batch}" if profile.tokens else MISSING
        rows.append([name, "yes" if profile.fits else "no", setting, format_bytes(profile.peak_bytes),
                     "; ".join(plan_device_text(device) for device in profile.devices) or MISSING, profile.why])
    return rows


def plan_recommendation(plan) -> str:
    """Markdown: our recommendation for the planned machine, labelled predicted."""
    machine = escape_markdown(plan.machine.description)
    if plan.recommended is None:
        return f"### Ours: nothing fits (predicted)\n{escape_markdown(plan.recommendation_reason)}\n\n{machine}"
    chosen = plan.profile(plan.recommended)
    return (f"### Ours: `{chosen.name}` (predicted {format_bytes(chosen.peak_bytes)} at its largest device)\n"
            f"{escape_markdown(', '.join(chosen.strategies))}; {chosen.tokens:,} tokens × batch {chosen.batch}: "
            f"{escape_markdown(plan.recommendation_reason)}.\n\nMachine: {machine}")


def plan_article(plan, write_up_url: str | None = None) -> str:
    """Markdown: the article's advice for the planned GPU and where the planner's predictions disagree, saying which
    article it is and linking to the write-up that checks it (`write_up_url`)."""
    article = plan.article
    which = "the article this project grew from"
    named = f"[{which}]({write_up_url})" if write_up_url else which
    if article is None:
        return f"### The article\n{named[:1].upper() + named[1:]} gives no advice for a machine without a GPU."
    corrections = "\n".join(f"- {escape_markdown(line)}" for line in article.corrections)
    return (f"### The article: {escape_markdown(article.advice)}\n"
            f"The answer of {named} for {escape_markdown(article.cards)} (our profile `{article.profile}`). Where "
            f"the predictions say it is wrong or says too little:\n{corrections}")
