"""The page's handlers as plain functions, with the tiny model: answers, readouts, profile switches, refusals."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import threading
import time
from types import SimpleNamespace

import gradio as gr
import pytest

import app
from page import loading
from page.context import make_context
from page.layout import build_blocks
from page import answer_panel, asking, cli, context, picks, training_panel, zerogpu
from page import preview as previews
from page import format as ui_format
from longqa.backend import Selection
from training.demo_task import make_example
from longqa.models import DEFAULT_MODEL, DEMO_MODEL_DIR, KNOWN_MODELS, model_config
from longqa.serving import policy
from longqa.session import read_documents, sample_examples, SAMPLES_DIR, Session
from longqa_core.documents import Document
from strategies.auto import resolve_auto
from strategies.hardware import Gpu, Hardware
from strategies.profiles import profile_choices, PROFILES, select_strategies

READOUT_KEYS = {"question", "answers", "documents", "windows", "tokens", "batch_size", "backoffs", "latency_s",
                "memory", "notices", "tokens_per_s", "model", "profile", "window_tokens",
                "memory_prediction", "reading", "queue", "found", "no_answer",  # the last two: issue 38
                "strategies", "request_memory"}  # issue 39: custom's strategies, the request's own memory
ANSWER_KEYS = {"text", "score", "document", "document_index", "start_char", "end_char", "confidence",
               "location"}  # the last: issue 50
MEMORY_KEYS = {"peak_allocated_bytes", "reserved_bytes", "nvml_used_bytes", "nvml_total_bytes", "host_rss_bytes",
               "host_peak_rss_bytes", "devices", "host_baseline_rss_bytes", "host_request_peak_bytes"}
LATENCY_KEYS = {"total", "extract", "tokenize", "forward", "decode"}
T4 = Hardware(gpus=(Gpu(0, "Tesla T4", 15_600_000_000, (7, 5)),), cuda_available=True)
SMALL_CARD = Hardware(gpus=(Gpu(0, "Tesla T4", 500_000_000, (7, 5)),), cuda_available=True)


@pytest.fixture()
def broken_model_dir(tmp_path):
    folder = tmp_path / "not-a-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    return folder


def ask(ctx, files=(), pasted="", question="What is the colour of Zorbin?", top_k=3, history=None, seen=None,
        reading="auto", no_answer_below="") -> dict:
    *_, answered = asking.ask(ctx, [str(f) for f in files], pasted, question, top_k, reading, history or [], seen,
                              no_answer_below)  # a generator handler: its last update is the answer
    return answered


def component(demo, label: str):
    return next(block for block in demo.blocks.values() if getattr(block, "label", None) == label)


@pytest.mark.slow
def test_ask_answers_a_long_document_with_every_readout(ctx, long_document):
    path, example = long_document
    out = ask(ctx, [path], question=example.question)
    readout = out["readout"]
    assert set(readout) == READOUT_KEYS
    assert set(readout["latency_s"]) == LATENCY_KEYS and set(readout["memory"]) == MEMORY_KEYS
    assert all(set(a) == ANSWER_KEYS for a in readout["answers"])
    assert len(readout["answers"]) == 3 and readout["model"] == ctx.session.model_ref and readout["profile"] == "cpu"
    assert readout["tokens"] > 4096 and readout["windows"] >= 2 and readout["batch_size"] == 1
    assert readout["backoffs"] == 0 and readout["notices"] == []
    assert readout["latency_s"]["extract"] > 0
    assert readout["latency_s"]["total"] >= readout["latency_s"]["forward"] > 0
    assert readout["tokens_per_s"] == pytest.approx(readout["tokens"] / readout["latency_s"]["total"])
    assert readout["memory"]["host_peak_rss_bytes"] > 0 and readout["memory"]["devices"] == []

    # The same answers as the session gives directly: the page adds nothing and loses nothing.
    documents, _ = read_documents([str(path)])
    direct = ctx.session.ask(ctx.session.plan(documents, example.question, top_k=3)).result
    assert [(a["text"], a["score"]) for a in readout["answers"]] == [(a.text, a.score) for a in direct.answers]

    assert out["documents"].values.tolist() == [[path.name, len(example.text), readout["tokens"], readout["windows"]]]
    best = readout["answers"][0]
    assert out["answer"] == best["text"]
    assert out["answers"]["rank"].tolist() == [1, 2, 3]
    assert out["answers"]["answer"].tolist() == [a["text"] for a in readout["answers"]]
    highlighted = [span for span, label in out["evidence"] if label == "answer"]
    assert highlighted == [best["text"]]
    passage = "".join(span for span, _ in out["evidence"]).strip("…")
    assert passage in example.text
    assert out["latency"]["stage"].tolist() == ["extract", "tokenize", "rank", "forward", "decode", "mark", "total",
                                                "throughput"]
    host = readout["memory"]
    assert out["memory"].values.tolist()[-1] == ["host", ui_format.format_bytes(host["host_peak_rss_bytes"]),
                                                 ui_format.format_bytes(host["host_request_peak_bytes"]),
                                                 ui_format.format_bytes(host["host_rss_bytes"]), "—", "—"]
    assert host["host_request_peak_bytes"] == host["host_peak_rss_bytes"] - host["host_baseline_rss_bytes"]
    assert readout["request_memory"] == {"device": "cpu", "measured_as": "RSS",
                                         "peak_bytes": host["host_peak_rss_bytes"],
                                         "baseline_bytes": host["host_baseline_rss_bytes"],
                                         "request_peak_bytes": host["host_request_peak_bytes"]}
    assert readout["strategies"] == ctx.session.loaded.readout.strategies
    assert dict(out["run"].values.tolist())["windows read"] == readout["windows"]
    prediction = readout["memory_prediction"]
    assert prediction["measured_peak_bytes"] == readout["memory"]["host_peak_rss_bytes"]
    assert dict(out["run"].values.tolist())["memory: predicted vs measured"].startswith(
        f"predicted {ui_format.format_bytes(prediction['predicted_peak_bytes'])}, measured ")


@pytest.mark.slow
def test_run_history_grows_per_page_and_feeds_the_plots(ctx):
    first = ask(ctx, pasted=make_example(1, 1500).text)
    second = ask(ctx, pasted=make_example(2, 1500).text, history=first["history"])
    assert [h["run"] for h in second["history"]] == [1, 2]
    assert second["history"][1]["latency_s"] == second["readout"]["latency_s"]["total"]
    assert len(first["history"]) == 1, "the handler must not change the history it was given"
    for out in (first, second):
        runs = len(out["history"])
        assert out["history_table"].shape == (runs, len(ui_format.HISTORY_HEADERS))
        for plot in ("memory_plot", "latency_plot"):
            # the plot's whole data and, after the first, nothing else: an update that also changes a plot property
            # makes gradio 6.31 draw the data the plot held before (tests/test_app_browser.py counts the bars drawn);
            # the first data comes with the colours and the y axis's top, so the chart is drawn once, coloured
            extra = {"color_map", "y_lim"} if runs == 1 else set()
            assert set(out[plot]) == {"__type__", "value"} | extra and len(out[plot]["value"]) == runs
    assert first["latency_plot"]["y_lim"] == [0, ui_format.plot_top([first["readout"]["latency_s"]["total"]])]
    assert first["memory_plot"]["color_map"] == first["latency_plot"]["color_map"] == {"cpu": ui_format.PROFILE_COLOURS[list(PROFILES).index("cpu")]}
    assert second["memory_plot"]["value"]["run"].tolist() == ["01", "02"]
    assert second["memory_plot"]["value"]["profile"].tolist() == ["cpu", "cpu"]  # the bars' colour
    assert second["memory_plot"]["value"]["reading"].tolist() == ["full", "full"]  # short: auto reads whole
    memory = second["memory_plot"]["value"][ui_format.PLOT_MEMORY]
    assert memory.iloc[1] == second["readout"]["memory"]["host_peak_rss_bytes"] / 1e6
    assert second["latency_plot"]["value"][ui_format.PLOT_LATENCY].tolist() == [
        h["latency_s"] for h in second["history"]]


@pytest.mark.slow
def test_the_plots_start_without_data_and_their_axes_at_zero(ctx):
    demo = build_blocks(ctx)
    for label in ("Peak memory by run", "Latency by run"):
        plot = component(demo, label)
        assert plot.y_lim == [0, None] and plot.x == "run"
        assert plot.value is None  # no data until the first answer: then gradio 6.31 lays the chart out whole


@pytest.mark.parametrize("case, message", [
    ("no documents", "No document given"),
    ("empty question", "question is empty"),
    ("empty file", "is empty"),
    ("binary file", "binary file"),
    ("unsupported extension", "not supported"),
    ("file over the size limit", "file size limit"),
    ("text over the token limit", "over the limit"),
])
def test_bad_input_is_a_clear_error_and_the_next_request_works(ctx, tmp_path, case, message):
    documents, question = [], "What is the colour of Zorbin?"
    if case == "empty question":
        documents, question = [tmp_path / "ok.txt"], "   "
        documents[0].write_text("The colour of Zorbin is teal.")
    elif case == "empty file":
        documents = [tmp_path / "empty.txt"]
        documents[0].write_bytes(b"")
    elif case == "binary file":
        documents = [tmp_path / "image.txt"]
        documents[0].write_bytes(bytes(range(256)) * 20)
    elif case == "unsupported extension":
        documents = [tmp_path / "sheet.xlsx"]
        documents[0].write_bytes(b"PK\x03\x04")
    elif case == "file over the size limit":
        ctx.max_file_bytes = 1000
        documents = [tmp_path / "big.txt"]
        documents[0].write_text("The colour of Zorbin is teal. " * 100)
    elif case == "text over the token limit":
        ctx.max_total_tokens = 50
        documents = [tmp_path / "long.txt"]
        documents[0].write_text("The colour of Zorbin is teal. " * 30)
    with pytest.raises(gr.Error, match=message):
        ask(ctx, documents, question=question)
    ctx.max_file_bytes, ctx.max_total_tokens = 10**6, 10**6
    assert ask(ctx, pasted="The colour of Zorbin is teal.")["readout"]["answers"]


def test_an_upload_deleted_after_its_time_is_named_and_asked_for_again(ctx, tmp_path):
    gone = tmp_path / "abc123" / "notes.txt"  # the path a page still holds after the upload was deleted
    gone.parent.mkdir()
    gone.write_text("The colour of Zorbin is teal.")
    ctx.uploads.record([str(gone)])
    keep_s, ctx.uploads.keep_s = ctx.uploads.keep_s, 0
    assert ctx.uploads.sweep() and not gone.exists()
    ctx.uploads.keep_s = keep_s
    with pytest.raises(gr.Error, match=r"'notes\.txt' is no longer on this server: uploads are deleted 10 minutes "
                                       r"after they came, once no open page holds them .* Upload it again\."):
        ask(ctx, [gone])


def test_an_empty_file_among_good_ones_is_left_out_with_a_notice_and_the_preview_says_so_alike(ctx, tmp_path):
    good, empty = tmp_path / "good.txt", tmp_path / "empty.txt"
    good.write_text("The colour of Zorbin is teal.")
    empty.write_bytes(b"")
    out = ask(ctx, [empty, good])
    assert [d["name"] for d in out["readout"]["documents"]] == ["good.txt"] and out["readout"]["answers"]
    assert out["readout"]["notices"][0] == "Answered without 'empty.txt': 'empty.txt' is empty."
    preview = previews.preview_with_status(ctx, [str(empty), str(good)], "", "What is the colour of Zorbin?")
    assert preview["documents"].values.tolist()[1][:2] == ["empty.txt", ui_format.LEFT_OUT]
    assert preview["status"].startswith("### New documents\nPress Ask to answer from the others; left out: ")
    alone = previews.preview_with_status(ctx, [str(empty)], "", "")
    assert alone["status"].startswith("### No readable documents\n") and alone["documents"].empty  # no "error"


@pytest.mark.parametrize("pasted, question, field", [("Some text.", 42, "question"),
                                                     (["a", "b"], "What?", "pasted_text")])
def test_a_question_or_pasted_text_that_is_not_text_is_told_by_name(ctx, pasted, question, field):
    with pytest.raises(gr.Error, match=f"'{field}' must be text or null; this call sent"):
        ask(ctx, pasted=pasted, question=question)


def test_a_path_never_uploaded_is_not_called_deleted(ctx, tmp_path):
    with pytest.raises(gr.Error, match=r"'none\.txt' is not on this server: upload the file itself\."):
        ask(ctx, [tmp_path / "nope" / "none.txt"])


@pytest.mark.slow
def test_an_upload_past_its_time_is_kept_once_the_page_has_checked_it(ctx, tmp_path, monkeypatch):
    """The page holds an upload before it checks that it is still there: a sweep that comes between that check and
    the read (here: right after the check) finds it being read and keeps it."""
    upload = tmp_path / "abc123" / "notes.txt"
    upload.parent.mkdir()
    upload.write_text("The colour of Zorbin is teal.")
    ctx.uploads.record([str(upload)])
    ctx.uploads.keep_s = 0  # past its time: the next sweep deletes it unless it is being read
    checked = []

    exists = os.path.exists

    def exists_then_sweep(path) -> bool:
        there = exists(path)
        if str(path) == str(upload):
            checked.append(there)
            ctx.uploads.sweep()
        return there

    monkeypatch.setattr(os.path, "exists", exists_then_sweep)
    result = ask(ctx, [upload])
    assert checked == [True] and result["readout"]["documents"][0]["name"] == "notes.txt" and upload.exists()
    ctx.uploads.sweep()  # read: now it goes
    assert not upload.exists()


def test_a_visitor_past_its_share_is_refused_before_its_documents_are_read(ctx, monkeypatch):
    request = type("Request", (), {"session_hash": "greedy", "headers": {}})()
    reads = []
    monkeypatch.setattr(asking, "read_request", lambda *args, **kwargs: reads.append(args))
    inside = [ctx.lane.door(("session:greedy",)) for _ in range(ctx.lane.per_visitor)]
    for request_inside in inside:  # requests of this visitor being read elsewhere
        request_inside.__enter__()
    try:
        with pytest.raises(gr.Error, match="You already have 3 requests being read: wait for them"):
            list(asking.ask(ctx, [], "The colour of Zorbin is teal.", "What is the colour of Zorbin?", 3, "auto", [],
                            request=request, progress=lambda *a, **k: None))
        assert reads == []
    finally:
        for request_inside in inside:
            request_inside.__exit__(None, None, None)
    assert ctx.lane.waiting() == 0 and not ctx.lane.is_busy()


def test_error_messages_show_file_names_as_text_not_html(ctx, tmp_path):
    path = tmp_path / "<img src=x onerror=alert(1)>.xyz"
    path.write_text("hello")
    with pytest.raises(gr.Error) as raised:
        ask(ctx, [path])
    assert "<img" not in raised.value.message and "&lt;img src=x onerror=alert(1)&gt;.xyz" in raised.value.message


def test_a_long_question_is_cut_with_a_notice(ctx):
    out = ask(ctx, pasted="The colour of Zorbin is teal.", question="What is the colour of Zorbin? " * 40)
    assert any("cut to its first 64 tokens" in notice for notice in out["readout"]["notices"])
    assert "cut to its first" in dict(out["run"].values.tolist())["notices"]


@pytest.mark.slow
def test_control_and_zero_width_characters_are_dropped_from_documents_and_questions(ctx):
    clean_text, clean_question = "The colour of Zorbin is teal. " * 20, "What is the colour of Zorbin?"
    dirty_text = clean_text.replace("Zorbin", "Zor\u200bbin\x07").replace(". ", ".\u2060\x00 ")
    dirty_question = "\ufeffWhat is\x1b the col\u200cour of Zor\u200dbin?\x7f"
    clean = ask(ctx, pasted=clean_text, question=clean_question)["readout"]
    dirty = ask(ctx, pasted=dirty_text, question=dirty_question)["readout"]
    assert dirty["question"] == clean_question
    assert dirty["documents"] == clean["documents"]
    assert [(a["text"], a["start_char"], a["score"]) for a in dirty["answers"]] == \
        [(a["text"], a["start_char"], a["score"]) for a in clean["answers"]]
    with pytest.raises(gr.Error, match="question is empty"):  # nothing but invisible characters
        ask(ctx, pasted=clean_text, question="\u200b\ufeff\x00\x07\u2060")


@pytest.mark.slow
def test_load_profile_switches_and_returns_the_load_readout(ctx, tiny_model_dir):
    out = picks.load_profile(ctx, "baseline-fp32", str(tiny_model_dir))
    readout, table = out["load_json"], out["load_table"]
    assert readout["profile"] == "baseline-fp32" and readout["strategies"] == [] and readout["dtype"] == "float32"
    assert readout["weight_bytes_per_device"]["cpu"] > 0 and readout["load_time_s"] > 0
    assert table.shape == (1, len(ui_format.LOAD_HEADERS)) and table.iloc[0]["profile"] == "baseline-fp32"
    assert out["banner"]["visible"] is False and out["seen"]["profile"] == "baseline-fp32"
    assert ctx.session.profile_name == "baseline-fp32" and ctx.selection.profile == "baseline-fp32"
    assert ask(ctx, pasted="The colour of Zorbin is teal.")["readout"]["profile"] == "baseline-fp32"

    readout = picks.load_profile(ctx, "auto", str(tiny_model_dir))["load_json"]
    assert readout["profile"] == "cpu" and readout["strategies"] == list(select_strategies(
        ctx.session.runnable_profile("cpu"), ctx.hardware))
    assert ctx.selection.profile == "auto"
    # the loader got `auto` itself and picked by its own rule (the fastest that fits the model's config)
    assert ctx.session.selection == Selection(str(tiny_model_dir), "auto")
    assert ctx.session.auto_profile(str(tiny_model_dir)) is ctx.session.loaded.profile
    shown = picks.show_loaded(ctx)["profile"]
    assert shown["value"] == "auto" and dict((v, label) for label, v in shown["choices"])["auto"].endswith("→ cpu")


def test_an_unavailable_profile_is_refused_and_nothing_is_reloaded(ctx, tiny_model_dir):
    loaded = ctx.session.loaded
    with pytest.raises(gr.Error, match=r"'t4-16gb' cannot run on this machine: needs a CUDA GPU.*Still using"):
        picks.load_profile(ctx, "t4-16gb", str(tiny_model_dir))
    assert ctx.session.loaded is loaded and ctx.selection.profile == "cpu"
    shown = picks.show_loaded(ctx)  # the dropdowns go back to what is still loaded
    assert shown["profile"]["value"] == "cpu" and shown["model"]["value"] == str(tiny_model_dir)
    warned = []
    with pytest.MonkeyPatch.context() as patch:  # on the page: a refused pick, told as a warning, not an error
        patch.setattr(picks.gr, "Warning", warned.append)
        picks.load_profile(ctx, "t4-16gb", str(tiny_model_dir), request=SimpleNamespace(session_hash="tab-1",
                                                                                       headers={}))
    assert len(warned) == 1 and "cannot run on this machine" in warned[0] and ctx.session.loaded is loaded


def corrupt_weights_dir(tmp_path, tiny_model_dir):
    import shutil

    folder = shutil.copytree(tiny_model_dir, tmp_path / "corrupt-weights")
    (folder / "model.safetensors").write_bytes(b"\x00garbage" * 1000)
    return folder


@pytest.mark.parametrize("case, why", [
    ("unknown id", "neither a local folder nor a Hub id"),
    ("offline", r"Could not fetch 'valhalla/longformer-base-4096-finetuned-squadv1'.*HF_HUB_OFFLINE"),
    ("corrupt weights", "Could not load .*corrupt-weights"),
    ("not a QA model", "bert model; this demo needs a Longformer question-answering checkpoint"),
    ("a Longformer without a QA head", "not a question-answering checkpoint"),
])
@pytest.mark.slow
def test_a_failed_load_keeps_the_previous_model_and_says_why(tiny_model_dir, broken_model_dir, tmp_path,
                                                            monkeypatch, case, why):
    import huggingface_hub.constants

    from tests.tiny import tiny_encoder_checkpoint

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    model_ref = {"unknown id": "no-such-model", "offline": "valhalla/longformer-base-4096-finetuned-squadv1",
                 "corrupt weights": str(corrupt_weights_dir(tmp_path, tiny_model_dir)),
                 "not a QA model": str(broken_model_dir),
                 "a Longformer without a QA head": str(tiny_encoder_checkpoint())}[case]
    ctx = make_context(Session(), models=[str(tiny_model_dir), model_ref], default_model=str(tiny_model_dir),
                       default_profile="cpu")
    asking.ensure_loaded(ctx)
    loaded = ctx.session.loaded
    with pytest.raises(gr.Error, match=rf"{why}.*Still using .* with profile cpu"):
        picks.load_profile(ctx, "cpu", model_ref)
    assert ctx.session.model_ref == str(tiny_model_dir) and ctx.session.profile_name == "cpu"
    assert ctx.selection.model == str(tiny_model_dir)
    shown = picks.show_loaded(ctx)  # the dropdowns go back to what is still loaded
    assert (shown["profile"]["value"], shown["model"]["value"]) == ("cpu", str(tiny_model_dir))
    assert shown["load_json"]["model_ref"] == str(tiny_model_dir)
    out = ask(ctx, pasted="The colour of Zorbin is teal.")
    assert out["readout"]["model"] == str(tiny_model_dir) and out["readout"]["answers"]
    assert ctx.session.loaded.readout.strategies == loaded.readout.strategies


@pytest.mark.parametrize("cpu_bf16", [pytest.param(True, marks=pytest.mark.requires_cpu_bf16), False],
                         ids=["cpu-with-bf16", "cpu-without-bf16"])
@pytest.mark.slow
def test_a_load_that_fails_half_way_leaves_nothing_half_loaded(tiny_model_dir, monkeypatch, cpu_bf16):
    """On both CPU kinds (`cpu` is bf16 + fast attention with bf16, int8 + fast attention without)."""
    from strategies.gradient_checkpointing import GradientCheckpointing

    ctx = make_context(Session(), models=[str(tiny_model_dir)], default_model=str(tiny_model_dir),
                       default_profile="cpu", hardware=Hardware(cpu_bf16=cpu_bf16))
    asking.ensure_loaded(ctx)
    before = ask(ctx, pasted="The colour of Zorbin is teal.")["readout"]["answers"]
    strategies = ctx.session.loaded.readout.strategies
    assert ("int8_dynamic" in strategies) is not cpu_bf16
    module_types = {type(m) for m in ctx.session.loaded.model.modules()}

    def fail(self, model):
        raise RuntimeError("simulated failure after the weights were read")

    monkeypatch.setattr(GradientCheckpointing, "transform", fail)
    with pytest.raises(gr.Error, match=r"simulated failure.*Still using .* with profile cpu"):
        picks.load_profile(ctx, "custom", str(tiny_model_dir), ["gradient_checkpointing"])
    loaded = ctx.session.loaded
    assert loaded.profile.name == "cpu" and loaded.readout.strategies == strategies
    assert {type(m) for m in loaded.model.modules()} == module_types  # the cpu profile's model, whole
    assert ctx.selection.profile == "cpu"
    assert ask(ctx, pasted="The colour of Zorbin is teal.")["readout"]["answers"] == before


@pytest.mark.slow
@pytest.mark.parametrize("model_ref", ["/etc", "someone/any-model", "../longqa/demo_model", "arch:large"])
def test_only_listed_models_can_be_loaded_from_the_page(ctx, model_ref):
    loaded = ctx.session.loaded
    with pytest.raises(gr.Error, match="can only load the listed models"):
        picks.load_profile(ctx, "cpu", model_ref)
    assert ctx.session.loaded is loaded


def test_the_registry_and_the_command_line_model_are_listed():
    ctx = make_context(Session(), default_model="/srv/models/mine")
    assert ctx.models == [*KNOWN_MODELS, "/srv/models/mine"]
    assert dict((value, label) for label, value in picks.model_choices(ctx))["/srv/models/mine"] == "mine"
    assert picks.model_info("/srv/models/mine").startswith("/srv/models/mine: given with --model")


@pytest.mark.slow
def test_custom_profile_applies_the_ticked_strategies_and_refuses_conflicts(ctx, tiny_model_dir):
    readout = picks.load_profile(ctx, "custom", str(tiny_model_dir), ["int8_dynamic"])["load_json"]
    assert readout["profile"] == "custom" and readout["strategies"] == ["int8_dynamic"]
    assert "int8" in readout["dtype"]
    readout = picks.load_profile(ctx, "custom", str(tiny_model_dir), [])["load_json"]
    assert readout["strategies"] == [] and readout["dtype"] == "float32"
    with pytest.raises(gr.Error, match="'half_precision' and 'autocast' conflict"):
        picks.load_profile(ctx, "custom", str(tiny_model_dir), ["half_precision", "autocast"])
    assert ctx.session.loaded.readout.strategies == []


def test_custom_controls_show_only_for_the_custom_profile():
    shown = picks.show_custom_controls("custom")
    hidden = picks.show_custom_controls("cpu")
    assert {name: u["visible"] for name, u in shown.items()} == {"strategies": True, "apply": True}
    assert {name: u["visible"] for name, u in hidden.items()} == {"strategies": False, "apply": False}


@pytest.mark.slow
def test_a_page_follows_a_reload_it_did_not_show_yet_with_the_custom_strategies_folded(ctx):
    shown = picks.on_page_load(ctx)["shown"]
    assert all(value is gr.skip() or value == gr.skip() for value in picks.follow_loaded(ctx, shown).values())
    # another visitor's reload
    loading.load_selection(ctx, Selection.of(ctx.session.model_ref, "custom", ["dynamic_batching"]))
    followed = picks.follow_loaded(ctx, shown)
    assert followed["shown"] == ctx.session.generation != shown
    assert followed["profile"]["value"] == "custom" and followed["strategies"]["value"] == ["dynamic_batching"]
    assert followed["strategies"]["visible"] is False and followed["apply"]["visible"] is False
    assert "profile **custom**" in followed["load_status"]
    assert picks.follow_loaded(ctx, followed["shown"])["profile"] == gr.skip()  # shown: nothing more to do
    with ctx.lane.turn(("session:other",), exclusive=True):  # a reload or a comparison holds the model
        assert picks.follow_loaded(ctx, shown)["profile"] == gr.skip()


@pytest.mark.slow
@pytest.mark.skipif(not any(DEMO_MODEL_DIR.glob("*.safetensors")), reason="the demo model has no weights yet")
def test_offline_the_default_model_falls_back_to_the_demo_model_and_the_page_says_so(monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    ctx = make_context(Session(), models=[DEFAULT_MODEL], default_model=DEFAULT_MODEL, default_profile="cpu")
    shown = picks.on_page_load(ctx)
    assert ctx.session.model_ref == "demo" and ctx.session.loaded.readout.fallback_reason
    assert shown["model"]["value"] == "demo", "the Model dropdown shows the model that is loaded"
    assert "demo" in [value for _, value in picks.model_choices(ctx)]
    assert shown["profile"]["value"] == "cpu" and shown["load_json"]["model_ref"] == "demo"
    assert shown["banner"]["visible"] is True and "Running on the bundled demo model" in shown["banner"]["value"]
    assert f"not {DEFAULT_MODEL}:" in shown["banner"]["value"]  # the model asked for
    assert "Could not fetch" in shown["banner"]["value"]
    assert picks.show_loaded(ctx)["model"]["value"] == "demo"


@pytest.mark.slow
@pytest.mark.skipif(not any(DEMO_MODEL_DIR.glob("*.safetensors")), reason="the demo model has no weights yet")
def test_offline_the_demo_notice_stays_after_a_visitor_reloads_a_profile(monkeypatch):
    """Issue 49.3: a reload loads "demo" by name (the dropdown shows it), which falls back from nothing; the demo
    model still stands in for the page's model, so every fresh page still says so."""
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    ctx = make_context(Session(), models=[DEFAULT_MODEL], default_model=DEFAULT_MODEL, default_profile="cpu")
    picks.on_page_load(ctx)
    picks.load_profile(ctx, "baseline-fp32", "demo")
    assert ctx.session.loaded.readout.fallback_reason is None and ctx.session.profile_name == "baseline-fp32"
    shown = picks.on_page_load(ctx)  # a fresh page
    assert shown["banner"]["visible"] is True and "Running on the bundled demo model" in shown["banner"]["value"]
    assert f"not {DEFAULT_MODEL}:" in shown["banner"]["value"]
    assert "downloads are off" in shown["banner"]["value"]
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # online, demo picked by name: no notice
    assert picks.on_page_load(ctx)["banner"]["visible"] is False


