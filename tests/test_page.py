"""The page's first-visit handlers as plain functions: the answer area's states (found, not found, low confidence,
an error, a Stop), clearing before a run, the reload's notice, the pickers' marks for what cannot run here, the
downloads, and the glossary covering every term of art the page shows."""

from __future__ import annotations

from datetime import datetime

import json
import os
import re
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pandas as pd
import pytest

from collections import OrderedDict
from page.context import make_context
from page import asking, downloads, events, picks
from page import words as page_help
from page import format as ui_format
from longqa.models import DEFAULT_MODEL, DEMO_MODEL_DIR
from longqa.readout import Readout
from longqa.session import sample_examples, SAMPLES_DIR, Session
from longqa_core.errors import Cancelled
from strategies.hardware import CPU_ONLY
from strategies.registry import strategy_cards
from tests.test_session import modules_down_to_the_forward


@pytest.fixture(scope="module")
def ctx(tiny_model_dir):
    ctx = make_context(Session(), models=[str(tiny_model_dir)], default_model=str(tiny_model_dir),
                       default_profile="cpu")
    asking.ensure_loaded(ctx)
    return ctx


OUTPUTS = ("documents", "answer", "answers", "evidence", "readout")  # some of the page's outputs, by name


def visitor(name: str = "tab-1"):
    return SimpleNamespace(session_hash=name, headers={})


def asked(ctx, request, pasted="The colour of Zorbin is teal.", question="What is the colour of Zorbin?",
          no_answer_below=""):
    """The page's Ask as gradio runs it: the handler wrapped to note how it ended, then the answer area after."""
    handler = asking.noting_outcome(ctx, events.bind(asking.ask, ctx), OUTPUTS)
    *_, out = handler([], pasted, question, 1, "auto", [], None, no_answer_below, request=request,
                      progress=lambda *a, **k: None)  # a generator handler: its last update is the answer
    return out, asking.show_outcome(ctx, request=request)


@pytest.mark.slow
def test_an_answer_says_whether_it_was_found_and_offers_both_downloads(ctx):
    out, shown = asked(ctx, visitor())
    assert out["answer"] and "confidence" in shown["status"]  # the tiny model has no rule: confidence alone
    readout = json.loads(open(shown["download_json"]["value"], encoding="utf-8").read())
    assert readout == out["readout"]
    history = pd.read_csv(shown["download_csv"]["value"])
    assert list(history.columns) == list(ui_format.HISTORY_DATA.values()) and len(history) == 1
    assert shown["download_json"]["visible"] and shown["download_csv"]["visible"]
    run = history.iloc[0]  # data, not words: base units named in the header, a time a program reads
    best = readout["answers"][0]
    assert run["score"] == pytest.approx(best["score"]) and run["answer"] == out["answer"]
    assert run["latency (seconds)"] == pytest.approx(readout["latency_s"]["total"])
    assert run["host peak RSS (bytes)"] == readout["memory"]["host_peak_rss_bytes"]
    assert datetime.fromisoformat(run["finished_at (ISO 8601, UTC)"]).tzinfo is not None
    assert run["profile"] == readout["profile"] and run["documents"] == "pasted text" and pd.isna(run["found"])


def test_an_answer_builds_its_json_and_history_table_once_for_the_page_and_its_downloads(ctx, monkeypatch):
    calls = {"to_json": 0, "history_rows": 0}
    for owner, name in ((Readout, "to_json"), (ui_format, "history_rows")):
        def counted(*args, _original=getattr(owner, name), _name=name, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)
    out, shown = asked(ctx, visitor("tab-once"))
    assert calls == {"to_json": 1, "history_rows": 1}
    assert json.loads(open(shown["download_json"]["value"], encoding="utf-8").read()) == out["readout"]
    with open(shown["download_csv"]["value"], encoding="utf-8") as written:
        assert written.read() == ui_format.history_data(out["history"]).to_csv(index=False)
    assert len(out["history_table"]) == 1  # the page's table: the same run, formatted


