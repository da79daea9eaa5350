"""What `page.hardening` takes from gradio beyond its public API, checked against the pinned gradio (6.31): each test
fails when a gradio upgrade changes what the module relies on, before a visitor finds out. The behaviour through a
served page is tested in test_app_api.py (refused paths, files of the wrong shape) and test_serving.py."""

from __future__ import annotations

import ast
import asyncio
import inspect
import time
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor

import gradio as gr
import httpx
import pytest
from gradio.context import LocalContext
from gradio.queueing import Event
from gradio.utils import LRUCache

from longqa.serving import policy
from longqa.serving.uploads import MIB, UploadStore
from page.hardening import (LATER_INPUT, MAX_TOLD_CHARS, MESSAGE_QUEUES, SESSION_CAPACITY, UNUPLOADED_FILE,
                            SparingSessions, abandonment_check, harden, proxy_address, remote_file)

ROOT = Path(__file__).resolve().parents[1]


def hardened_page(**kwargs):
    """A page with one event taking a file list, a question and the later input, hardened as the app's is."""
    with gr.Blocks() as demo:
        files = gr.File(file_count="multiple", type="filepath")
        question = gr.Textbox()
        later = gr.Textbox("", elem_id=LATER_INPUT)
        answer = gr.Textbox()
        gr.Button().click(lambda f, q, t: f"{q}|{t}", inputs=[files, question, later], outputs=answer, api_name="ask")
    demo.queue()
    return harden(demo, UploadStore(), None, **kwargs)


def test_the_wrapped_methods_are_gradios_with_the_signatures_harden_calls():
    assert list(inspect.signature(gr.Blocks.process_api).parameters)[:3] == ["self", "block_fn", "inputs"]
    assert "iterator" in inspect.signature(gr.Blocks.process_api).parameters  # a generator's later steps: no values
    assert "app_kwargs" in inspect.signature(gr.Blocks.launch).parameters
    # every call gradio runs reads its values inside process_api, through the instance: the checks run before
    assert "await self.preprocess_data(" in inspect.getsource(gr.Blocks.process_api)
    assert "self.validate_inputs(block_fn, inputs)" in inspect.getsource(gr.Blocks.preprocess_data)
    assert "InvalidPathError" in inspect.getsource(__import__("gradio.processing_utils").processing_utils)
    # gradio's routes call it with the generator's iterator by keyword: `telling_process_api` reads it there
    assert "iterator=iterator," in inspect.getsource(__import__("gradio.route_utils").route_utils.call_process_api)


def call(demo: gr.Blocks, values: list, block_fn=None):
    """The hardened page's event (its first by default) called as gradio's routes call it."""
    block_fn = block_fn or next(iter(demo.fns.values()))
    return asyncio.run(demo.process_api(block_fn=block_fn, inputs=values, state=None))


@pytest.mark.slow
def test_a_call_one_value_short_gets_the_later_inputs_default_and_fewer_a_message():
    demo = hardened_page()
    assert call(demo, [None, "q"])["data"] == ["q|"]
    with pytest.raises(gr.Error, match=r"This call sent 1 values; ask takes 3"):
        call(demo, ["q"])


def test_the_pages_own_errors_are_told_as_they_are_and_gradios_cut_short():
    with gr.Blocks() as demo:
        choice = gr.Dropdown(["a", "b"], value="a")
        told = gr.Textbox()
        gr.Button().click(lambda c: (_ for _ in ()).throw(gr.Error("x" * 1500, print_exception=False)),
                          inputs=choice, outputs=told)
    demo.queue()
    harden(demo, UploadStore(), None)
    with pytest.raises(gr.Error) as own:
        call(demo, ["a"])
    assert own.value.message == "x" * 1500  # the page's own words, whole
    with pytest.raises(gr.Error) as refused:
        call(demo, ["c" * 5000])  # not among the choices: the dropdown's refusal echoes the value
    assert refused.value.message.startswith("Value: ccc") and len(refused.value.message) <= MAX_TOLD_CHARS


@pytest.mark.slow
def test_a_handlers_output_gradio_refuses_is_not_told_as_the_callers_fault():
    with gr.Blocks() as demo:  # gradio fails an output it cannot send as its own ComponentProcessingError
        question = gr.Textbox()
        gr.Button().click(lambda q: {"not": "a file"}, inputs=question, outputs=gr.File(), api_name="shape")
        gr.Button().click(lambda q: 12, inputs=question, outputs=gr.File(), api_name="number")
    demo.queue()
    harden(demo, UploadStore(), None)
    for block_fn in demo.fns.values():
        with pytest.raises(gr.Error) as refused:
            call(demo, ["q"], block_fn)
        assert refused.value.message.startswith(f"This call to {block_fn.api_name} could not be taken"), (
            refused.value.message)