def test_page_load_without_a_loadable_model_shows_why_and_keeps_the_page(broken_model_dir):
    ctx = make_context(Session(), models=[str(broken_model_dir)], default_model=str(broken_model_dir),
                       default_profile="cpu")
    shown = picks.on_page_load(ctx)
    assert shown["banner"]["visible"] is True and "No model is loaded" in shown["banner"]["value"]
    assert shown["profile"]["value"] == "cpu" and shown["load_json"] == {} and shown["load_table"].empty
    assert shown["model"]["value"] == str(broken_model_dir)
    with pytest.raises(gr.Error, match="bert model"):
        ask(ctx, pasted="The colour of Zorbin is teal.")


@pytest.mark.slow
def test_a_preview_does_not_wait_for_the_model(ctx, long_document):
    """An answer is in flight (held after its first batch, the model's turn taken); a preview still comes at once."""
    path, example = long_document
    held, release = threading.Event(), threading.Event()
    documents = [Document("long.txt", path.read_text())]

    def hold(state):
        held.set()
        release.wait(30)

    plan = ctx.session.plan(documents, example.question, "full")
    thread = threading.Thread(target=lambda: ctx.session.ask(plan, on_window_progress=hold))
    thread.start()
    try:
        assert held.wait(30)
        began = time.monotonic()
        preview = previews.preview_documents(ctx, [str(path)], "", example.question)
        assert time.monotonic() - began < 10 and not release.is_set()
        assert preview.values.tolist()[0][2] > 4096
    finally:
        release.set()
        thread.join()