def test_download_folders_go_after_their_time_and_the_folder_is_listed_once_in_their_time(tmp_path, monkeypatch):
    now = [10_000.0]
    old, recent = tmp_path / "left-by-an-earlier-run", tmp_path / "recent"
    for folder, changed_at in ((old, 5_000.0), (recent, 9_950.0)):
        folder.mkdir()
        os.utime(folder, (changed_at, changed_at))
    listed, iterdir = [], Path.iterdir
    monkeypatch.setattr(Path, "iterdir", lambda self: listed.append(self) or iterdir(self))
    folders = downloads.DownloadFolders(tmp_path, keep_s=100.0, clock=lambda: now[0])
    first = folders.new()
    assert first.is_dir() and not any(first.iterdir()) and recent.exists() and not old.exists()
    now[0] = 10_060.0  # the recent folder is now 110 s old, the first 60 s
    second = folders.new()
    assert not recent.exists() and first.exists() and second.is_dir() and second != first
    assert listed.count(tmp_path) == 1, "each answer must not list the downloads folder"
    for folder, made_at in ((first, 10_000.0), (second, 10_060.0)):  # on the test's clock, as a listing reads them
        os.utime(folder, (made_at, made_at))
    sibling = tmp_path / "made-by-another-process"  # e.g. a second page sharing the folder
    sibling.mkdir()
    os.utime(sibling, (10_040.0, 10_040.0))
    now[0] = 10_150.0  # keep_s after the first listing: listed again
    folders.new()
    assert not first.exists() and not sibling.exists() and second.exists()
    assert listed.count(tmp_path) == 2


def test_under_the_threshold_the_answer_area_says_not_found(ctx):
    out, shown = asked(ctx, visitor(), no_answer_below="0.999")
    assert shown["status"].startswith("### Not found in the documents")
    assert "confidence)" in shown["status"] and "answers the question clearly enough" in shown["status"]
    assert out["answer"] == ""  # said once, over the answer box


def test_an_error_shows_its_message_in_the_answer_area_and_no_download(ctx):
    request = visitor()
    with pytest.raises(gr.Error) as raised:
        asked(ctx, request, pasted="")
    shown = asking.show_outcome(ctx, request=request)
    assert shown["status"].startswith("### The request failed")
    assert ui_format.escape_markdown(raised.value.message)[:40] in shown["status"]
    assert shown["download_json"]["visible"] is False and shown["download_csv"]["visible"] is False
    assert shown["answer"]["value"] == "" and shown["answers"].empty  # no best so far stands as the answer
    assert asking.show_outcome(ctx, request=request)["status"] is not None  # told once, then left as it is


def test_an_error_naming_a_file_shows_its_name_as_text_once_escaped(ctx, tmp_path):
    request = visitor("tab-markup")
    empty = tmp_path / "a<b>_notes.txt"
    empty.write_text("", encoding="utf-8")
    handler = asking.noting_outcome(ctx, events.bind(asking.ask, ctx), OUTPUTS)
    with pytest.raises(gr.Error, match="a&lt;b&gt;_notes"):  # the toast renders HTML: escaped once
        list(handler([str(empty)], "", "What?", 1, "auto", [], None, "", request=request,
                     progress=lambda *a, **k: None))
    status = asking.show_outcome(ctx, request=request)["status"]
    assert "a&lt;b&gt;\\_notes" in status and "&amp;" not in status  # Markdown shows the name as typed


def test_stop_on_the_page_ends_the_answer_and_says_how_far_it_got(ctx, monkeypatch):
    request = visitor("tab-stop")

    def stopped_half_way(*args, **kwargs):
        asking.press_stop(ctx, request)  # pressed while the windows are read
        assert asking.stop_check(ctx, request)()
        raise gr.Error("cancelled") from Cancelled("cancelled", windows_done=3, windows_total=8)

    monkeypatch.setattr(asking, "answer", stopped_half_way)
    out, shown = asked(ctx, request)
    assert all(value == gr.skip() for value in out.values()) and set(out) == set(OUTPUTS)
    assert shown["status"].startswith("### Stopped after 3 of 8 windows")
    assert not asking.stop_check(ctx, request)(), "a Stop lasts for one answer"


