"""The page's "Plan for another machine" panel: pick a GPU (or type its memory), a model, a window and a batch, and
see every profile's predicted memory there, the profile `auto` would choose, and the article's advice beside it;
plus the `/plan` API endpoint, which returns what `python -m longqa plan --json` prints.

UI only: the plan is `longqa.gpu_plan`'s, the formatting `page.format`'s; domain errors become `gr.Error` here.
It never loads a model, and it reads configs only of the models the page offers. A plan counts in the visitor's
share at the model lane's door, as every request does, and checks each field's type first.
"""

from __future__ import annotations


import gradio as gr

from longqa.gpu_plan import DEFAULT_HOST_GB, MachinePlan, plan_request
from longqa.models import DEFAULT_MODEL
from longqa_core.errors import LongQAError
from page import panel_format as panel_fmt
from page.downloads import doc_url
from page.asking import visitor_keys
from page.context import AppContext, requests_group
from page.hardening import cut, escape, expect, user_errors
from page.picks import model_name
from page.tables import ReadoutTable
from strategies.gpu_catalog import GPU_MODELS

OTHER_GPU = "Other: by its memory"
NO_GPU = "No GPU (CPU only)"
OWN_BATCH = "each profile's own"
BATCHES = [OWN_BATCH, 1, 2, 4, 8, 16, 32, 64]
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
    common = {"gpus": whole(gpus) or 1, "cpu_memory_gb": cpu_memory_gb}
    if gpu == OTHER_GPU:
        return {"gpu_memory_gb": gpu_memory_gb, "compute_capability": compute_capability or None, **common}
    return {"gpu": gpu, **common}


NUMBER = (int, float)
# What each of the plan's fields may be: the API's names (`plan`); the panel's fields arrive under the same names.
FIELD_KINDS = {"model": (str,), "gpu": (str,), "gpu_memory_gb": NUMBER, "gpus": NUMBER, "tokens": NUMBER,
               "batch": NUMBER, "cpu_memory_gb": NUMBER, "cpu_bf16": (bool,), "compute_capability": (str, *NUMBER)}


def checked_fields(model, arguments: dict) -> None:
    """InputError naming the first field of the wrong type (a GPU sent as a number, memory as text), before any
    work: the plan's own checks then read values of the types they expect."""
    expect("model", model, str, optional=False)
    for field, value in arguments.items():
        expect(field, value, *FIELD_KINDS[field])


def checked_plan(ctx: AppContext, model: str, request: gr.Request | None, **arguments) -> MachinePlan:
    """The plan, for a model the page offers only (a visitor's text never names a server folder or a Hub id), its
    fields' types checked and its place taken at the lane's door (LaneBusyError past the visitor's share); domain
    errors as gr.Error, with what the visitor sent cut short."""
    with user_errors("Planning"):
        checked_fields(model, arguments)
        if model not in ctx.models:
            raise gr.Error(escape(f"Model {cut(repr(model))} is not offered here; choose one of "
                                  f"{', '.join(ctx.models)}."), print_exception=False)
        # Under the backend's load lock: the planner builds meta-device models with accelerate's init_empty_weights,
        # which patches torch's modules for every thread while it runs, so a load beside it would fail.
        with ctx.lane.door(visitor_keys(ctx, request)), ctx.session.lock:
            try:
                return plan_request(model, **arguments)
            except LongQAError as exc:
                raise gr.Error(escape(cut(str(exc), 1000)), print_exception=False) from exc


def whole(value) -> int | None:
    """A field's value as the plan takes it: empty or "each profile's own" stays None, a whole number (a typed
    "8", a slider's 4096.0) becomes an int; anything else goes to the plan as it is, which says why it is wrong."""
    if value is None or value in ("", OWN_BATCH):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return value
    return int(number) if number == int(number) else value


def show_machine_fields(gpu: str) -> dict:
    """The memory and compute capability fields for a GPU given by memory; the GPU count for any GPU."""
    return {"gpu_memory": gr.update(visible=gpu == OTHER_GPU), "capability": gr.update(visible=gpu == OTHER_GPU),
            "gpus": gr.update(visible=gpu != NO_GPU)}