@pytest.mark.slow
def test_preview_shows_characters_tokens_and_windows_before_asking(ctx, long_document):
    path, example = long_document
    preview = previews.preview_documents(ctx, [str(path)], "The colour of Zorbin is teal.", example.question)
    asked = ask(ctx, [path], pasted="The colour of Zorbin is teal.", question=example.question)
    assert preview.values.tolist() == asked["documents"].values.tolist()
    assert preview.values.tolist()[1][0] == "pasted text"
    assert previews.preview_documents(ctx, None, "  ", "").empty


@pytest.mark.slow
def test_training_step_accordion_shows_both_peaks_and_times(ctx):
    out = training_panel.run_training_step(ctx, 256)
    table, summary = out["table"], out["summary"]
    rows = table.values.tolist()
    assert [r[0] for r in rows] == ["without checkpointing", "with checkpointing"]
    assert all(r[1] != "—" and r[2] != "—" for r in rows)
    assert "256-token window" in summary and "saves nothing at inference" in summary


@pytest.mark.slow
def test_dropdowns_come_from_the_registries(ctx):
    demo = build_blocks(ctx)
    by_label = {getattr(block, "label", None): block for block in demo.blocks.values()}
    choices = by_label["Hardware profile"].choices
    auto = ctx.session.auto_profile(ctx.selection.model)
    assert choices == [tuple(choice) for choice in profile_choices(ctx.hardware, auto)]
    labels = dict((value, label) for label, value in choices)
    assert labels["auto"] == "auto: no GPU → cpu"
    assert "unavailable: needs a CUDA GPU" in labels["t4-16gb"]
    assert [value for _, value in by_label["Model"].choices] == ctx.models
    assert by_label["Live GPU memory (NVML)"].visible is False  # no GPU here: the gauge is hidden