def test_a_stop_pressed_before_an_answer_does_not_stop_it(ctx):
    request = visitor("tab-early")
    asking.press_stop(ctx, request)
    out, shown = asked(ctx, request)
    assert out["answer"] and "confidence" in shown["status"]


def test_visitor_notes_are_bounded():
    notes = OrderedDict()
    for n in range(asking.MAX_VISITOR_NOTES + 5):
        asking.remember(notes, f"tab-{n}", n)
    assert len(notes) == asking.MAX_VISITOR_NOTES and "tab-0" not in notes
    asking.remember(notes, None, 1)
    assert None not in notes


def test_a_new_run_clears_every_answer_output():
    cleared = asking.clear_answer(ui_format.ASKING_STATUS)
    assert cleared["status"] == ui_format.ASKING_STATUS
    assert cleared["answer"]["value"] == "" and cleared["answer"]["label"] == "Answer"  # no best so far left
    assert cleared["evidence"] is None and cleared["readout"] is None
    assert all(cleared[name].empty for name in asking.CLEARED_TABLES)
    assert cleared["download_json"]["visible"] is False


def test_each_clearing_is_a_new_update_since_gradio_takes_the_value_out_of_the_one_it_sends():
    first = asking.clear_answer(ui_format.ASKING_STATUS)
    for name in ("answer", "download_json", "download_csv"):
        first[name].pop("value")  # as gradio's postprocess_update_dict does
    second = asking.clear_answer(ui_format.ASKING_STATUS)
    assert second["answer"]["value"] == "" and second["download_json"]["value"] is None


def test_a_reload_says_what_is_loading_and_disables_asking_until_it_ends(ctx, tiny_model_dir):
    starting = picks.start_loading(ctx, "baseline-fp32", str(tiny_model_dir))
    assert starting["load_status"].startswith(f"**Loading {ui_format.escape_markdown(str(tiny_model_dir))} with "
                                              "profile baseline\\-fp32…**")
    assert starting["ask"]["interactive"] is False and starting["full"]["interactive"] is False
    after = picks.show_loaded(ctx)
    assert after["ask"]["interactive"] is True and after["load_status"].startswith("Loaded **")


def test_a_pick_loads_what_was_picked_even_when_the_dropdown_was_set_back(ctx, tiny_model_dir):
    """A pick's first step names the pick from the event's data, and sets the dropdown to it again: the load that
    follows reads the dropdown, which a visit's outputs may have set back to the old value in between."""
    import gradio as gr

    picked = gr.SelectData(None, {"index": 1, "value": "baseline-fp32"})
    starting = picks.start_profile_pick(ctx, "cpu", str(tiny_model_dir), picked)  # the dropdown read still cpu
    assert starting["profile"]["value"] == "baseline-fp32" and "profile baseline\\-fp32…" in starting["load_status"]
    assert starting["ask"]["interactive"] is False
    model = gr.SelectData(None, {"index": 0, "value": "demo"})
    starting = picks.start_model_pick(ctx, "cpu", str(tiny_model_dir), model)
    assert starting["model"]["value"] == "demo" and starting["load_status"].startswith("**Loading demo with profile")


def test_gpu_only_strategies_are_marked_with_why_on_a_cpu_machine():
    labels = dict((value, label) for label, value in picks.strategy_choices(CPU_ONLY))
    assert set(labels) == {card["name"] for card in strategy_cards()}
    for name in ("offload", "model_split", "replicas"):
        assert "cannot run here: needs" in labels[name] and "CUDA GPU" in labels[name]
    assert "cannot run here" not in labels["dynamic_batching"]


def test_hub_models_not_in_the_cache_are_marked_and_refused_in_plain_words_offline(monkeypatch, tmp_path):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # an empty cache
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    hub = "valhalla/longformer-base-4096-finetuned-squadv1"
    ctx = make_context(Session(), models=[hub, "demo"], default_model="demo", default_profile="cpu")
    assert dict((value, label) for label, value in picks.model_choices(ctx)) == {
        hub: "Longformer-base, SQuAD v1", "demo": "demo (bundled)"}  # short: the whole choice shows on a phone
    assert picks.model_info(hub).startswith(f"{hub}: Longformer-base, SQuAD v1 (148.1 M params) (cannot load here: "
                                            "not in the local cache, and downloads are off).")
    assert "cannot load" not in picks.model_info("demo")
    with pytest.raises(gr.Error, match=r"not in this machine's cache, and downloads are off here"):
        picks.load_profile(ctx, "cpu", hub)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    assert picks.model_note(hub) == " (not in the local cache: the first load downloads it from the Hub)"
    assert picks.model_note(DEFAULT_MODEL).startswith(" (not in the local cache")