@pytest.mark.slow
def test_a_batch_call_naming_a_file_by_a_web_address_is_refused_too():
    with gr.Blocks() as demo:
        files = gr.File(file_count="multiple", type="filepath")
        gr.Button().click(lambda f: [[str(f)]], inputs=files, outputs=gr.Textbox(), batch=True, max_batch_size=4)
    demo.queue()
    harden(demo, UploadStore(), None)
    remote = {"path": "https://198.51.100.7/big.txt", "meta": {"_type": "gradio.FileData"}}
    with pytest.raises(gr.Error) as refused:
        call(demo, [[None, [remote]]])
    assert refused.value.message.startswith("'File' names a file by a web address")


def test_every_error_the_page_raises_says_it_is_the_pages_own():
    """`harden` tells the page's errors (print_exception=False) from gradio's (which it cuts short) by that flag."""
    calls = [node for path in sorted((ROOT / "page").glob("*.py"))
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(node, ast.Call)
             and ast.unparse(node.func) in ("gr.Error", "Error")]
    assert len(calls) >= 10
    for node in calls:
        flags = {keyword.arg: ast.unparse(keyword.value) for keyword in node.keywords}
        assert flags.get("print_exception") == "False", ast.unparse(node)


@pytest.mark.slow
def test_a_file_never_uploaded_is_told_in_words(tmp_path):
    demo = hardened_page()
    outside = tmp_path / "not-uploaded.txt"
    outside.write_text("secret")
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True)
    try:  # process_api sets the running page as gradio's context, which gradio's path check reads
        with pytest.raises(gr.Error) as refused:
            call(demo, [[{"path": str(outside), "meta": {"_type": "gradio.FileData"}}], "q", ""])
        assert refused.value.message == UNUPLOADED_FILE
    finally:
        demo.close()


@pytest.mark.slow
def test_a_file_of_the_wrong_shape_is_told_in_words():
    demo = hardened_page()
    with pytest.raises(gr.Error) as refused:
        call(demo, ["a path", "q", ""])
    assert refused.value.message.startswith("'File' must be a list of files uploaded with the request, or null")
    assert refused.value.message.endswith("; this call sent a str.")


@pytest.mark.slow
def test_launch_bounds_the_upload_route_however_the_page_is_launched():
    demo = hardened_page()
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True)
    try:
        middleware = [entry.cls.__name__ for entry in demo.server_app.user_middleware]
        assert "UploadGate" in middleware
    finally:
        demo.close()


@pytest.mark.slow
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


@pytest.mark.slow
def test_launch_closes_the_routes_the_page_does_not_use_and_bounds_bodies_and_sessions():
    demo = hardened_page(max_text_bytes=1000)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True)
    try:
        assert demo.state_session_capacity == SESSION_CAPACITY and demo.enable_monitoring is False
        assert isinstance(demo._queue.pending_messages_per_session, SparingSessions)
        recording = httpx.post(f"{url}gradio_api/process_recording", files={"files": ("a.wav", b"x" * 1000)})
        assert recording.status_code == 404 and "records no audio" in recording.text
        assert httpx.get(f"{url}monitoring/summary").status_code == 403  # gradio's own answer, monitoring off
        began = time.monotonic()
        join = httpx.post(f"{url}gradio_api/queue/join", content=b"{" + b" " * (2 * MIB) + b"}",
                          headers={"content-type": "application/json"}, timeout=30)
        assert join.status_code == 413 and "at most 1.0 MB" in join.text, join.text
        assert time.monotonic() - began < 10.0
        small = httpx.post(f"{url}gradio_api/queue/join", json={"data": [None, "q", ""], "fn_index": 0,
                                                                "session_hash": "s"}, timeout=30)
        assert small.status_code == 200 and small.json().get("event_id"), small.text
    finally:
        demo.close()


def test_a_full_message_cache_drops_the_oldest_idle_session_never_one_with_an_event_pending():
    pending = {"busy": {"event"}}
    cache = SparingSessions(3, lambda session: bool(pending.get(session)))
    assert isinstance(cache, LRUCache)  # what gradio's queue holds there
    for session in ("busy", "idle-1", "idle-2", "idle-3", "idle-4"):
        cache[session] = object()
    assert list(cache) == ["busy", "idle-3", "idle-4"]
    pending.update({"idle-3": {"e"}, "idle-4": {"e"}})
    cache["fresh"] = object()  # every session has an event pending: the cache grows rather than drop one
    assert list(cache) == ["busy", "idle-3", "idle-4", "fresh"]
    assert MESSAGE_QUEUES == 2000  # gradio's own bound, kept (queueing.Queue: LRUCache(2000))
    assert "LRUCache(2000)" in inspect.getsource(__import__("gradio.queueing").queueing.Queue.__init__)