@pytest.mark.slow
@pytest.mark.parametrize("model_ref", [DEFAULT_MODEL, "demo"])
def test_the_auto_label_names_what_the_loader_picks_for_the_model(tiny_model_dir, model_ref):
    """On a 0.5 GB card the GPU's size alone calls for consumer-gpu; the loader picks the card's profile only where
    the model fits it."""
    ctx = make_context(Session(), models=[str(tiny_model_dir), model_ref], default_model=model_ref,
                       hardware=SMALL_CARD)
    loaders_pick = resolve_auto(SMALL_CARD, model_config(model_ref))
    assert loaders_pick.name != resolve_auto(SMALL_CARD).name  # the two rules differ here: the label tells them apart
    demo = build_blocks(ctx)
    labels = dict((value, label) for label, value in component(demo, "Hardware profile").choices)
    assert labels["auto"] == f"auto: 1× Tesla T4, 0.5 GB → {loaders_pick.name}"
    assert component(demo, "Profiles on this machine").value["data"][0][2] == ", ".join(
        select_strategies(loaders_pick, T4))


@pytest.mark.slow
def test_named_endpoints_and_queue_bounds(ctx):
    demo = build_blocks(ctx, queue_size=7)
    by_name = {fn.api_name: fn for fn in demo.fns.values() if fn.api_visibility == "public"}
    assert set(by_name) == {"ask", "load_profile", "training_step", "plan", "compare",  # plan_panel, compare_panel
                            "answer_page"}  # the answer's PDF page, marked (page_view)
    # every event that waits for something shared runs in the requests group and takes its place in the lane: none
    # waits in gradio's queue behind a one-at-a-time group (issue 48)
    visit = next(fn for fn in demo.fns.values() if fn.targets and fn.targets[0][1] == "load")
    for fn in [*by_name.values(), visit]:
        assert fn.concurrency_id == context.REQUEST_CONCURRENCY, fn.api_name
        assert fn.concurrency_limit == context.request_workers(ctx), fn.api_name
    assert all(fn.concurrency_limit != 1 for fn in demo.fns.values())
    assert demo._queue.max_size == 7 and demo._queue.default_concurrency_limit == context.request_workers(ctx)
    assert ctx.lane.max_waiting == 7
    assert by_name["ask"].outputs[-1].label == "Full readout (JSON)"
    assert by_name["load_profile"].outputs[-1].label == "Load readout (JSON)"