@pytest.mark.slow
@pytest.mark.skipif(not any(DEMO_MODEL_DIR.glob("*.safetensors")), reason="the demo model has no weights yet")
def test_offline_the_default_model_is_marked_as_answered_by_the_demo_model_which_then_answers(monkeypatch, tmp_path):
    """The default model falls back to the bundled demo model when it cannot be fetched: offline its mark says so
    (not "cannot load here"), and picking it loads the demo model, as the mark said."""
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # an empty cache
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    ctx = make_context(Session(), models=[DEFAULT_MODEL], default_model="demo", default_profile="cpu")
    info = picks.model_info(DEFAULT_MODEL)
    assert "cannot load here" not in info
    assert "(not in the local cache, and downloads are off: the bundled demo model answers instead)." in info
    picks.load_profile(ctx, "cpu", DEFAULT_MODEL)
    assert ctx.session.model_ref == "demo" and ctx.session.loaded.readout.fallback_reason
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    assert picks.model_note(DEFAULT_MODEL).endswith("if it cannot, the bundled demo model answers instead)")


def test_every_term_of_art_the_page_shows_is_in_the_glossary():
    shown = " ".join([*(card["description"] for card in strategy_cards()), *ui_format.MEMORY_HEADERS,
                      *ui_format.LOAD_HEADERS, *ui_format.RUN_HEADERS])
    glossary = " ".join(page_help.GLOSSARY)
    for term in ("RSS", "NVML", "SDPA", "oneDNN", "NF4", "qa_outputs", "device map", "bf16", "int8"):
        assert term in shown or term in page_help.INTRO, f"{term} is not shown: drop it from this list"
        assert term in glossary, f"{term} is shown but not explained"
    assert re.search(r"What is the .* of .*\?", page_help.INTRO) and "profile" in page_help.INTRO


@pytest.mark.slow
@pytest.mark.skipif(not any(DEMO_MODEL_DIR.glob("*.safetensors")), reason="the demo model has no weights yet")
def test_the_demo_model_says_not_found_for_a_name_the_documents_never_mention():
    ctx = make_context(Session(), models=["demo"], default_model="demo", default_profile="cpu")
    asking.ensure_loaded(ctx)
    example = sample_examples()[0]
    files = [str(SAMPLES_DIR / example["file"])]
    handler = asking.noting_outcome(ctx, events.bind(asking.ask, ctx), OUTPUTS)
    request = visitor("tab-demo")
    asked_about = {}
    for question in (example["question"], "What is the frequency of Zebulon Quarrimax?"):
        *_, out = handler(files, "", question, 1, "auto", [], None, "", request=request,
                          progress=lambda *a, **k: None)
        asked_about[question] = (out["answer"], asking.show_outcome(ctx, request=request)["status"])
    answer, status = asked_about[example["question"]]
    assert answer == example["answer"] and status.startswith("### Found")
    answer, status = asked_about["What is the frequency of Zebulon Quarrimax?"]
    assert status.startswith("### Not found in the documents") and status.count("Not found") == 1 and answer == ""


# The best answer so far, streamed (issue 50 item 2) -----------------------------------------------------------
LONG_PASTE = " ".join(f"Sentence {n} tells of the colour of Zorbin and of nothing else here." for n in range(900))


def streamed(ctx, request, pasted=LONG_PASTE, question="What is the colour of Zorbin?", on_update=None,
             progress=lambda *a, **k: None):
    """The page's Ask as gradio runs it, streaming: every update the handler yields, then the answer area after."""
    handler = asking.noting_outcome(ctx, events.bind(asking.ask, ctx), OUTPUTS)
    updates = []
    for update in handler([], pasted, question, 1, "full", [], None, "", request=request, progress=progress):
        updates.append(update)
        if on_update is not None:
            on_update(update)
    return updates, asking.show_outcome(ctx, request=request)