@pytest.mark.slow
def test_a_file_named_by_a_web_address_is_refused_before_gradio_fetches_it():
    demo = hardened_page()
    remote = {"path": "http://198.51.100.7/big.txt", "meta": {"_type": "gradio.FileData"}}
    assert remote_file([remote]) and remote_file(remote) and not remote_file([{"path": "/tmp/x.txt"}])
    with pytest.raises(gr.Error) as refused:
        call(demo, [[remote], "q", ""])
    assert refused.value.message.startswith("'File' names a file by a web address")


def test_the_visitors_address_is_the_one_the_proxy_appends_not_a_made_up_first_hop():
    made_up = [f"1.2.3.{n}, 81.2.69.142" for n in range(6)]  # six clients' own first hops, one real address
    assert {proxy_address(header) for header in made_up} == {"81.2.69.142"}
    assert proxy_address("81.2.69.142, 10.0.0.2, 127.0.0.1") == "81.2.69.142"  # the host's own hops skipped
    assert proxy_address("not-an-address, 81.2.69.142") == "81.2.69.142"
    assert proxy_address("192.168.1.20") == "192.168.1.20"  # a proxy on a private network: its only hop
    assert proxy_address("81.2.69.142, not-an-address") == "not-an-address"  # unknown hops are no proxy's own
    assert proxy_address("") is None and proxy_address(None) is None


def test_once_the_server_is_told_to_stop_every_request_counts_as_abandoned():
    from page.cli import stop_on_signal

    check = abandonment_check()
    assert check() is False
    try:
        with pytest.raises(SystemExit) as exited:
            stop_on_signal()  # SIGTERM's handler in `python app.py`
        assert exited.value.code == 0 and policy.STOPPING.is_set()
        assert check() is True and abandonment_check()() is True
    finally:
        policy.STOPPING.clear()


@pytest.mark.slow
def test_a_pages_new_session_leaves_out_gradios_copy_of_every_blocks_config_and_still_keeps_state():
    from gradio.state_holder import SessionState

    from page.hardening import LightSessionState

    made = inspect.getsource(SessionState.__init__)  # what LightSessionState sets, but the copy: gradio's own
    for attribute in ("self.blocks_config = copy(blocks.default_config)", "self.config_values = {",
                      "self.state_data: dict[int, Any] = {}", "self._state_ttl = {}", "self.is_closed = False",
                      "self.STATE_TTL_WHEN_CLOSED"):
        assert attribute in made, attribute
    with gr.Blocks() as demo:
        kept = gr.State([])
        shown = gr.Textbox()
        gr.Button().click(lambda k: (k + ["x"], str(len(k) + 1)), inputs=kept, outputs=[kept, shown], api_name="add")
        for _ in range(100):
            gr.Textbox("filler")
    demo.queue()
    harden(demo, UploadStore(), None)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True)
    try:
        holder = demo.server_app.state_holder
        session = holder["fresh"]
        assert isinstance(session, LightSessionState) and session.config_values == {}
        assert len(SessionState(demo).config_values) > 100  # what gradio's own would have copied
        client = __import__("gradio_client").Client(url, verbose=False)
        assert client.predict(api_name="/add") == "1" and client.predict(api_name="/add") == "2"  # state kept
        assert httpx.get(f"{url}gradio_api/deep_link", params={"session_hash": "fresh"}).status_code == 404
    finally:
        demo.close()


@pytest.mark.slow
def test_behind_a_proxy_one_address_sends_its_budget_of_joins_and_another_address_its_own(monkeypatch):
    from page import hardening

    monkeypatch.setattr(hardening, "JOINS_PER_S", 0.1)  # the burst as it is; its refill too slow to matter here
    with gr.Blocks() as demo:
        gr.Button().click(lambda: "x", outputs=gr.Textbox(), api_name="x")
    demo.queue()
    harden(demo, UploadStore(), "X-Forwarded-For")
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True)
    http = httpx.Client(timeout=30)  # one for the flood: httpx.post builds a client, and its SSL context, per call
    try:
        def join(address: str, n: int) -> int:
            return http.post(f"{url}gradio_api/queue/join", json={"data": [], "fn_index": 0, "session_hash": f"s{n}"},
                             headers={"X-Forwarded-For": f"1.2.3.{n}, {address}"}).status_code

        with ThreadPoolExecutor(4) as pool:  # a made-up first hop each time
            flood = list(pool.map(lambda n: join("81.2.69.142", n), range(hardening.JOINS_BURST + 10)))
        assert flood.count(200) <= hardening.JOINS_BURST + 2 and flood.count(429) >= 8, flood
        assert join("81.2.69.143", 0) == 200
    finally:
        http.close()
        demo.close()


