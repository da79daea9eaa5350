"""The page's run history and "Compare profiles" panel, with the tiny model: the button's handler fills the
comparison table and adds one run per profile to the history and the plots; a locked deployment refuses it with the
reason; the plots are coloured by profile."""

from __future__ import annotations

import contextlib
import re
import time
from types import SimpleNamespace

import gradio as gr
import pytest

from page.context import make_context
from page.layout import build_blocks
from page import asking
from page import compare_panel
from page import format as ui_format
from page import panel_format as panel_fmt
import longqa.session
from longqa.backend import Selection
from training.demo_task import make_example
from longqa.session import Session


def handler(demo, name):
    return next(fn.fn for fn in demo.fns.values() if fn.name == name)


def by_label(demo, shown: dict) -> dict:
    return {getattr(component, "label", None) or component.elem_id or type(component).__name__: value
            for component, value in shown.items()}


def compare(demo, profiles, history=(), strategies=(), pasted=None, question=None):
    example = make_example(5, 9_000)
    return handler(demo, "compare")([], pasted or example.text, question or example.question, 3, "full", "",
                                    list(profiles), list(strategies), list(history))


@pytest.mark.slow  # two loads and two reads of the tiny model, then one load back
def test_the_button_compares_the_profiles_and_adds_their_runs_to_the_history(ctx):
    demo = build_blocks(ctx)
    earlier = [{"run": 1, "profile": "cpu", "model": "m", "strategies": [], "question": "q", "documents": ["d"],
                "answer": "a", "reading": "full", "tokens": 1, "windows": 1, "request_peak_bytes": 1,
                "peak_allocated_bytes": None, "host_peak_rss_bytes": 2, "latency_s": 0.1, "tokens_per_s": 10.0}]
    shown = compare(demo, ["baseline-fp32", "custom"], earlier, strategies=["int8_dynamic"])
    values = {component: value for component, value in shown.items()}
    update = next(value for component, value in values.items() if getattr(component, "label", "") ==
                  "Profile comparison")
    table = update.set_index("measure")  # a row per measure, a column per profile
    assert table.columns.tolist() == ["baseline-fp32", "custom (int8_dynamic)"]
    assert table.index.tolist() == panel_fmt.COMPARE_MEASURES
    assert table.loc["time", "baseline-fp32"].endswith("(1.00×)")
    assert table.loc["same answer as the first", "baseline-fp32"] == "yes"
    comparison = next(value for component, value in values.items() if getattr(component, "label", "") ==
                      "Comparison (JSON)")
    assert [run["profile"] for run in comparison["runs"]] == ["baseline-fp32", "custom"]
    history = next(value for component, value in values.items() if isinstance(component, gr.State)
                   and isinstance(value, list))
    assert [h["run"] for h in history] == [1, 2, 3] and [h["profile"] for h in history[1:]] == ["baseline-fp32",
                                                                                                 "custom"]
    assert history[2]["strategies"] == ["int8_dynamic"] and history[1]["documents"] == ["pasted text"]
    rows = next(value for component, value in values.items() if getattr(component, "label", "") ==
                "Run history (this page)")
    assert rows["profile"].tolist() == ["cpu", "baseline-fp32", "custom (int8_dynamic)"]
    plot = next(value for component, value in values.items() if getattr(component, "label", "") ==
                "Peak memory by run")
    assert set(plot) == {"__type__", "value"} and plot["value"]["profile"].tolist() == ["cpu", "baseline-fp32",
                                                                                         "custom"]
    assert ctx.session.selection == Selection(ctx.session.model_ref, "cpu")  # the page's profile loaded back


@pytest.mark.slow  # a load and part of a read of the tiny model, then one load back
def test_the_pages_stop_ends_a_comparison_and_loads_back_the_profile_used_before(ctx, monkeypatch):
    """Stop, pressed in the visitor's tab while the first profile loads: the comparison ends with a message (not a
    cancelled event, so the page then shows what is loaded: tests/test_app_browser.py), the page's profile loaded
    back. A Stop pressed before the comparison began is not for it."""
    demo = build_blocks(ctx)
    tab = SimpleNamespace(session_hash="tab-1", headers={})
    asking.press_stop(ctx, tab)  # an earlier press
    load, loads = ctx.session.load, ctx.session.loads

    def load_then_stop(*args, **kwargs):
        loaded = load(*args, **kwargs)
        asking.press_stop(ctx, tab)
        return loaded

    monkeypatch.setattr(ctx.session, "load", load_then_stop)
    example = make_example(5, 9_000)
    with pytest.raises(gr.Error, match=re.escape(f"Comparison stopped: {ctx.session.model_ref} with profile cpu is loaded")):
        handler(demo, "compare")([], example.text, example.question, 3, "full", "", ["baseline-fp32", "custom"], [],
                                 [], request=tab)
    assert ctx.session.loads == loads + 2  # baseline-fp32, then the page's profile back: custom never loaded
    assert ctx.session.selection == Selection(ctx.session.model_ref, "cpu")