def build_plan_panel(ctx: AppContext) -> dict:
    """Lays out the panel and wires its button and the `/plan` endpoint; returns its components by name. It offers
    the page's models, and starts on the registry's default model where the page offers it (the one worth planning
    a GPU for), else on the page's own."""
    allowed_models = ctx.models
    default_model = DEFAULT_MODEL if DEFAULT_MODEL in allowed_models else ctx.selection.model
    with gr.Accordion("Plan for another machine (predicted memory)", open=False, elem_id="plan-panel"):
        gr.Markdown(NOTE)
        with gr.Row():
            gpu = gr.Dropdown(gpu_choices(), value=DEFAULT_GPU, label="GPU", scale=2)
            gpu_memory = gr.Number(16, label="GPU memory (GB)", minimum=0, visible=False)
            capability = gr.Textbox(label="Compute capability", placeholder="e.g. 8.6 (empty: no bf16)",
                                    visible=False)
            gpus = gr.Slider(1, 8, value=1, step=1, label="GPUs")
        with gr.Row():
            model = gr.Dropdown([(model_name(ref), ref) for ref in allowed_models], value=default_model,
                                label="Model to plan for", scale=2)  # the Model picker's short names
            tokens = gr.Slider(1, MAX_WINDOW_TOKENS, value=MAX_WINDOW_TOKENS, step=1, label="Tokens per window")
            batch = gr.Dropdown(BATCHES, value=OWN_BATCH, label="Batch (windows per forward)",
                                allow_custom_value=True, min_width=220)  # "each profile's own" whole
            host = gr.Number(DEFAULT_HOST_GB, label="Host RAM (GB)", minimum=0)
            cpu_bf16 = gr.Checkbox(False, label="Host CPU has native bf16")
        plan_btn = gr.Button("Plan", variant="primary")
        with gr.Row():  # side by side where there is room, one above the other on a phone
            with gr.Column(min_width=320):
                ours = gr.Markdown(elem_id="plan-ours")
            with gr.Column(min_width=320):
                article = gr.Markdown(elem_id="plan-article")
        table = ReadoutTable(headers=panel_fmt.PLAN_HEADERS, label="Every profile on that machine (predicted)")
        with gr.Accordion("Plan (JSON: what /plan and `python -m longqa plan --json` return)", open=False):
            plan_json = gr.JSON(label="Plan (JSON)")

    components = {"gpu": gpu, "gpu_memory": gpu_memory, "capability": capability, "gpus": gpus, "model": model,
                  "tokens": tokens, "batch": batch, "host": host, "cpu_bf16": cpu_bf16, "plan": plan_btn,
                  "ours": ours, "article": article, "table": table, "json": plan_json}

    def show_plan(model_ref, gpu_name, gpu_memory_gb, compute_capability, gpu_count, window_tokens, batch_size,
                  host_gb, host_bf16, request: gr.Request = None):
        plan = checked_plan(ctx, model_ref, request, tokens=whole(window_tokens),
                            batch=whole(batch_size), cpu_bf16=bool(host_bf16),
                            **machine_arguments(gpu_name, gpu_memory_gb, compute_capability, gpu_count, host_gb))
        return {ours: panel_fmt.plan_recommendation(plan),
                article: panel_fmt.plan_article(plan, doc_url("docs/gpu-planning.md")),
                table: panel_fmt.plan_rows(plan), plan_json: plan.to_json()}

    def plan(model: str, gpu: str | None = None, gpu_memory_gb: float | None = None, gpus: int = 1,
             tokens: int | None = None, batch: int | None = None, cpu_memory_gb: float | None = None,
             cpu_bf16: bool = False, compute_capability: str | None = None, request: gr.Request = None) -> dict:
        """Each profile's predicted memory for `model` on a GPU given by name (`gpu`) or by memory
        (`gpu_memory_gb`, with `compute_capability`), `gpus` of them, or a CPU-only machine (`cpu_memory_gb`
        alone), at `tokens` per window and `batch` windows per forward: the JSON `python -m longqa plan --json`
        prints."""
        return checked_plan(ctx, model, request, gpu=gpu or None, gpu_memory_gb=gpu_memory_gb,
                            gpus=1 if gpus is None else gpus,
                            tokens=tokens, batch=batch, cpu_memory_gb=cpu_memory_gb, cpu_bf16=cpu_bf16,
                            compute_capability=compute_capability).to_json()

    gpu.change(lambda name: {components[key]: update for key, update in show_machine_fields(name).items()},
               inputs=gpu, outputs=[gpu_memory, capability, gpus], queue=False, api_visibility="private")
    plan_btn.click(show_plan, inputs=[model, gpu, gpu_memory, capability, gpus, tokens, batch, host, cpu_bf16],
                   outputs=[ours, article, table, plan_json], api_visibility="private", **requests_group(ctx))
    gr.api(plan, api_name="plan", **requests_group(ctx))
    return components