@pytest.mark.slow
def test_a_long_read_shows_the_best_answer_so_far_then_the_answer(ctx):
    updates, shown = streamed(ctx, visitor("tab-stream"))
    *provisional, final = updates
    assert len(provisional) >= 2 and "history_table" in final
    reads = [update["readout"]["windows_read"] for update in provisional]
    assert reads == sorted(reads) and reads[-1] <= provisional[0]["readout"]["windows_total"]
    for update in provisional:
        assert update["readout"]["provisional"] is True and "found" not in update["readout"]
        best = update["readout"]["answer"]
        assert update["answer"]["value"] == best["text"]
        assert update["answer"]["label"] == (f"Answer (best so far, {update['readout']['windows_read']} of "
                                             f"{update['readout']['windows_total']} windows read)")
        rank, text, _, confidence, _, _ = update["answers"].iloc[0]
        assert (rank, text, confidence) == ("so far", best["text"], ui_format.PROVISIONAL)  # never judged
        assert any(category == "answer" and piece.strip() == best["text"] for piece, category in update["evidence"])
    assert final["readout"]["found"] is None or isinstance(final["readout"]["found"], bool)
    assert shown["answer"]["label"] == "Answer" and "confidence" in shown["status"]  # the answer replaces it


@pytest.mark.slow
def test_stop_keeps_the_best_answer_so_far_labelled_partial(ctx):
    request = visitor("tab-stream-stop")

    def stop_at_the_first_candidate(update):
        if update["readout"].get("provisional"):
            asking.press_stop(ctx, request)

    updates, shown = streamed(ctx, request, on_update=stop_at_the_first_candidate)
    kept = [update for update in updates if "readout" in update and update["readout"] != gr.skip()][-1]
    done, total = kept["readout"]["windows_read"], kept["readout"]["windows_total"]
    assert kept["readout"]["provisional"] is True and done < total
    assert shown["status"].startswith(f"### Stopped after {done} of {total} windows\nThe answer shown is the best")
    assert shown["answer"]["label"] == f"Answer (partial: stopped after {done} of {total} windows)"
    rank, text, _, confidence, _, _ = shown["answers"].iloc[0]  # the best so far stays, no longer "pending"
    assert (rank, text, confidence) == ("so far", kept["readout"]["answer"]["text"], ui_format.UNJUDGED)
    assert all(value == gr.skip() for value in updates[-1].values())  # the partial answer stays as it was shown


@pytest.mark.slow
def test_a_stop_pressed_once_every_window_is_read_shows_the_answer(ctx):
    """Issue 49 item 7: Stop pressed while the progress read "90/90 windows" said "Stopped before any window was
    read"; the answer was being decoded."""
    request = visitor("tab-stop-late")
    pressed = []

    def progress(value, desc=None, unit=None):
        if isinstance(value, tuple) and value[0] == value[1] > 0:
            asking.press_stop(ctx, request)
            pressed.append(value)

    updates, shown = streamed(ctx, request, progress=progress)
    assert pressed and "history_table" in updates[-1]  # the answer itself, after the Stop
    assert "confidence" in shown["status"] and shown["answer"]["label"] == "Answer"


# Ask's path from the page's handler to the model's forward (issue 47 item 2), measured at 26 modules for a full
# read and 28 for a guided one before the page and the request's modules were made to match their jobs; one more
# since issue 57, where pasted text flows as a person reads it (`longqa_core.text_flow`). Since issue 59 the request
# function (`longqa.request`) is one of them, and the lane's polling loop (`longqa_core.waiting`) is entered only
# where a request waits; a batch's context is decided at load, so a profile whose strategies have no runtime context
# (`cpu`) enters no strategy module (`strategies.base.runtime_contexts`).
PAGE_BOUNDS = {"full": 15, "guided": 18}
OFF_THE_PATH = ("page.zerogpu", "page.picks", "page.turns", "page.errors", "page.streaming", "longqa.serving.policy",
                "longqa.loader", "longqa_core.text_files", "longqa_core.document_limits", "longqa_core.host_memory",
                "strategies.base")


