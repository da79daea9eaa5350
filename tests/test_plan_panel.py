"""The page's "Plan for another machine" panel: its formatting, its button's handler, and the `/plan` endpoint served
on 127.0.0.1 through gradio_client, which returns what `python -m longqa plan --json` prints."""

from __future__ import annotations

import gradio as gr
import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

from page import plan_panel
from page import format as ui_format
from page import panel_format as panel_fmt
from page.context import make_context
from longqa.gpu_plan import plan_request
from longqa.session import Session

LARGE = "allenai/longformer-large-4096-finetuned-triviaqa"
OFFERED = [LARGE, "valhalla/longformer-base-4096-finetuned-squadv1"]


def offering(models: list[str], default_model: str):
    """A page context offering `models`, starting on `default_model` (nothing loaded: a plan never loads)."""
    return make_context(Session(), models=models, default_model=default_model)


@pytest.fixture(scope="module")
def panel():
    with gr.Blocks() as demo:
        components = plan_panel.build_plan_panel(offering(OFFERED, LARGE))
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True)
    yield demo, components, Client(url, verbose=False)
    demo.close()


def handler(demo, name):
    return next(fn.fn for fn in demo.fns.values() if fn.name == name)


@pytest.mark.slow
def test_the_plan_endpoint_returns_the_commands_json(panel):
    _, _, client = panel
    answer = client.predict(model=LARGE, gpu="T4", tokens=2048, batch=2, api_name="/plan")
    assert answer == plan_request(LARGE, gpu="T4", tokens=2048, batch=2).to_json()
    assert answer["predicted"] is True and answer["recommended"] == "t4-16gb"
    by_memory = client.predict(model=LARGE, gpu_memory_gb=80.0, compute_capability="9.0", api_name="/plan")
    assert by_memory["hardware"]["bf16"] is True and by_memory["recommended"] == "datacenter"
    cpu_only = client.predict(model=LARGE, cpu_memory_gb=16.0, api_name="/plan")
    assert cpu_only["recommended"] == "cpu" and cpu_only["article"] is None


@pytest.mark.parametrize("arguments, message", [
    ({"model": LARGE, "gpu": "Voodoo 3"}, "known: GTX 1650"),
    ({"model": LARGE, "gpu": "Voodoo 3"}, r"GPU 'Voodoo 3' is not .* the API's gpu_memory_gb"),  # quotes as text
    ({"model": LARGE, "gpu": "T4", "batch": 0}, "Batch"),
    ({"model": LARGE, "gpu_memory_gb": 0.0}, "more than 0 GB"),
    ({"model": "/etc", "gpu": "T4"}, "not offered here"),
])
def test_the_plan_endpoint_refuses_bad_input_clearly(panel, arguments, message):
    _, _, client = panel
    with pytest.raises(AppError, match=message):
        client.predict(**arguments, api_name="/plan")


@pytest.mark.slow
def test_the_button_fills_ours_the_article_the_table_and_the_json(panel):
    demo, components, _ = panel
    show = handler(demo, "show_plan")
    shown = show(LARGE, "RTX 3090", 16, "", 1, 4096.0, plan_panel.OWN_BATCH, 16, False)
    by_name = {name: shown[component] for name, component in components.items() if component in shown}
    assert by_name["ours"].startswith("### Ours: `rtx-3090-24gb` (predicted")
    assert "### The article: fp16, gradient checkpointing and batch 8" in by_name["article"]
    assert "saves nothing at inference" in by_name["article"]
    rows = by_name["table"]
    assert [row[0] for row in rows][:3] == ["multi-gpu", "datacenter", "rtx-3090-24gb (recommended)"]
    assert by_name["json"] == plan_request(LARGE, gpu="RTX 3090", tokens=4096, cpu_memory_gb=16).to_json()
    other = show(LARGE, plan_panel.OTHER_GPU, 6, "7.5", 2, 1024, "4", 32, True)
    assert "2× 6 GB GPU" in other[components["ours"]] and "host 32 GB" in other[components["ours"]]
    with pytest.raises(gr.Error, match="not offered"):
        show("/etc", "T4", 16, "", 1, 4096, plan_panel.OWN_BATCH, 16, False)


def test_the_panels_fields_become_the_plans_arguments():
    args = plan_panel.machine_arguments
    assert args("T4", 99, "8.6", 2, 16) == {"gpu": "T4", "gpus": 2, "cpu_memory_gb": 16}
    assert args(plan_panel.OTHER_GPU, 6, "", 1, 16) == {"gpu_memory_gb": 6, "compute_capability": None, "gpus": 1,
                                                         "cpu_memory_gb": 16}
    assert args(plan_panel.NO_GPU, 6, "8.6", 3, 12) == {"cpu_memory_gb": 12}
    assert plan_panel.whole(None) is None and plan_panel.whole(plan_panel.OWN_BATCH) is None
    assert plan_panel.whole(4096.0) == 4096 and plan_panel.whole("8") == 8 and plan_panel.whole(2.5) == 2.5
    with pytest.raises(gr.Error, match="'batch' must be a number or null; this call sent a str"):  # typed text
        plan_panel.checked_plan(offering(OFFERED, LARGE), LARGE, None, gpu="T4", batch=plan_panel.whole("eight"))
    shown = {key: update["visible"] for key, update in plan_panel.show_machine_fields(plan_panel.OTHER_GPU).items()}
    assert shown == {"gpu_memory": True, "capability": True, "gpus": True}
    assert plan_panel.show_machine_fields("T4")["gpu_memory"]["visible"] is False
    assert plan_panel.show_machine_fields(plan_panel.NO_GPU)["gpus"]["visible"] is False


def test_every_number_in_the_table_is_labelled_predicted():
    plan = plan_request(LARGE, gpu="T4", gpus=2, batch=16)
    assert all("predicted" in panel_fmt.PLAN_HEADERS[index] for index in (1, 3, 4))  # fits, peak, per device
    rows = {row[0]: row for row in panel_fmt.plan_rows(plan)}
    assert set(rows) == {row.name + (" (recommended)" if row.name == plan.recommended else "")
                         for row in plan.profiles}
    replicas = rows["multi-gpu (recommended)"]
    assert replicas[1] == "yes" and replicas[2] == "4,096 × 16"
    assert replicas[4].count("CUDA context 600.0 MB") == 2 and "cuda:1" in replicas[4]
    assert rows["datacenter"][3] == ui_format.MISSING and "bf16 needs" in rows["datacenter"][5]


@pytest.mark.slow
def test_without_a_gpu_the_article_has_nothing_to_say():
    assert "no advice for a machine without a GPU" in panel_fmt.plan_article(plan_request(LARGE, cpu_memory_gb=16))
    linked = panel_fmt.plan_article(plan_request(LARGE, gpu="T4"), "gradio_api/file=/app/docs/gpu-planning.md")
    assert "[the article this project grew from](gradio_api/file=/app/docs/gpu-planning.md)" in linked  # named
    nothing = plan_request(LARGE, cpu_memory_gb=0.5)
    assert panel_fmt.plan_recommendation(nothing).startswith("### Ours: nothing fits (predicted)")