def test_gpu_functions_are_plain_functions_without_the_spaces_package(monkeypatch):
    def handler():
        return 1

    monkeypatch.setattr(zerogpu, "spaces", None)
    assert zerogpu.gpu_function(duration=60)(handler) is handler


@pytest.mark.slow
def test_a_locked_deployment_refuses_training_steps_unless_the_operator_allows_them(tiny_model_dir):
    ctx = make_context(Session(), models=[str(tiny_model_dir)], default_model=str(tiny_model_dir),
                       default_profile="cpu", lock_profile=True)
    asking.ensure_loaded(ctx)
    with pytest.raises(gr.Error, match="training-step readout holds the model alone, so it is turned off here"):
        training_panel.run_training_step(ctx, 128)
    ctx.allow_training = True
    assert "checkpointing" in training_panel.run_training_step(ctx, 128)["summary"]
    args = cli.build_parser().parse_args(["--lock-profile", "--allow-training", "--allow-compare"])
    allowed = cli.context_from(args, Session())
    assert allowed.allow_training and allowed.allow_compare and allowed.max_compare_s == context.DEFAULT_MAX_COMPARE_S


@pytest.mark.slow
def test_a_repeated_reload_of_what_is_loaded_takes_no_turn_and_loads_nothing(ctx, tiny_model_dir):
    loads = ctx.session.loads
    with ctx.lane.door("someone"):  # a reload would wait for it: this one does not
        picks.load_profile(ctx, "cpu", str(tiny_model_dir))
        # the strategies ticked count for `custom` only: with another profile they ask for nothing else
        picks.load_profile(ctx, "cpu", str(tiny_model_dir), ["half_precision"])
    assert ctx.session.loads == loads
    assert ctx.selection == Selection(str(tiny_model_dir), "cpu") == Selection.of(str(tiny_model_dir), "cpu", ["x"])
    assert Selection.of("m", "custom", ["half_precision"]).strategies == ("half_precision",)