@pytest.mark.slow
def test_a_locked_deployment_refuses_to_compare_and_says_why(tiny_model_dir):
    ctx = make_context(Session(), models=[str(tiny_model_dir)], default_model=str(tiny_model_dir),
                       default_profile="cpu", lock_profile=True)
    asking.ensure_loaded(ctx)
    loads = ctx.session.loads
    demo = build_blocks(ctx)
    with pytest.raises(gr.Error, match="fixes the model and profile .* comparing profiles reloads the model"):
        compare(demo, ["cpu", "baseline-fp32"])
    assert ctx.session.loads == loads
    button = next(block for block in demo.blocks.values() if getattr(block, "value", None) == "Compare profiles")
    assert button.interactive is False


@pytest.mark.slow
def test_an_unrunnable_profile_or_none_is_refused_before_any_load(ctx):
    demo = build_blocks(ctx)
    loads = ctx.session.loads
    with pytest.raises(gr.Error, match="at least one"):
        compare(demo, [])
    with pytest.raises(gr.Error, match="GPU"):
        compare(demo, ["cpu", "t4-16gb"])
    assert ctx.session.loads == loads


@pytest.mark.slow
def test_a_comparison_reads_and_checks_its_request_as_an_answer_does(ctx, tmp_path):
    """The documents read by the page's own upload path, the settings cleaned by an answer's rules, under the same
    limits: each bad request is refused with the answer's own message, before anything loads."""
    good = {"files": [], "pasted": "The colour of Zorbin is teal. " * 20, "question": "What is the colour of Zorbin?",
            "top_k": 3, "reading": "full"}
    bad = {"a deleted upload": {"files": [str(tmp_path / "abc123" / "notes.txt")]},  # a page's path to a gone upload
           "top-k not a number": {"top_k": "three"}, "top-k not whole": {"top_k": "2.5"},
           "an unknown reading": {"reading": "sideways"}, "no question": {"question": "  "},
           "over the token limit": {}}
    demo = build_blocks(ctx)
    loads = ctx.session.loads
    for case, changed in bad.items():
        request = {**good, **changed}
        if case == "over the token limit":
            ctx.max_total_tokens = 50
        with pytest.raises(gr.Error) as answered:
            list(asking.ask(ctx, request["files"], request["pasted"], request["question"], request["top_k"],
                            request["reading"], []))
        with pytest.raises(gr.Error) as compared:
            handler(demo, "compare")(request["files"], request["pasted"], request["question"], request["top_k"],
                                     request["reading"], "", ["cpu", "baseline-fp32"], [], [])
        assert compared.value.message == answered.value.message, case
    assert ctx.session.loads == loads


@pytest.mark.slow
def test_a_visitor_past_its_share_is_refused_a_comparison_before_its_documents_are_read(ctx, monkeypatch):
    """A comparison takes its place at the lane's door, as an answer does: past the visitor's share it is refused
    before anything is read or loaded."""
    demo = build_blocks(ctx)
    reads, loads = [], ctx.session.loads
    read = longqa.session.read_documents

    def counted(*args, **kwargs):
        reads.append(args)
        return read(*args, **kwargs)

    monkeypatch.setattr(longqa.session, "read_documents", counted)
    tab = SimpleNamespace(session_hash="greedy", headers={})
    with contextlib.ExitStack() as inside:  # requests of this visitor being read elsewhere
        for _ in range(ctx.lane.per_visitor):
            inside.enter_context(ctx.lane.door(("session:greedy",)))
        with pytest.raises(gr.Error, match="You already have 3 requests being read: wait for them"):
            handler(demo, "compare")([], "The colour of Zorbin is teal.", "What is the colour of Zorbin?", 3, "full",
                                     "", ["cpu", "baseline-fp32"], [], [], request=tab)
    assert reads == [] and ctx.session.loads == loads
    assert ctx.lane.waiting() == 0 and not ctx.lane.is_busy()