@pytest.mark.slow
@pytest.mark.parametrize("reading", ["full", "guided"])
def test_an_ask_enters_few_modules_from_the_page_s_handler_to_the_model(ctx, long_document, reading):
    """Off ZeroGPU the page hands the answer its context, stop check and gate directly: neither the ZeroGPU module
    nor the policy's registries, the picks, the loader or (the `cpu` profile has no runtime context) a strategy
    module are entered on the way down; a full read ranks nothing. The
    session's own share of the path: tests/test_session.py."""
    _, example = long_document
    request = visitor(f"tab-{reading}")

    def ask() -> list[dict]:
        return list(asking.ask(ctx, [], example.text, example.question, 3, reading, [], request=request,
                               progress=lambda *a, **k: None))

    ask()  # the first request imports and warms
    modules = modules_down_to_the_forward(ask)
    assert modules[0] == "page.asking" and not set(OFF_THE_PATH) & set(modules), modules
    assert len(modules) <= PAGE_BOUNDS[reading], modules
    assert ("longqa_core.reading" in modules) == (reading == "guided")


@pytest.mark.parametrize("files, pasted, status", [
    (["notes.txt"], "", ui_format.NEW_DOCUMENTS_STATUS), ([], "Some text.", ui_format.NEW_DOCUMENTS_STATUS),
    ([], "  \n", ui_format.NO_DOCUMENTS_STATUS), (None, None, ui_format.NO_DOCUMENTS_STATUS)])
def test_changed_documents_clear_the_answer_and_say_what_to_do_next(files, pasted, status):
    """A rejected upload or a cleared box leaves no document: the answer area says so rather than "New documents"."""
    cleared = asking.new_documents(files, pasted)
    assert cleared["status"] == status and cleared["answer"]["value"] == "" and cleared["evidence"] is None


def test_after_a_reload_an_answer_of_the_model_loaded_before_says_whose_it_is(ctx):
    now = {"model": ctx.session.model_ref, "profile": ctx.session.profile_name}
    assert asking.answered_before(ctx, now) == {"status": gr.skip()}  # the loaded model's own answer: as it was
    assert asking.answered_before(ctx, None) == {"status": gr.skip()}  # no answer shown
    status = asking.answered_before(ctx, {**now, "profile": "baseline-fp32"})["status"].replace("\\", "")  # as shown
    assert status.startswith("### Answered by ") and "with profile baseline-fp32" in status
    assert f"profile {ctx.session.profile_name}: press Ask to answer with it." in status


def test_an_empty_question_on_the_page_stops_before_asking_with_a_note_and_elsewhere_is_an_error(ctx):
    with pytest.raises(gr.Error) as stopped:  # the page's first step: unseen, no notice
        asking.start_asking([], "The colour of Zorbin is teal.", "  ")
    assert stopped.value.visible is False
    shown = asking.no_question_shown()
    assert shown["status"] == ui_format.NO_QUESTION_STATUS and "failed" not in shown["status"]
    assert shown["question_note"]["visible"] is True and shown["question_note"]["value"] == ui_format.NO_QUESTION_NOTE
    assert asking.start_asking([], "", "")["question_note"]["visible"] is False  # no document: asked, and told so
    assert asking.start_asking([], "Some text.", "What?")["status"] == ui_format.ASKING_STATUS
    with pytest.raises(gr.Error, match="question is empty"):  # the API runs `ask` alone: its error, as before
        asked(ctx, visitor("tab-empty"), question="  ")


def test_a_gpu_worker_closed_mid_read_is_read_to_its_end_and_the_close_stays_clean():
    """ZeroGPU releases the GPU when its function ends, so a closed read still reads the worker to its end; the
    worker then ends by its stop check (a gr.Error), which is not the close's: the close itself raises nothing."""
    read = []

    def worker():
        yield "the best so far"
        read.append("the rest")
        raise gr.Error("Cancelled: the visitor left")

    steps = asking.from_gpu_worker(worker())
    assert next(steps) == "the best so far"
    steps.close()
    assert read == ["the rest"]