@pytest.mark.slow
def test_a_locked_deployment_refuses_switches_from_the_page_and_the_api(tiny_model_dir):
    ctx = make_context(Session(), models=[str(tiny_model_dir)], default_model=str(tiny_model_dir),
                       default_profile="cpu", lock_profile=True)
    asking.ensure_loaded(ctx)
    loaded = ctx.session.loaded
    with pytest.raises(gr.Error, match=r"fixes the model and profile: it runs \S+ with profile cpu, and they cannot"):
        picks.load_profile(ctx, "baseline-fp32", str(tiny_model_dir))
    assert ctx.session.loaded is loaded and ctx.session.profile_name == "cpu"
    demo = build_blocks(ctx)
    dropdowns = [block for block in demo.blocks.values() if getattr(block, "label", None) in ("Hardware profile",
                                                                                               "Model")]
    assert len(dropdowns) == 2 and all(block.interactive is False for block in dropdowns)


@pytest.mark.slow
def test_a_visitor_is_told_when_someone_else_switched_the_profile(ctx, tiny_model_dir):
    mine = ask(ctx, pasted="The colour of Zorbin is teal.")
    assert not any("another visitor" in n for n in mine["readout"]["notices"])
    theirs_seen = ask(ctx, pasted="The colour of Zorbin is teal.")["seen"]
    picks.load_profile(ctx, "baseline-fp32", str(tiny_model_dir), seen=theirs_seen)  # another tab switches
    again = ask(ctx, pasted="The colour of Zorbin is teal.", seen=mine["seen"])
    notice = again["readout"]["notices"][0]
    assert "changed by another visitor" in notice and "baseline-fp32" in notice and "was " in notice
    after = ask(ctx, pasted="The colour of Zorbin is teal.", seen=again["seen"])
    assert not any("another visitor" in n for n in after["readout"]["notices"])  # told once
    seen = picks.load_profile(ctx, "cpu", str(tiny_model_dir), seen=after["seen"])["seen"]  # my own switch
    mine_again = ask(ctx, pasted="The colour of Zorbin is teal.", seen=seen)
    assert not any("another visitor" in n for n in mine_again["readout"]["notices"])


@pytest.mark.slow
def test_a_reload_that_lands_after_the_answers_turn_is_not_said_of_that_answer(ctx, monkeypatch):
    """The notice and the `seen` it hands back name what the answer ran on, as its turn began: a reload landing
    between the answer and its outputs is told with the next answer, not this one."""
    seen = ask(ctx, pasted="The colour of Zorbin is teal.")["seen"]
    steps = ctx.session.ask_steps

    def then_reloaded(*args, **kwargs):  # another tab's reload, just after this answer's turn
        readout = yield from steps(*args, **kwargs)
        monkeypatch.setattr(ctx.session.loaded, "generation", ctx.session.loaded.generation + 1)
        return readout

    monkeypatch.setattr(ctx.session, "ask_steps", then_reloaded)
    out = ask(ctx, pasted="The colour of Zorbin is teal.", seen=seen)
    assert not any("another visitor" in notice for notice in out["readout"]["notices"])
    assert out["seen"]["generation"] == seen["generation"] != ctx.session.generation  # told at the next answer
    monkeypatch.setattr(ctx.session, "ask_steps", steps)
    later = ask(ctx, pasted="The colour of Zorbin is teal.", seen=out["seen"])
    assert any("changed by another visitor" in notice for notice in later["readout"]["notices"])