@pytest.mark.slow
def test_the_panel_offers_the_profiles_this_machine_runs(ctx):
    demo = build_blocks(ctx)
    box = next(block for block in demo.blocks.values() if getattr(block, "label", None) == "Profiles to compare")
    offered = [value for _, value in box.choices]
    assert offered == compare_panel.comparable_profiles(ctx.hardware) and "t4-16gb" not in offered
    assert box.value == ["cpu", "baseline-fp32"]


@pytest.mark.slow
def test_the_plots_are_coloured_by_profile_with_a_colour_each():
    history = [{"profile": name} for name in ("cpu", "baseline-fp32", "cpu", "custom", "mine")]
    colours = ui_format.profile_colours(["auto", "cpu", "baseline-fp32", "custom"], history)
    assert list(colours) == ["cpu", "baseline-fp32", "custom", "mine"]
    assert len(set(colours.values())) == 4
    assert ui_format.profile_colours(["auto", "cpu"], [{"profile": "cpu"}])["cpu"] == colours["cpu"]
    demo = build_blocks(make_context(Session()))
    plots = [block for block in demo.blocks.values() if isinstance(block, gr.BarPlot)]
    assert len(plots) == 2 and all(plot.color == "profile" for plot in plots)


@pytest.mark.slow
def test_a_locked_deployment_compares_when_the_operator_allows_it(tiny_model_dir):
    ctx = make_context(Session(), models=[str(tiny_model_dir)], default_model=str(tiny_model_dir),
                       default_profile="cpu", lock_profile=True, allow_compare=True, max_compare_s=None)
    asking.ensure_loaded(ctx)
    demo = build_blocks(ctx)
    button = next(block for block in demo.blocks.values() if getattr(block, "value", None) == "Compare profiles")
    assert button.interactive is True
    shown = by_label(demo, compare(demo, ["cpu"], pasted="The colour of Zorbin is teal.",
                                   question="What is the colour of Zorbin?"))
    assert len(shown["Comparison (JSON)"]["runs"]) == 1
    assert ctx.session.profile_name == "cpu"


@pytest.mark.slow
def test_the_lane_takes_one_comparison_at_a_time_and_refuses_another_at_once(ctx):
    demo = build_blocks(ctx)
    loads = ctx.session.loads
    with ctx.lane.turn("another visitor", exclusive=True, only_one="comparison"):
        with pytest.raises(gr.Error, match="A comparison is already running or waiting"):
            compare(demo, ["cpu", "baseline-fp32"])
    assert ctx.session.loads == loads


def test_a_comparisons_reads_share_its_time_limit(ctx):
    settings = {"top_k": 3, "max_request_s": None}
    ctx.max_compare_s = 10.0
    assert compare_panel.compare_limits(ctx, settings, 4)["max_request_s"] == 2.5
    assert compare_panel.compare_limits(ctx, {**settings, "max_request_s": 1.0}, 4)["max_request_s"] == 1.0
    ctx.max_compare_s = None
    assert compare_panel.compare_limits(ctx, settings, 4) == settings


@pytest.mark.slow
def test_a_comparison_past_its_time_limit_ends_and_says_so(ctx, monkeypatch):
    demo = build_blocks(ctx)
    ctx.max_compare_s = 0.01
    monkeypatch.setattr(compare_panel, "GRACE_S", 0.0)
    real_load = ctx.session.load

    def slow_load(*args, **kwargs):  # the first load passes the limit; the step after it sees that
        time.sleep(0.05)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(ctx.session, "load", slow_load)
    with pytest.raises(gr.Error, match=r"passed this deployment's limit of 0.01 s .* cpu is loaded again"):
        compare(demo, ["baseline-fp32", "cpu"], pasted="The colour of Zorbin is teal.",
                question="What is the colour of Zorbin?")
    assert ctx.session.profile_name == "cpu"


@pytest.mark.slow
def test_starting_a_comparison_says_what_is_compared_and_disables_asking(ctx):
    shown = compare_panel.start_comparing(ctx, ["cpu", "baseline-fp32", "custom"], ["sdpa"])
    line = shown["load_status"]
    compared = ui_format.escape_markdown("cpu, baseline-fp32 and custom (sdpa)")
    assert line.startswith(f"**Comparing profiles {compared}**")
    assert ui_format.escape_markdown(asking.loaded_now(ctx)) in line
    assert shown["ask"]["interactive"] is False and shown["full"]["interactive"] is False
    assert "Comparing profiles cpu**" in compare_panel.start_comparing(ctx, ["cpu"], [])["load_status"]
