"""What `page.hardening` takes from gradio beyond its public API, checked against the pinned gradio (6.31): each test
fails when a gradio upgrade changes what the module relies on, before a visitor finds out. The behaviour through a
served page is tested in test_app_api.py (refused paths, files of the wrong shape) and test_serving.py."""

from __future__ import annotations

import asyncio
import inspect

import gradio as gr
import pytest
from gradio.context import LocalContext
from gradio.queueing import Event

from longqa.serving.uploads import UploadStore
from page.hardening import LATER_INPUT, UNUPLOADED_FILE, abandonment_check, harden


def hardened_page():
    """A page with one event taking a file list, a question and the later input, hardened as the app's is."""
    with gr.Blocks() as demo:
        files = gr.File(file_count="multiple", type="filepath")
        question = gr.Textbox()
        later = gr.Textbox("", elem_id=LATER_INPUT)
        answer = gr.Textbox()
        gr.Button().click(lambda f, q, t: f"{q}|{t}", inputs=[files, question, later], outputs=answer, api_name="ask")
    demo.queue()
    return harden(demo, UploadStore(), None)


def test_the_wrapped_methods_are_gradios_with_the_signatures_harden_calls():
    assert list(inspect.signature(gr.Blocks.preprocess_data).parameters) == ["self", "block_fn", "inputs", "state",
                                                                              "explicit_call"]
    assert list(inspect.signature(gr.Blocks.validate_inputs).parameters) == ["self", "block_fn", "inputs"]
    assert "app_kwargs" in inspect.signature(gr.Blocks.launch).parameters
    # gradio checks the count inside preprocess_data, through the instance: the padding runs before the check
    assert "self.validate_inputs(block_fn, inputs)" in inspect.getsource(gr.Blocks.preprocess_data)


def test_a_call_one_value_short_gets_the_later_inputs_default_and_fewer_a_message():
    demo = hardened_page()
    block_fn = next(iter(demo.fns.values()))
    processed = asyncio.run(demo.preprocess_data(block_fn, [None, "q"], None))
    assert processed == [None, "q", ""]
    with pytest.raises(gr.Error, match=r"This call sent 1 values; ask takes 3"):
        asyncio.run(demo.preprocess_data(block_fn, ["q"], None))


def test_a_file_never_uploaded_is_told_in_words(tmp_path):
    demo = hardened_page()
    block_fn = next(iter(demo.fns.values()))
    outside = tmp_path / "not-uploaded.txt"
    outside.write_text("secret")
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True)
    running = LocalContext.blocks.set(demo)  # as gradio sets it for each event: its path check reads it
    try:
        with pytest.raises(gr.Error) as refused:
            asyncio.run(demo.preprocess_data(block_fn, [[{"path": str(outside), "meta": {"_type": "gradio.FileData"}}],
                                                        "q", ""], None))
        assert refused.value.message == UNUPLOADED_FILE
    finally:
        LocalContext.blocks.reset(running)
        demo.close()


def test_a_file_of_the_wrong_shape_is_told_in_words():
    demo = hardened_page()
    block_fn = next(iter(demo.fns.values()))
    with pytest.raises(gr.Error) as refused:
        asyncio.run(demo.preprocess_data(block_fn, ["a path", "q", ""], None))
    assert refused.value.message.startswith("'File' must be a list of files uploaded with the request, or null")
    assert refused.value.message.endswith("; this call sent a str.")


def test_launch_bounds_the_upload_route_however_the_page_is_launched():
    demo = hardened_page()
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True)
    try:
        middleware = [entry.cls.__name__ for entry in demo.server_app.user_middleware]
        assert "UploadGate" in middleware
    finally:
        demo.close()


def test_the_queue_attributes_the_abandonment_check_reads_are_there():
    assert isinstance(LocalContext.blocks.get(None), (gr.Blocks, type(None)))  # ContextVars gradio sets per event
    assert LocalContext.event_id.get(None) is None  # outside an event
    with gr.Blocks() as demo:
        gr.Button().click(lambda: None)
    demo.queue()
    queue = demo._queue
    assert isinstance(queue.active_jobs, list) and hasattr(queue, "pending_messages_per_session")
    event = Event(session_hash="tab", fn=next(iter(demo.fns.values())), request=None, username=None)
    assert event.session_hash == "tab" and isinstance(event._id, str) and event.alive is True


def test_outside_gradios_queue_nothing_is_abandoned():
    assert abandonment_check()() is False