@pytest.mark.slow
@pytest.mark.parametrize("top_k", [2.7, "three", "2.5", -0.5])  # "3" is read as 3 (issue 40)
def test_a_top_k_that_is_not_a_whole_number_is_refused(ctx, top_k):
    with pytest.raises(gr.Error, match="Top-k must be a whole number"):
        ask(ctx, pasted="The colour of Zorbin is teal.", top_k=top_k)
    assert len(ask(ctx, pasted="The colour of Zorbin is teal.", top_k=2.0)["readout"]["answers"]) <= 2


@pytest.mark.slow
def test_gpu_duration_grows_with_the_request(ctx):
    short = ctx.session.plan([Document("a.txt", "word " * 1_000)], "q?", "full")
    long = ctx.session.plan([Document("b.txt", "word " * 200_000)], "q?", "full")
    assert zerogpu.answer_duration(ctx.key, short) < zerogpu.answer_duration(ctx.key, long)
    assert zerogpu.answer_duration(ctx.key, dataclasses.replace(long, window_tokens=10**9)) == policy.GPU_DURATION_MAX_S
    before = zerogpu.answer_duration(ctx.key, long)
    ctx.session.loaded.batch_state.record_forward(10**8, 1.0, windows=10**4)  # a faster model asks for less
    assert zerogpu.answer_duration(ctx.key, long) < before
    assert zerogpu.answer_duration(ctx.key, long) == pytest.approx(
        policy.GPU_DURATION_BASE_S + long.window_tokens / ctx.measured().tokens_per_s)


@pytest.mark.slow
def test_gpu_duration_follows_what_the_ranking_will_read(ctx):
    filler = "The committee talked about the weather, the roads and the price of bread once more. " * 3_000
    text = filler + "The tide of Harrowgate is 4102. " + filler
    documents = [Document("long.txt", text)]
    plan = ctx.session.plan(documents, "What is the tide of Harrowgate?", "guided")
    assert plan.mode == "guided" and 0 < plan.expected_chars < len(text) / 3
    full = ctx.session.plan(documents, "What is the tide of Harrowgate?", "full")
    assert full.mode == "full" and full.expected_chars == len(text)
    assert full.expected_windows > plan.expected_windows > 0
    guided_s = zerogpu.answer_duration(ctx.key, plan)
    assert policy.GPU_DURATION_BASE_S < guided_s < zerogpu.answer_duration(ctx.key, full)


@pytest.mark.slow
@pytest.mark.parametrize("reading", ["skim", 3])
def test_an_unknown_reading_mode_is_refused_before_any_work(ctx, reading):
    with pytest.raises(gr.Error, match="reading mode must be one of auto, full, guided"):
        ask(ctx, pasted="The colour of Zorbin is teal.", reading=reading)
    assert ask(ctx, pasted="The colour of Zorbin is teal.", reading="")["readout"]["reading"]["requested"] == "auto"


def test_command_line_defaults_and_limits(monkeypatch):
    monkeypatch.delenv("GRADIO_SERVER_NAME", raising=False)
    monkeypatch.delenv("GRADIO_SERVER_PORT", raising=False)
    args = cli.build_parser().parse_args([])
    assert (args.model, args.profile, args.host, args.port, args.share, args.max_file_mb) == (
        "allenai/longformer-large-4096-finetuned-triviaqa", "auto", "127.0.0.1", 7860, False, 50.0)
    assert args.queue_size == context.DEFAULT_QUEUE_SIZE
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["--profile", "no-such-profile"])
    monkeypatch.setenv("GRADIO_SERVER_NAME", "0.0.0.0")  # as on Hugging Face Spaces
    assert cli.build_parser().parse_args([]).host == "0.0.0.0"


def test_the_profile_is_locked_by_default_on_a_space_only(monkeypatch):
    monkeypatch.delenv("LONGQA_LOCK_PROFILE", raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)
    assert cli.build_parser().parse_args([]).lock_profile is False
    assert cli.build_parser().parse_args(["--lock-profile"]).lock_profile is True
    monkeypatch.setenv("SPACE_ID", "someone/longqa")  # Spaces set it
    assert cli.build_parser().parse_args([]).lock_profile is True
    assert cli.build_parser().parse_args(["--no-lock-profile"]).lock_profile is False
    monkeypatch.setenv("LONGQA_LOCK_PROFILE", "0")  # the Space's owner chose a switchable demo
    assert cli.build_parser().parse_args([]).lock_profile is False


@pytest.mark.slow
def test_serve_with_share_offline_warns_and_keeps_serving_locally(ctx, capsys):
    import urllib.request

    demo = build_blocks(ctx)
    try:
        local_url, share_url = cli.serve(demo, host="127.0.0.1", port=7871, share=True, block=False)
        assert share_url is None
        assert urllib.request.urlopen(local_url, timeout=30).status == 200
        assert demo.max_file_size == 50 * 1024 * 1024  # gradio refuses bigger uploads before saving them
    finally:
        demo.close()
    printed = capsys.readouterr().out
    assert "PUBLIC link" in printed and "serving locally only" in printed


@pytest.mark.slow
def test_serve_says_where_it_serves_in_one_line_and_nothing_of_gradio_s_own(ctx, capfd):
    demo = build_blocks(ctx)
    try:
        local_url, _ = cli.serve(demo, host="127.0.0.1", port=7872, block=False)
        printed = capfd.readouterr()  # before close(), which says it closes
    finally:
        demo.close()
    lines = [line for line in (printed.out + printed.err).splitlines() if line.strip()]
    assert lines == [f"Serving the page at {local_url}"], lines  # not gradio's "To create a public link ..."


def test_examples_point_at_bundled_samples_with_the_stated_facts():
    rows = answer_panel.example_rows()
    assert rows, "scripts/make_samples.py writes longqa/samples/examples.json"
    for example in sample_examples():
        text = (SAMPLES_DIR / example["file"]).read_text(encoding="utf-8")
        assert 5_000 <= len(text) <= 60_000
        attribute_entity = example["question"].removeprefix("What is the ").removesuffix("?")
        attribute, entity = attribute_entity.split(" of ", 1)
        assert f"The {attribute} of {entity} is {example['answer']}." in text


@pytest.mark.slow
@pytest.mark.skipif(not any(DEMO_MODEL_DIR.glob("*.safetensors")), reason="the demo model has no weights yet")
def test_examples_are_answered_by_the_bundled_demo_model():
    ctx = make_context(Session(), models=["demo"], default_model="demo", default_profile="baseline-fp32")
    for files, pasted, question, top_k in answer_panel.example_rows():
        out = ask(ctx, files, pasted, question, top_k)
        expected = next(e["answer"] for e in sample_examples() if e["question"] == question)
        assert out["answer"] == expected, question