@pytest.mark.slow
def test_on_a_direct_connection_new_sessions_past_the_budget_are_refused_and_known_or_heard_ones_join(monkeypatch):
    from page import hardening

    monkeypatch.setattr(hardening, "NEW_SESSIONS_PER_S", 0.1)  # the burst as it is; its refill too slow to matter here
    with gr.Blocks() as demo:  # a page with state, as the app's: gradio's page and client open its heartbeat
        kept = gr.State(0)
        gr.Button().click(lambda k: "x", inputs=kept, outputs=gr.Textbox(), api_name="x")
    demo.queue()
    harden(demo, UploadStore(), None)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True)
    http = httpx.Client(timeout=30)  # one for the flood: httpx.post builds a client, and its SSL context, per call
    try:
        def join(session: str) -> httpx.Response:
            return http.post(f"{url}gradio_api/queue/join", json={"data": [], "fn_index": 0, "session_hash": session})

        with ThreadPoolExecutor(4) as pool:  # raw joins from loopback, each naming a new session, none heard of
            flood = [r.status_code for r in pool.map(lambda n: join(f"s{n}"), range(hardening.NEW_SESSIONS_BURST + 10))]
        assert flood.count(200) <= hardening.NEW_SESSIONS_BURST + 2 and flood.count(429) >= 8, flood
        refused = join("one-more")
        assert refused.status_code == 429 and "new sessions" in refused.json()["detail"]
        assert join("s0").status_code == 200  # a session that joined before: known, past the budget
        with httpx.stream("GET", f"{url}gradio_api/heartbeat/page-open", timeout=30) as beat:
            next(beat.iter_lines())
            assert join("page-open").status_code == 200  # its heartbeat heard, as a page's and gradio_client's are
        assert __import__("gradio_client").Client(url, verbose=False).predict(api_name="/x") == "x"
    finally:
        http.close()
        demo.close()


# What the page reaches into gradio for, all of it in page/hardening.py (its docstring says why each): the one method
# every call goes through, the running events and their message queues, the sessions' state, the uploads gradio will
# read. `gradio.blocks.Block` is the panels' type for any block (gradio's base class, named in its own docs).
GRADIO_INTERNALS = {"process_api", "preprocess_data", "validate_inputs", "_queue", "active_jobs", "_id", "alive",
                    "pending_messages_per_session", "pending_event_ids_session", "event_ids_to_events", "push",
                    "state_holder", "upload_file_set", "iterators", "LocalContext", "SessionState", "StateHolder",
                    "LRUCache", "InvalidPathError"}
PUBLIC_SUBMODULES = {"gradio.blocks": {"Block"}}


def gradio_reaches(path: Path) -> set[str]:
    """The gradio internals a page module names: attributes and names from GRADIO_INTERNALS, and whatever it imports
    from gradio's submodules beyond PUBLIC_SUBMODULES."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    reached = {node.attr for node in ast.walk(tree)
               if isinstance(node, ast.Attribute) and node.attr in GRADIO_INTERNALS}
    reached |= {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and node.id in GRADIO_INTERNALS}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("gradio.", "gradio_client.")):
            reached |= {f"{node.module}.{alias.name}" for alias in node.names
                        if alias.name not in PUBLIC_SUBMODULES.get(node.module, set())}
    return reached


def test_only_the_hardening_module_reaches_into_gradio_and_it_reaches_no_further_than_it_says():
    reaches = {path.name: gradio_reaches(path) for path in sorted((ROOT / "page").glob("*.py"))}
    assert {name for name, reached in reaches.items() if reached} == {"hardening.py"}, reaches
    assert reaches["hardening.py"] == {
        "process_api", "gradio.exceptions.InvalidPathError", "InvalidPathError",  # the call, told in words
        "gradio.context.LocalContext", "LocalContext", "_queue", "active_jobs", "_id", "alive",  # abandoned
        "pending_messages_per_session", "pending_event_ids_session", "gradio.utils.LRUCache", "LRUCache",
        "gradio.state_holder.SessionState", "gradio.state_holder.StateHolder", "SessionState", "StateHolder",
        "state_holder", "upload_file_set", "gradio_client.utils.is_http_url_like"}, reaches["hardening.py"]
