"""The page's layout: the introduction, each panel in its place, the reference panel, and the queue.
Not the panels' own components and events: each panel's module lays out and wires its own.
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr
import pandas as pd
from gradio.blocks import Block

from page import words
from page.answer_panel import build_answer_panel, build_question_panel, first_example, wire_document_claims
from page.compare_panel import build_compare_panel
from page.context import DEFAULT_QUEUE_SIZE, AppContext, request_workers
from page.downloads import public_files
from page.hardening import harden
from page.model_panel import build_model_panel, show_loaded_after, wire_model_panel
from page.picks import auto_profile
from page.plan_panel import build_plan_panel
from page.training_panel import build_training_panel
from page.tables import ReadoutTable
from strategies.hardware import Hardware
from strategies.profiles import Profile, describe_profiles
from strategies.registry import strategy_cards

PAGE_DIR = Path(__file__).resolve().parent
CSS = (PAGE_DIR / "style.css").read_text(encoding="utf-8")  # the page's look: tables, buttons, notices on a phone
JS = (PAGE_DIR / "behaviour.js").read_text(encoding="utf-8")  # the answer scrolled into view, one notice at a time


def build_intro() -> dict[str, Block]:
    """What the page does, what the demo model answers (with one example to click) and what a profile is; the
    glossary of every term of art the page shows."""
    gr.Markdown(f"{words.TITLE}\n{words.INTRO}", elem_id="intro")
    with gr.Row():
        try_btn = gr.Button(words.TRY_LABEL.format(question=first_example()["question"]), size="md",
                            variant="secondary", elem_id="try-example", min_width=300)
        with gr.Column(min_width=300):
            with gr.Accordion("Glossary: the terms on this page", open=False, elem_id="glossary"):
                gr.Markdown(words.glossary_markdown())
    return {"try": try_btn}


def profiles_frame(hardware: Hardware, auto: Profile | None = None) -> pd.DataFrame:
    rows = [[row["name"], row["targets"], ", ".join(row["strategies_here"] or row["strategies"]) or "none",
             row["batch_size"], row["device"], "yes" if row["available"] else f"no: {row['reason']}"]
            for row in describe_profiles(hardware, auto)]
    return pd.DataFrame(rows, columns=["profile", "targets", "strategies", "batch size", "device", "runs here"])


def strategies_frame() -> pd.DataFrame:
    """The registry's cards as they come (name, order of composition, saves, costs, requires), one row each."""
    cards = strategy_cards()
    columns = [key for key in (cards[0] if cards else {}) if key != "description"]
    return pd.DataFrame([[card.get(key) for key in columns] for card in cards], columns=columns)


def build_reference_panel(ctx: AppContext) -> None:
    """What each profile and strategy is, and which profiles run on this machine."""
    with gr.Accordion("Profiles and strategies", open=False):
        profiles = profiles_frame(ctx.hardware, auto_profile(ctx))
        ReadoutTable(profiles, headers=list(profiles.columns), label="Profiles on this machine")
        strategies = strategies_frame()
        ReadoutTable(strategies, headers=list(strategies.columns), label="Strategies")


def build_blocks(ctx: AppContext, queue_size: int = DEFAULT_QUEUE_SIZE) -> gr.Blocks:
    """The page for `ctx`: the panels top to bottom, the queue set, hardened (`page.hardening`). Its stylesheet and
    script come with every launch (`page.hardening.harden`).

    The queue, on purpose: every event that waits for something shared runs in the requests group
    (`context.requests_group`, `request_workers` threads) and takes its place in the model lane first thing, which
    counts it in the visitor's share and refuses it at once past that share; the page's other queued events (what
    the page shows after an answer or a reload) are quick and run side by side, as many at once as the requests
    group. So events leave gradio's queue as fast as they come, and one visitor cannot fill it with events waiting
    for a one-at-a-time group. Its size, `queue_size`, is the lane's bound on the requests waiting too: a crowd
    of visitors meets "queue is full" in the lane's words or gradio's at the same count."""
    ctx.lane.max_waiting = queue_size  # the page's queue bound is the model lane's
    with gr.Blocks(title="Long-document QA with Longformer", analytics_enabled=False,
                   delete_cache=(3600, 3600)) as demo:  # what gradio itself writes; uploads are swept sooner
        intro = build_intro()
        seen = gr.State({})  # what this tab has seen loaded, to tell it when another visitor switched
        model = build_model_panel(ctx)
        question = build_question_panel(ctx)
        wire_document_claims(ctx, demo)
        reloads = wire_model_panel(ctx, demo, seen, model, question)
        history = build_answer_panel(ctx, question, seen, intro, reloads)
        compared = build_compare_panel(ctx, question, history, seen, model["load_status"])
        show_loaded_after(ctx, compared["event"], model, question)
        with gr.Accordion("Loaded model", open=True):
            model["load_table"].render()
            with gr.Accordion("Load readout (JSON)", open=False):
                model["load_json"].render()
        build_training_panel(ctx)
        build_plan_panel(ctx)
        build_reference_panel(ctx)
    # api_open=False: gradio's direct routes refuse the queued events, which run only through the queue (counted in
    # the visitor's share, abandoned when the client goes); the page's own quick unqueued events still use them.
    demo.queue(default_concurrency_limit=request_workers(ctx), max_size=queue_size, api_open=False)
    return harden(demo, ctx.uploads, ctx.visitor_header, css=CSS, js=JS, public=public_files(),
                  max_text_bytes=ctx.max_file_bytes)