@pytest.mark.slow
def test_out_of_memory_is_a_clear_error_naming_profiles_and_the_next_request_works(ctx, monkeypatch):
    import torch

    runner = ctx.session.loaded.runner

    class OutOfMemoryOnce:
        devices = runner.devices
        calls = 0

        def __call__(self, batch):
            self.calls += 1
            if self.calls == 1:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            return runner(batch)

    monkeypatch.setattr(ctx.session.loaded, "runner", OutOfMemoryOnce())
    with pytest.raises(gr.Error, match=r"Out of memory at batch size 1.*consumer-gpu"):
        ask(ctx, pasted="The colour of Zorbin is teal.")
    assert ask(ctx, pasted="The colour of Zorbin is teal.")["readout"]["answers"]


@pytest.mark.slow
def test_the_gpu_gauge_shows_where_a_gpu_is_detected(tiny_model_dir, monkeypatch):
    ctx = make_context(Session(), models=[str(tiny_model_dir)], default_model=str(tiny_model_dir),
                       default_profile="cpu", hardware=T4)
    demo = build_blocks(ctx)
    blocks = list(demo.blocks.values())
    assert next(b for b in blocks if getattr(b, "label", None) == "Live GPU memory (NVML)").visible is True
    timer = next(b for b in blocks if isinstance(b, gr.Timer) and b.value == answer_panel.GPU_REFRESH_S)
    assert timer.active is True
    monkeypatch.setattr(answer_panel, "gpu_snapshot", lambda: [
        {"index": 0, "name": "Tesla T4", "nvml_used_bytes": 3_900_000_000, "nvml_total_bytes": 15_600_000_000}])
    assert answer_panel.refresh_gpu_gauge() == {"GPU 0 Tesla T4: 3.9 GB / 15.6 GB": 0.25}


def test_importing_the_app_loads_no_model():
    handlers = [fn.fn for fn in app.demo.fns.values() if fn.fn is not None and inspect.unwrap(fn.fn) is asking.ask]
    assert handlers and app.context.session.loaded is None and not zerogpu.ZERO_GPU


@pytest.mark.slow
def test_main_loads_then_serves_with_the_command_line_limits(tiny_model_dir, monkeypatch, capsys):
    served, built = {}, []
    monkeypatch.setattr(cli, "serve", lambda demo, **kwargs: served.update(kwargs, demo=demo))
    for name in ("make_context", "build_blocks"):  # `python app.py` builds one context and one page
        real = getattr(cli, name)
        monkeypatch.setattr(cli, name, lambda *a, _real=real, _name=name, **k: built.append(_name) or _real(*a, **k))
    assert cli.main(["--model", str(tiny_model_dir), "--profile", "cpu", "--port", "7999", "--max-file-mb", "2",
                     "--queue-size", "5"]) == 0
    assert built == ["make_context", "build_blocks"]
    assert served["port"] == 7999 and served["max_file_mb"] == 2.0 and served["share"] is False
    assert served["demo"]._queue.max_size == 5
    assert f"Loaded {tiny_model_dir} (cpu)" in capsys.readouterr().out


@pytest.mark.slow
def test_main_refuses_a_profile_this_machine_cannot_run(monkeypatch, capsys):
    monkeypatch.setattr(cli, "serve", lambda demo, **kwargs: pytest.fail("must not serve"))
    assert cli.main(["--model", "demo", "--profile", "t4-16gb"]) == 2
    assert "cannot run on this machine: needs a CUDA GPU" in capsys.readouterr().err


@pytest.mark.requires_cuda
def test_on_a_gpu_the_memory_readout_and_the_gauge_show_the_device(tiny_model_dir):
    ctx = make_context(Session(), models=[str(tiny_model_dir)], default_model=str(tiny_model_dir),
                       default_profile="baseline-fp32")  # device "best": the GPU
    out = ask(ctx, pasted=make_example(3, 3000).text)
    devices = out["readout"]["memory"]["devices"]
    assert devices and devices[0]["peak_allocated_bytes"] > 0 and devices[0]["reserved_bytes"] > 0
    assert out["memory"].values.tolist()[0][0].startswith("cuda:0")
    gauge = answer_panel.refresh_gpu_gauge()
    assert gauge and all(0 < fraction <= 1 for fraction in gauge.values())


@pytest.mark.slow
def test_the_page_keeps_each_visitors_ranking_index_apart(ctx):
    """Issue 48 item 5: a visitor asking about the same text as another builds its own index (its readout's cost is
    its own), and reuses it for its next question."""
    text = "The colour of Zorbin is teal. " + "The boats stayed in that morning. " * 200

    def ask_as(session_hash: str) -> None:
        request = type("Request", (), {"session_hash": session_hash, "headers": {}})()
        list(asking.ask(ctx, [], text, "What is the colour of Zorbin?", 3, "guided", [], request=request,
                        progress=lambda *a, **k: None))

    ask_as("first")
    assert ctx.session.index_cache.builds == 1
    ask_as("second")
    assert ctx.session.index_cache.builds == 2 and len(ctx.session.index_cache) == 2
    ask_as("first")
    assert ctx.session.index_cache.builds == 2


@pytest.mark.slow
def test_an_operator_can_size_guided_windows_to_the_ranked_passage(ctx):
    """`python app.py --passage-window-tokens N` (issue 50 item 4): the page's guided reads read each ranked window
    first sized to its passage; without it, as the loaded model's default says (issue 60: 1,024 tokens, where the
    windows are longer, as this model's are); with 0, whole windows."""
    examples = [make_example(seed, 3000) for seed in range(40, 56)]
    text, question = " ".join(e.text for e in examples), examples[7].question
    by_default = ask(ctx, pasted=text, question=question, reading="guided")["readout"]["reading"]
    ctx.passage_window_tokens = 0
    whole = ask(ctx, pasted=text, question=question, reading="guided")["readout"]["reading"]
    ctx.passage_window_tokens = 256
    sized = ask(ctx, pasted=text, question=question, reading="guided")["readout"]["reading"]
    assert whole["requested"] == sized["requested"] == by_default["requested"] == "guided"
    assert whole["narrowed"] == whole["widened"] == 0
    for read in (by_default, sized):  # the tiny model's answers are weak: widened, then read whole
        assert read["narrowed"] + read["widened"] > 0
    args = cli.build_parser().parse_args(["--passage-window-tokens", "1024"])
    assert cli.context_from(args, Session()).passage_window_tokens == 1024
    off = cli.build_parser().parse_args(["--passage-window-tokens", "0"])  # whole windows (sized by default)
    assert cli.context_from(off, Session()).passage_window_tokens == 0
    assert cli.build_parser().parse_args([]).passage_window_tokens is None  # the loaded model's default
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["--passage-window-tokens", "-1"])
