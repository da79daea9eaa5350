"""The page's training-step panel and `/training_step`: one forward+backward step on a window of a bundled sample,
with and without gradient checkpointing, where that strategy saves memory (at inference it saves nothing). Not the
step itself (`page.zerogpu.training_step_on_gpu` runs the backend's) nor its formatting (`page.format`).
"""

from __future__ import annotations

import gradio as gr
import pandas as pd

from longqa_core.errors import ProfileError
from page import format as fmt
from page.asking import count_or_default, model_turn
from page.loading import ensure_loaded
from page.context import AppContext, requests_group
from page.events import bind, listen
from page.hardening import user_errors
from page.tables import ReadoutTable
from page.zerogpu import training_step_on_gpu

DEFAULT_TRAINING_WINDOW = 512
TRAINING_LOCKED = ("This deployment is shared and fixes its model: the training-step readout holds the model alone, "
                   "so it is turned off here. Run the page yourself (`python app.py`) to try it.")


def build_training_panel(ctx: AppContext) -> None:
    """One training step with and without gradient checkpointing: where that strategy saves memory."""
    with gr.Accordion("Training-step memory: gradient checkpointing", open=False):
        gr.Markdown("One forward+backward step on a window of a bundled sample, with and without gradient "
                    "checkpointing. This is where that strategy saves memory; at inference it saves nothing.")
        window_slider = gr.Slider(128, 4096, value=DEFAULT_TRAINING_WINDOW, step=64, label="Window (tokens)")
        train_btn = gr.Button("Run one training step")
        training_table = ReadoutTable(headers=fmt.TRAINING_HEADERS, label="Training step")
        training_text = gr.Markdown(label="Training step summary")  # the label names it in the API
    listen(train_btn.click, bind(run_training_step, ctx), inputs=window_slider,
           outputs={"table": training_table, "summary": training_text}, **requests_group(ctx),
           api_name="training_step")


def run_training_step(ctx: AppContext, window_tokens, request: gr.Request = None, progress=gr.Progress()) -> dict:
    """The training-step readout: both peaks and times, and what checkpointing saved. It holds the model alone (it
    changes the model's mode), one step at a time whoever asks (`ModelLane.turn`'s `only_one`: another is refused
    at once), so a crowd of steps holds another visitor's answer back by one step, not by all of them. Off under
    --lock-profile unless the operator allows it (`--allow-training`)."""
    with user_errors("The training step"):
        if ctx.lock_profile and not ctx.allow_training:
            raise ProfileError(TRAINING_LOCKED)
        window_tokens = count_or_default(window_tokens, "The window", DEFAULT_TRAINING_WINDOW)
        with model_turn(ctx, request, progress, exclusive=True, only_one="training step"):
            ensure_loaded(ctx, progress)
            progress(0.1, desc="Forward+backward without, then with checkpointing")
            readout, window = training_step_on_gpu(ctx.key, window_tokens)
    return {"table": pd.DataFrame(fmt.training_rows(readout), columns=fmt.TRAINING_HEADERS),
            "summary": fmt.training_summary(readout, window)}
