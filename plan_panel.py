"""The page's "Plan for another machine" panel: pick a GPU (or type its memory), a model, a window and a batch, and
see every profile's predicted memory there, the profile `auto` would choose, and the article's advice beside it;
plus the `/plan` API endpoint, which returns what `python -m longqa plan --json` prints.

UI only: the plan is `longqa.gpu_plan`'s, the formatting `ui_format`'s; domain errors become `gr.Error` here.
It never loads a model, and it reads configs only of the models the page offers.
"""

from __future__ import annotations

import html

import gradio as gr

import ui_format
from longqa.gpu_plan import DEFAULT_HOST_GB, LongQAError, MachinePlan, plan_request
from strategies.gpu_catalog import GPU_MODELS

OTHER_GPU = "Other: by its memory"
NO_GPU = "No GPU (CPU only)"
DEFAULT_GPU = "T4"
MAX_WINDOW_TOKENS = 4096  # the registry models' limit; the plan checks each model's own
NOTE = ("Every number here is **predicted** by the memory planner from the model's config, not measured. The GPU "
        "predictions rest on activation formulas fitted on CPU for the eager paths and on stated constants for the "
        "CUDA context (0.6 GB) and the allocator's slack (10 %); none has been checked on a GPU yet "
        "(docs/gpu-planning.md in the repository explains them).")


def gpu_choices() -> list[tuple[str, str]]:
    choices = [(f"{gpu.name}: {gpu.memory_gb:g} GB, compute {gpu.compute_capability[0]}.{gpu.compute_capability[1]}"
                f"{', bf16' if gpu.supports_bf16 else ', fp16 only'}", gpu.name) for gpu in GPU_MODELS.values()]
    return choices + [(OTHER_GPU, OTHER_GPU), (NO_GPU, NO_GPU)]


def machine_arguments(gpu: str, gpu_memory_gb, compute_capability, gpus, cpu_memory_gb) -> dict:
    """The plan's keyword arguments for what the panel's machine fields say."""
    if gpu == NO_GPU:
        return {"cpu_memory_gb": cpu_memory_gb}
    common = {"gpus": int(gpus or 1), "cpu_memory_gb": cpu_memory_gb}
    if gpu == OTHER_GPU:
        return {"gpu_memory_gb": gpu_memory_gb, "compute_capability": compute_capability or None, **common}
    return {"gpu": gpu, **common}


def checked_plan(allowed_models: list[str], model: str, **arguments) -> MachinePlan:
    """The plan, for a model the page offers only (a visitor's text never names a server folder or a Hub id);
    domain errors as gr.Error."""
    if model not in allowed_models:
        raise gr.Error(html.escape(f"Model {model!r} is not offered here; choose one of {', '.join(allowed_models)}."),
                       print_exception=False)
    try:
        return plan_request(model, **arguments)
    except LongQAError as exc:
        raise gr.Error(html.escape(str(exc)), print_exception=False) from exc


def whole(value) -> int | None:
    """A Number field's value as the plan takes it: empty stays None, a whole float becomes an int."""
    if value is None or value == "":
        return None
    return int(value) if float(value) == int(value) else value


def build_plan_panel(allowed_models: list[str], default_model: str) -> dict:
    """Lays out the panel and wires its button and the `/plan` endpoint; returns its components by name."""
    with gr.Accordion("Plan for another machine (predicted memory)", open=False, elem_id="plan-panel"):
        gr.Markdown(NOTE)
        with gr.Row():
            gpu = gr.Dropdown(gpu_choices(), value=DEFAULT_GPU, label="GPU", scale=2)
            gpu_memory = gr.Number(None, label="GPU memory (GB), for Other", minimum=0)
            capability = gr.Textbox(label="Compute capability, for Other", placeholder="e.g. 8.6 (empty: no bf16)")
            gpus = gr.Slider(1, 8, value=1, step=1, label="GPUs")
        with gr.Row():
            model = gr.Dropdown(allowed_models, value=default_model, label="Model", scale=2)
            tokens = gr.Slider(1, MAX_WINDOW_TOKENS, value=MAX_WINDOW_TOKENS, step=1, label="Tokens per window")
            batch = gr.Number(None, label="Batch (windows per forward)", precision=0,
                              info="empty: each profile's own")
            host = gr.Number(DEFAULT_HOST_GB, label="Host RAM (GB)", minimum=0)
            cpu_bf16 = gr.Checkbox(False, label="Host CPU has native bf16")
        plan_btn = gr.Button("Plan", variant="primary")
        with gr.Row():
            ours = gr.Markdown(elem_id="plan-ours")
            article = gr.Markdown(elem_id="plan-article")
        table = gr.Dataframe(headers=ui_format.PLAN_HEADERS, label="Every profile on that machine (predicted)",
                             interactive=False, wrap=True)
        with gr.Accordion("Plan (JSON: what /plan and `python -m longqa plan --json` return)", open=False):
            plan_json = gr.JSON(label="Plan (JSON)")

    def show_plan(model_ref, gpu_name, gpu_memory_gb, compute_capability, gpu_count, window_tokens, batch_size,
                  host_gb, host_bf16):
        plan = checked_plan(allowed_models, model_ref, tokens=whole(window_tokens), batch=whole(batch_size),
                            cpu_bf16=bool(host_bf16),
                            **machine_arguments(gpu_name, gpu_memory_gb, compute_capability, gpu_count, host_gb))
        return {ours: ui_format.plan_recommendation(plan), article: ui_format.plan_article(plan),
                table: ui_format.plan_rows(plan), plan_json: plan.to_json()}

    def plan(model: str, gpu: str | None = None, gpu_memory_gb: float | None = None, gpus: int = 1,
             tokens: int | None = None, batch: int | None = None, cpu_memory_gb: float | None = None,
             cpu_bf16: bool = False, compute_capability: str | None = None) -> dict:
        """Each profile's predicted memory for `model` on a GPU given by name (`gpu`) or by memory
        (`gpu_memory_gb`, with `compute_capability`), `gpus` of them, or a CPU-only machine (`cpu_memory_gb`
        alone), at `tokens` per window and `batch` windows per forward: the JSON `python -m longqa plan --json`
        prints."""
        return checked_plan(allowed_models, model, gpu=gpu or None, gpu_memory_gb=gpu_memory_gb, gpus=gpus,
                            tokens=tokens, batch=batch, cpu_memory_gb=cpu_memory_gb, cpu_bf16=cpu_bf16,
                            compute_capability=compute_capability).to_json()

    plan_btn.click(show_plan, inputs=[model, gpu, gpu_memory, capability, gpus, tokens, batch, host, cpu_bf16],
                   outputs=[ours, article, table, plan_json], api_visibility="private")
    gr.api(plan, api_name="plan")
    return {"gpu": gpu, "gpu_memory": gpu_memory, "capability": capability, "gpus": gpus, "model": model,
            "tokens": tokens, "batch": batch, "host": host, "cpu_bf16": cpu_bf16, "plan": plan_btn, "ours": ours,
            "article": article, "table": table, "json": plan_json}
