"""The served app through gradio_client on 127.0.0.1: /ask with a long upload, /load_profile, errors, the queue."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import httpx
import pypdfium2
import pytest
from PIL import Image
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError
from gradio_client.utils import Status

import app
from page.context import make_context
from page.layout import build_blocks
from page import asking, cli, context, hardening
import longqa.session
from longqa.session import read_documents, SAMPLES_DIR, Session
from bench.crowd import crowd_check
from tests.conftest import served_page
from tests.generated_pdfs import WRAPPED_QUESTION, wrapped_matplotlib_pdf
from tests.test_documents import blank_page_pdf, encrypt_pdf, make_pdf
from tests.tiny import CountingRunner

READOUT_KEYS = {"question", "answers", "documents", "windows", "tokens", "batch_size", "backoffs", "latency_s",
                "memory", "notices", "tokens_per_s", "model", "profile", "window_tokens",
                "memory_prediction", "reading", "queue", "found", "no_answer",  # the last two: issue 38
                "strategies", "request_memory"}  # issue 39
ASK_RETURNS = ("documents", "answer", "answers", "evidence", "latency", "memory", "run", "history_table",
               "memory_plot", "latency_plot", "readout")  # the per-browser history (gr.State) is not returned


class SlowSession(Session):
    """A session whose answers take at least `delay_s`: long enough to queue other requests behind them."""

    delay_s = 1.5

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.answering = threading.Event()  # set once an answer is in flight

    def ask_steps(self, *args, **kwargs):  # what the page's request reads
        self.answering.set()
        time.sleep(self.delay_s)
        return (yield from super().ask_steps(*args, **kwargs))


def serve_slow(tiny_model_dir, queue_size=context.DEFAULT_QUEUE_SIZE):
    """A server on the tiny model whose answers take SlowSession.delay_s, so requests queue behind them."""
    ctx = make_context(SlowSession(), models=[str(tiny_model_dir)], default_model=str(tiny_model_dir),
                       default_profile="cpu")
    asking.ensure_loaded(ctx)
    return (ctx, *serve(ctx, queue_size))


def serve(ctx, queue_size=context.DEFAULT_QUEUE_SIZE):
    demo = build_blocks(ctx, queue_size)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True)
    return demo, url


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    with served_page(Session(), tiny_model_dir, serve) as served:
        yield served


@pytest.fixture(scope="module")
def client(server):
    return Client(server[1], verbose=False)


def ask(client, files=(), pasted="", question="What is the colour of Zorbin?", top_k=3) -> dict:
    result = client.predict([handle_file(str(f)) for f in files], pasted, question, top_k, api_name="/ask")
    assert len(result) == len(ASK_RETURNS)
    return dict(zip(ASK_RETURNS, result))


@pytest.mark.slow
def test_ask_a_long_upload_returns_the_answer_and_every_readout_field(client, server, long_document):
    ctx, _ = server
    path, example = long_document
    out = ask(client, [path], question=example.question)
    readout = out["readout"]
    assert set(readout) == READOUT_KEYS
    assert readout["question"] == example.question and readout["model"] == ctx.session.model_ref
    assert readout["profile"] == "cpu" and readout["batch_size"] == 1 and readout["backoffs"] == 0
    assert readout["tokens"] > 4096 and readout["windows"] >= 2 and readout["notices"] == []
    assert readout["documents"] == [{"name": path.name, "chars": len(example.text), "tokens": readout["tokens"],
                                     "windows": readout["windows"]}]
    assert set(readout["latency_s"]) == {"total", "extract", "tokenize", "forward", "decode"}
    assert all(value >= 0 for value in readout["latency_s"].values()) and readout["latency_s"]["forward"] > 0
    assert readout["tokens_per_s"] == pytest.approx(readout["tokens"] / readout["latency_s"]["total"])
    memory = readout["memory"]
    assert set(memory) == {"peak_allocated_bytes", "reserved_bytes", "nvml_used_bytes", "nvml_total_bytes",
                           "host_rss_bytes", "host_peak_rss_bytes", "devices", "host_baseline_rss_bytes",
                           "host_request_peak_bytes"}  # the last two: issue 39
    assert memory["peak_allocated_bytes"] is None and memory["devices"] == []  # CPU: no device numbers, no guesses
    assert memory["host_rss_bytes"] > 0 and memory["host_peak_rss_bytes"] > 0
    assert len(readout["answers"]) == 3
    for answer in readout["answers"]:
        assert set(answer) == {"text", "score", "document", "document_index", "start_char", "end_char", "confidence",
                               "location"}  # the last: issue 50
        assert example.text[answer["start_char"]:answer["end_char"]] == answer["text"]
        assert answer["document"] == path.name and 0 <= answer["score"] <= 1
        line = example.text.count("\n", 0, answer["start_char"]) + 1
        assert answer["location"] == {"document": path.name, "start_char": answer["start_char"],
                                      "end_char": answer["end_char"], "page": None, "heading": None, "line": line,
                                      "marks": [], "text": f"{path.name}, line {line:,}"}  # marks: a PDF's (62)

    assert out["answer"] == readout["answers"][0]["text"]
    assert [row[1] for row in out["answers"]["data"]] == [a["text"] for a in readout["answers"]]
    assert out["documents"]["data"] == [[path.name, len(example.text), readout["tokens"], readout["windows"]]]
    highlighted = [span["token"] for span in out["evidence"] if span["class_or_confidence"] == "answer"]
    assert highlighted == [readout["answers"][0]["text"]]
    assert [row[0] for row in out["latency"]["data"]][-2:] == ["total", "throughput"]
    run_label, profile = out["memory_plot"]["value"]["data"][-1][:2]
    assert profile == "cpu" and run_label == f"{len(out['history_table']['data']):02d}"  # bars coloured by profile


@pytest.mark.slow
def test_an_answer_from_a_pdf_carries_its_page_size_and_boxes_in_points_and_no_image(client, tmp_path):
    path = tmp_path / "survey.pdf"
    data = wrapped_matplotlib_pdf(n_pages=3, fact_page=2)
    path.write_bytes(data)
    out = ask(client, [path], question=WRAPPED_QUESTION)
    readout = out["readout"]
    assert "mark" in readout["latency_s"]
    pdf = pypdfium2.PdfDocument(data)
    for answer in readout["answers"]:
        marks = answer["location"]["marks"]
        assert [mark["page"] for mark in marks] == [answer["location"]["page"]]  # none of these spans a page break
        mark = marks[0]
        page = pdf[mark["page"] - 1]
        assert (mark["width"], mark["height"]) == pytest.approx(page.get_size(), abs=0.01)
        assert len(mark["boxes"]) == len(mark["view_boxes"]) >= 1
        for x0, y0, x1, y1 in mark["boxes"]:
            assert 0 <= x0 < x1 <= mark["width"] and 0 <= y0 < y1 <= mark["height"]
    assert "image" not in json.dumps(readout).lower()  # the API sends no picture unless asked
    pdf.close()
    note, picture = client.predict(None, api_name="/answer_page")  # asked: the top answer's page, marked
    assert f"page {readout['answers'][0]['location']['page']}" in note
    image = Image.open(picture).convert("RGB")
    mark = readout["answers"][0]["location"]["marks"][0]
    scale = image.width / mark["width"]
    left, top, right, bottom = (edge * scale for edge in mark["view_boxes"][0])
    pixel = image.getpixel((round(left + 1), round((top + bottom) / 2)))
    assert pixel[0] - pixel[2] > 60, pixel


@pytest.mark.slow
def test_ask_takes_a_not_found_threshold_and_refuses_one_outside_zero_one(client):
    """The tiny model has no rule of its own (found is null); a threshold given on /ask makes the verdict."""
    pasted, question = "The colour of Zorbin is teal. " * 20, "What is the colour of Zorbin?"
    plain = client.predict([], pasted, question, 3, api_name="/ask")[-1]
    assert plain["found"] is None and plain["no_answer"]["rule"] == "uncalibrated"
    strict = client.predict([], pasted, question, 3, "auto", "0.999", api_name="/ask")[-1]
    assert strict["found"] is False and strict["no_answer"]["source"] == "given by the user"
    assert strict["answers"] and all(a["confidence"] == "low" for a in strict["answers"])
    for outside in ("1.5", "0", 0):  # 0 is refused too, not taken for the empty field
        with pytest.raises(Exception, match="between 0 and 1"):
            client.predict([], pasted, question, 3, "auto", outside, api_name="/ask")


@pytest.mark.slow
@pytest.mark.parametrize("top_k, expected", [(None, asking.DEFAULT_TOP_K), ("2", 2), (" 3 ", 3), (2.0, 2)])
def test_top_k_none_means_the_default_and_a_numeric_string_its_number(client, top_k, expected):
    readout = client.predict([], "The colour of Zorbin is teal. " * 20, "What is the colour of Zorbin?", top_k,
                             api_name="/ask")[-1]
    assert len(readout["answers"]) == expected


def test_a_lone_surrogate_in_the_question_or_the_text_is_replaced_not_a_crash(server):
    """gradio_client cannot even send one (Python will not encode it); a raw JSON call can, as "\\ud800"."""
    ctx, url = server
    body = ('{"data": [[], "The colour of Zorbin is teal.\\ud800 ", "What is the colour\\udfff of Zorbin?", 3, '
            '"auto", null, null]}')
    request = urllib.request.Request(f"{url}gradio_api/call/ask", data=body.encode(),
                                     headers={"Content-Type": "application/json"})
    event_id = json.loads(urllib.request.urlopen(request, timeout=30).read())["event_id"]
    stream = urllib.request.urlopen(f"{url}gradio_api/call/ask/{event_id}", timeout=60).read().decode()
    assert "event: complete" in stream and "teal" in stream, stream
    assert "unexpectedly" not in stream


@pytest.mark.parametrize("files, sent", [({"path": "notes.txt"}, "a dict"), (["notes.txt"], "a list of str"),
                                         ([{"name": "notes.txt"}], "a list of dict"), (5, "an int")])
def test_files_of_the_wrong_shape_get_a_message_saying_what_was_expected(server, files, sent):
    """Through a raw JSON call, as gradio_client would refuse some of these itself; before, the reply was
    `{"error": null}`."""
    _, url = server
    body = json.dumps({"data": [files, "", "What is the colour of Zorbin?", 3, "auto", None, None]})
    request = urllib.request.Request(f"{url}gradio_api/call/ask", data=body.encode(),
                                     headers={"Content-Type": "application/json"})
    event_id = json.loads(urllib.request.urlopen(request, timeout=30).read())["event_id"]
    stream = urllib.request.urlopen(f"{url}gradio_api/call/ask/{event_id}", timeout=60).read().decode()
    assert "event: error" in stream and '"error": null' not in stream, stream
    assert "'Documents' must be a list of files uploaded with the request" in stream and "handle_file" in stream
    assert f"this call sent {sent}." in stream


@pytest.mark.slow
def test_an_upload_past_the_servers_total_is_refused_before_it_is_written_and_uploads_go_when_it_stops(
        tiny_model_dir, tmp_path):
    from longqa.serving.uploads import MIB, UploadStore
    store = UploadStore(total_bytes=MIB, evict_after_s=600)  # the first upload is not old enough to make room
    ctx = make_context(Session(), models=[str(tiny_model_dir)], default_model=str(tiny_model_dir),
                       default_profile="cpu", uploads=store)
    asking.ensure_loaded(ctx)
    demo, url = serve(ctx)
    try:
        client = Client(url, verbose=False)
        first = tmp_path / "first.txt"
        first.write_text("The colour of Zorbin is teal. " * 20_000)  # 0.6 MB
        assert "teal" in ask(client, [first])["readout"]["answers"][0]["text"]
        assert store.held_bytes() > 0.5 * MIB
        [held] = store._uploads
        second = tmp_path / "second.txt"
        second.write_text("The colour of Zorbin is blue. " * 20_000)
        boundary = "b0undary"
        body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"second.txt\"\r\n"
                f"\r\n").encode() + second.read_bytes() + f"\r\n--{boundary}--\r\n".encode()
        request = urllib.request.Request(f"{url}gradio_api/upload", data=body, headers={
            "Content-Type": f"multipart/form-data; boundary={boundary}"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 413
        assert "would pass the 1.0 MB it keeps for all visitors" in refused.value.read().decode()
        assert store.held_bytes() < MIB and Path(held).exists()
    finally:
        demo.close()
    assert not Path(held).exists()  # deleted when the server stopped


@pytest.mark.slow
def test_switch_profile_then_ask_uses_it(client, server, tiny_model_dir):
    ctx, _ = server
    *_, readout = client.predict("baseline-fp32", str(tiny_model_dir), api_name="/load_profile")
    assert readout["profile"] == "baseline-fp32" and readout["dtype"] == "float32" and readout["strategies"] == []
    assert readout["model_ref"] == str(tiny_model_dir) and readout["weight_bytes_per_device"]["cpu"] > 0
    assert set(readout) >= {"load_time_s", "weight_bytes_per_device", "device_map", "host_peak_rss_bytes",
                            "fallback_reason", "strategies", "dtype"}
    assert ask(client, pasted="The colour of Zorbin is teal.")["readout"]["profile"] == "baseline-fp32"
    *_, readout = client.predict("cpu", str(tiny_model_dir), api_name="/load_profile")
    assert readout["profile"] == "cpu" and ctx.session.profile_name == "cpu"


@pytest.mark.slow
def test_bad_input_is_a_clear_error_and_the_next_call_works(client, tmp_path):
    with pytest.raises(AppError, match="No document given"):
        ask(client)
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    with pytest.raises(AppError, match="'empty.txt' is empty"):
        ask(client, [empty])
    with pytest.raises(AppError, match="question is empty"):
        ask(client, pasted="The colour of Zorbin is teal.", question="  ")
    assert ask(client, pasted="The colour of Zorbin is teal.")["readout"]["answers"]


BAD_UPLOADS = {  # name, bytes, what the error must say
    "empty file": ("empty.txt", b"", "'empty.txt' is empty"),
    "whitespace only": ("blank.txt", b" \n\t\r\n" + "\u200b\ufeff".encode(), "contains only whitespace"),
    "binary renamed .txt": ("photo.txt", bytes(range(256)) * 3, "looks like a binary file"),
    "corrupt PDF": ("broken.pdf", b"%PDF-1.4\nthis is not really a pdf", "could not be read as a PDF"),
    "encrypted PDF": ("locked.pdf", encrypt_pdf(make_pdf("Top secret"), "secret"), "password-protected"),
    "scanned PDF": ("scan.pdf", blank_page_pdf(), "no text found"),
    # gradio's own check of the upload's type (file_types) answers first, naming the supported ones
    "unsupported extension": ("sheet.xlsx", b"PK\x03\x04", r"Invalid file type.*'\.txt', '\.md', '\.pdf'"),
    "over --max-file-mb": ("big.txt", b"The colour of Zorbin is teal. " * 100, "over the 0.0010 MB file size limit"),
    # the characters the token limit allows (8 a token) are checked before tokenizing
    "over the token limit": ("long.txt", b"The colour of Zorbin is teal. " * 30, "900 characters, over the limit of 400"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(BAD_UPLOADS))
def test_every_bad_upload_is_a_clear_error_before_model_work_and_the_next_call_works(client, server, tmp_path,
                                                                                    monkeypatch, case):
    ctx, _ = server
    name, data, message = BAD_UPLOADS[case]
    path = tmp_path / name
    path.write_bytes(data)
    monkeypatch.setattr(ctx, "max_file_bytes", 1024)  # the page's --max-file-mb, as 1 kB
    monkeypatch.setattr(ctx, "max_total_tokens", 50)  # and --max-tokens
    counting = CountingRunner(ctx.session.loaded.runner)
    monkeypatch.setattr(ctx.session.loaded, "runner", counting)
    with pytest.raises(AppError, match=message):
        ask(client, [path])
    assert counting.calls == 0, "refused before any model work"
    assert ask(client, pasted="The colour of Zorbin is teal.")["readout"]["answers"] and counting.calls


@pytest.mark.slow
@pytest.mark.parametrize("encoding", ["latin-1", "utf-16 with BOM", "utf-8 with stray latin-1"])
def test_uploads_in_other_encodings_are_read_right(client, tmp_path, encoding):
    text = "Café Grüße: the naïve façade of Zorbin is teal, déjà vu. " * 4
    data = {"latin-1": text.encode("latin-1"), "utf-16 with BOM": text.encode("utf-16"),
            "utf-8 with stray latin-1": text.encode("utf-8") + "Fin: déjà.".encode("latin-1")}[encoding]
    expected = text + ("Fin: déjà." if encoding == "utf-8 with stray latin-1" else "")
    path = tmp_path / "notes.txt"
    path.write_bytes(data)
    out = ask(client, [path])
    assert out["readout"]["documents"][0]["chars"] == len(expected)
    assert "".join(span["token"] for span in out["evidence"]) == expected  # a short document is shown whole


@pytest.mark.slow
def test_load_profile_refuses_unlisted_models_and_unavailable_profiles(client, server, tiny_model_dir):
    ctx, _ = server
    loaded = ctx.session.loaded
    with pytest.raises(AppError, match="not in the list of choices"):
        client.predict("cpu", "/etc", api_name="/load_profile")
    with pytest.raises(AppError, match="cannot run on this machine: needs a CUDA GPU"):
        client.predict("t4-16gb", str(tiny_model_dir), api_name="/load_profile")
    assert ctx.session.loaded is loaded
    assert ask(client, pasted="The colour of Zorbin is teal.")["readout"]["profile"] == "cpu"


@pytest.mark.parametrize("path", [
    "/etc/passwd",  # outside the app
    str(Path(app.__file__).resolve().parent / "README.md"),  # inside the app's own folder (gradio's working dir)
    str(SAMPLES_DIR / "harbour_records.txt"),  # a bundled sample, by path rather than through the examples
    "README.md",  # relative to the working directory
])
def test_a_file_path_that_was_not_uploaded_is_refused(server, path):
    ctx, url = server
    payload = {"data": [[{"path": path, "meta": {"_type": "gradio.FileData"}}], "", "Who?", 3, "auto", None,
                            None]}
    request = urllib.request.Request(f"{url}gradio_api/call/ask", data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"})
    event_id = json.loads(urllib.request.urlopen(request, timeout=30).read())["event_id"]
    stream = urllib.request.urlopen(f"{url}gradio_api/call/ask/{event_id}", timeout=60).read().decode()
    assert "event: error" in stream and "event: complete" not in stream
    assert "never uploaded to this server" in stream, stream
    assert "root:" not in stream and "Chiomklian" not in stream  # nothing of the file comes back


@pytest.mark.slow
def test_a_refused_path_does_not_show_the_servers_folders(tiny_model_dir):
    ctx = make_context(Session(), models=[str(tiny_model_dir)], default_model=str(tiny_model_dir),
                       default_profile="cpu")
    asking.ensure_loaded(ctx)
    demo = build_blocks(ctx)
    url, _ = cli.serve(demo, host="127.0.0.1", port=7873, block=False)  # launched as `python app.py` does
    try:
        payload = {"data": [[{"path": "README.md", "meta": {"_type": "gradio.FileData"}}], "", "Who?", 3, "auto", None,
                            None]}
        request = urllib.request.Request(f"{url}gradio_api/call/ask", data=json.dumps(payload).encode(),
                                         headers={"Content-Type": "application/json"})
        event_id = json.loads(urllib.request.urlopen(request, timeout=30).read())["event_id"]
        stream = urllib.request.urlopen(f"{url}gradio_api/call/ask/{event_id}", timeout=60).read().decode()
        assert "event: error" in stream and "never uploaded to this server" in stream, stream
        assert str(Path.cwd()) not in stream and str(Path(app.__file__).resolve().parent) not in stream, stream
        with pytest.raises(AppError, match="question is empty"):  # our own errors still say what is wrong
            Client(url, verbose=False).predict([], "The colour of Zorbin is teal.", " ", 1, api_name="/ask")
    finally:
        demo.close()


@pytest.mark.slow
def test_uploads_are_read_from_gradios_upload_folder_and_deleted_with_its_cache(tiny_model_dir, tmp_path,
                                                                               monkeypatch):
    import gradio.utils

    workdir = tmp_path / "workdir"
    workdir.mkdir()
    monkeypatch.chdir(workdir)  # whatever the app writes, it must not be next to where it was started
    read = []

    def spy(files, *args, **kwargs):
        read.extend(Path(f) for f in files)
        return read_documents(files, *args, **kwargs)

    monkeypatch.setattr(longqa.session, "read_documents", spy)  # the page reads through the session's door
    ctx = make_context(Session(), models=[str(tiny_model_dir)], default_model=str(tiny_model_dir),
                       default_profile="cpu")
    asking.ensure_loaded(ctx)
    demo, url = serve(ctx)
    assert demo.delete_cache is not None  # gradio's cleanup of the files this app received
    document = tmp_path / "report.txt"
    document.write_text("The colour of Zorbin is teal.", encoding="utf-8")
    try:
        ask(Client(url, verbose=False), [document])
        upload_folder = Path(gradio.utils.get_upload_folder()).resolve()
        assert read and all(path.resolve().is_relative_to(upload_folder) for path in read), read
        assert all(path.exists() for path in read)
        assert document.read_text(encoding="utf-8") == "The colour of Zorbin is teal."  # only read
    finally:
        demo.close()
    assert not any(path.exists() for path in read), "gradio's cache cleanup deletes the uploads"
    assert list(workdir.iterdir()) == []


@pytest.mark.slow
def test_a_profile_switch_waits_for_the_answer_in_flight(tiny_model_dir):
    ctx, demo, url = serve_slow(tiny_model_dir)
    try:
        client = Client(url, verbose=False)
        answer_job = client.submit([], "The colour of Zorbin is teal.", "What is the colour of Zorbin?", 1,
                                   api_name="/ask")
        assert ctx.session.answering.wait(timeout=60), "the answer never started"
        load_job = client.submit("baseline-fp32", str(tiny_model_dir), api_name="/load_profile")
        readout = answer_job.result(timeout=60)[-1]
        assert readout["profile"] == "cpu", "the reload must not run under the answer"
        assert load_job.result(timeout=60)[-1]["profile"] == "baseline-fp32"
    finally:
        demo.close()


@pytest.mark.slow
def test_the_queue_is_bounded_and_refuses_the_overflow_clearly(tiny_model_dir):
    ctx, demo, url = serve_slow(tiny_model_dir, queue_size=2)
    outcomes: list[str] = []

    def call():
        try:
            Client(url, verbose=False).predict([], "The colour of Zorbin is teal.", "What is the colour of Zorbin?",
                                               1, api_name="/ask")
            outcomes.append("answered")
        except Exception as exc:  # the overflow's error, whatever class the client gives it
            outcomes.append(f"refused: {exc}")

    try:
        threads = [threading.Thread(target=call) for _ in range(6)]
        for thread in threads:
            thread.start()
            time.sleep(0.1)
        for thread in threads:
            thread.join(timeout=120)
        refused = [o for o in outcomes if o.startswith("refused")]
        assert len(outcomes) == 6 and refused and outcomes.count("answered") >= 2
        assert all("queue is full" in o.lower() and "try again" in o.lower() for o in refused), refused
        # and the app still answers afterwards
        Client(url, verbose=False).predict([], "The colour of Zorbin is teal.", "What is it?", 1, api_name="/ask")
    finally:
        demo.close()


@pytest.mark.slow
def test_a_cancelled_request_leaves_the_model_usable(tiny_model_dir):
    ctx, demo, url = serve_slow(tiny_model_dir)
    try:
        job = Client(url, verbose=False).submit([], "The colour of Zorbin is teal.", "What is the colour of Zorbin?",
                                                1, api_name="/ask")
        assert ctx.session.answering.wait(30)
        queued = Client(url, verbose=False).submit([], "The colour of Velka is red.", "What is the colour of Velka?",
                                                   1, api_name="/ask")
        time.sleep(0.3)
        job.cancel()  # what the page's Stop button sends: /cancel for the event in flight
        deadline = time.monotonic() + 10
        while not job.done() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert job.status().code == Status.CANCELLED
        # the request queued behind it is answered (not lost), and so is the next one
        assert queued.result(timeout=60)[-1]["question"] == "What is the colour of Velka?"
        readout = Client(url, verbose=False).predict([], "The colour of Zorbin is teal.", "What is it?", 1,
                                                     api_name="/ask")[-1]
        assert readout["answers"] and readout["question"] == "What is it?" and ctx.session.loaded is not None
    finally:
        demo.close()


@pytest.mark.slow
def test_a_client_that_disconnects_mid_answer_leaves_the_model_usable(tiny_model_dir):
    ctx, demo, url = serve_slow(tiny_model_dir)
    client_code = (
        "import sys, time\n"
        "from gradio_client import Client\n"
        "Client(sys.argv[1], verbose=False).submit([], 'The colour of Zorbin is teal.', "
        "'What is the colour of Zorbin?', 1, api_name='/ask')\n"
        "time.sleep(120)\n")
    process = subprocess.Popen([sys.executable, "-c", client_code, url])
    try:
        assert ctx.session.answering.wait(60), "the client's request never started"
        process.kill()  # the client vanishes while its answer is being computed
        process.wait(timeout=30)
        readout = Client(url, verbose=False).predict([], "The colour of Velka is red.", "What is the colour of Velka?",
                                                     1, api_name="/ask")[-1]
        assert readout["question"] == "What is the colour of Velka?" and readout["answers"]
        assert ctx.session.loaded is not None and ctx.session.profile_name == "cpu"
    finally:
        if process.poll() is None:
            process.kill()
        demo.close()


@pytest.mark.slow
def test_ask_streams_the_best_answer_so_far_then_the_same_final_output(client):
    """Issue 50 item 2: /ask through gradio_client streams each best answer so far as a job's outputs (the readout
    `{"provisional": true, ...}`), then the output it always returned."""
    pasted = " ".join(f"Sentence {n} tells of the colour of Zorbin and of nothing else here." for n in range(900))
    job = client.submit([], pasted, "What is the colour of Zorbin?", 1, "full", api_name="/ask")
    final = job.result()
    outputs = job.outputs()
    provisional = [output[-1] for output in outputs[:-1] if output[-1] and output[-1].get("provisional")]
    assert len(provisional) >= 2, [output[-1] for output in outputs]
    reads = [p["windows_read"] for p in provisional]
    assert reads == sorted(reads) and all(p["windows_total"] == final[-1]["windows"] for p in provisional)
    assert all(set(p) == {"provisional", "answer", "windows_read", "windows_total", "plausible"} for p in provisional)
    assert len(final) == len(ASK_RETURNS) and set(final[-1]) == READOUT_KEYS and outputs[-1] == final
    assert final[1] == final[-1]["answers"][0]["text"]  # the answer itself, no longer a best-so-far update


# ------------------------------------------------------------------------------------ issue 48: at the door
def join(url: str, demo, api_name: str, data: list, session_hash: str) -> int:
    """A raw `queue/join` of the event named `api_name` for `session_hash`, as a hostile client posts it: the reply's
    status."""
    fn_index = next(i for i, fn in demo.fns.items() if fn.api_name == api_name)
    body = {"data": data, "fn_index": fn_index, "session_hash": session_hash, "event_data": None, "trigger_id": None}
    return httpx.post(f"{url}gradio_api/queue/join", json=body, timeout=30).status_code


def completed(url: str, session_hash: str, expected: int, timeout_s: float = 60.0) -> list[dict]:
    """The `process_completed` messages of `session_hash`'s events, read from its stream until `expected` came."""
    messages = []
    with httpx.stream("GET", f"{url}gradio_api/queue/data", params={"session_hash": session_hash},
                      timeout=timeout_s) as stream:
        for line in stream.iter_lines():
            if line.startswith("data:"):
                message = json.loads(line[5:])
                if message.get("msg") == "process_completed":
                    messages.append(message)
                if len(messages) >= expected or message.get("msg") == "close_stream":
                    break
    return messages


def refusal(message: dict) -> str | None:
    return None if message.get("success") else str((message.get("output") or {}).get("error"))


@pytest.mark.slow
def test_a_flood_from_one_session_is_refused_at_once_while_another_visitor_is_served(tiny_model_dir):
    """Three threads posting /plan and /load_profile joins with one session hash while an answer runs: past its
    share the session is refused with the lane's words, and another visitor never meets a full queue."""
    ctx, demo, url = serve_slow(tiny_model_dir, queue_size=8)
    statuses, stop = [], threading.Event()

    def flood(worker: int) -> None:
        while not stop.is_set():
            profile = ("cpu", "baseline-fp32")[len(statuses) % 2]
            statuses.append(join(url, demo, "load_profile", [profile, str(tiny_model_dir), [], None], "flood"))
            statuses.append(join(url, demo, "plan", [str(tiny_model_dir), "T4", None, 1, None, None, None, False, None],
                                 "flood"))
            time.sleep(0.02)

    try:
        answer = Client(url, verbose=False).submit([], "The colour of Zorbin is teal.", "What?", 1, api_name="/ask")
        assert ctx.session.answering.wait(30)
        threads = [threading.Thread(target=flood, args=(worker,), daemon=True) for worker in range(3)]
        for thread in threads:
            thread.start()
        began = time.monotonic()
        other = Client(url, verbose=False).predict([], "The colour of Velka is red.", "What is the colour of Velka?",
                                                    1, api_name="/ask")[-1]
        other_s = time.monotonic() - began
        stop.set()
        for thread in threads:
            thread.join(10)
        answer.result(timeout=60)
        bound = crowd_check.TEST_MARGIN * crowd_check.VISITOR_WAIT_TARGET_S  # the target is the crowd checks'
        assert other["question"] == "What is the colour of Velka?" and other_s < bound, other_s
        assert statuses and set(statuses) == {200}, "a join was refused: the queue filled"
        refused = [refusal(m) for m in completed(url, "flood", len(statuses) // 2) if refusal(m)]
        assert refused and all("You already have" in text for text in refused), refused[:3]
    finally:
        stop.set()
        demo.close()


@pytest.mark.slow
def test_no_event_answers_500_to_raw_calls_of_any_shape_and_long_values_are_cut(server):
    """Every event, private ones included, called raw on gradio's direct route with values of every wrong shape:
    a queued event refused there (it runs only through the queue), an unqueued one a one-line told refusal (400) or
    an answer, never a 500; no message echoes a long value whole."""
    ctx, url = server
    # one client for the hundreds of calls: httpx.post builds a client, and its SSL context, for each (5x the time)
    with httpx.Client(timeout=60) as http:
        info = http.get(f"{url}config").json()
        for dependency in info["dependencies"]:
            fn_index = dependency["id"]
            for value in (None, 5, [1], {"a": 1}, "x" * 100_000):
                data = [value] * len(dependency["inputs"])
                reply = http.post(f"{url}gradio_api/run/predict", json={"fn_index": fn_index, "data": data,
                                                                        "session_hash": "raw"})
                if dependency["queue"]:
                    assert reply.status_code == 404 and "join the queue" in reply.text, reply.text[:300]
                    continue
                assert reply.status_code in (200, 400), (dependency.get("api_name"), repr(value)[:10], reply.text[:300])
                if reply.status_code == 400:
                    error = reply.json()["error"]
                    assert error and "\n" not in error.strip() and len(error) < 1000, error[:300]


@pytest.mark.slow
def test_reads_never_run_on_gradios_direct_route_and_an_unqueued_event_tells_a_wrong_call_with_400(server):
    """`/gradio_api/run/ask` (a read outside the queue: no visitor's share, never abandoned; issue 61) is refused in
    words, the page's own unqueued events still answer there, and one called with a value too few is told, 400."""
    _, url = server
    reply = httpx.post(f"{url}gradio_api/run/ask", json={"data": [None, "Some text.", "What?", 3, "auto", ""]},
                       timeout=60)
    assert reply.status_code == 404 and "join the queue" in reply.json()["detail"], reply.text[:300]
    info = httpx.get(f"{url}config", timeout=30).json()
    unqueued = next(d for d in info["dependencies"] if d["api_name"] == "new_documents")
    reply = httpx.post(f"{url}gradio_api/run/predict", json={"fn_index": unqueued["id"], "data": [None],
                                                             "session_hash": "raw"}, timeout=60)
    assert reply.status_code == 400 and "values" in reply.json()["error"], reply.text[:300]
    assert hardening.told_error(b'{"error": "told"}') and not hardening.told_error(b"Internal Server Error")
    assert not hardening.told_error(b'{"error": null}')


@pytest.mark.slow
def test_plan_with_wrong_types_names_the_field_and_cuts_long_names(client):
    for kwargs, field in (({"gpu": 5}, "gpu"), ({"gpu": [1]}, "gpu"), ({"gpu_memory_gb": "lots"}, "gpu_memory_gb"),
                          ({"cpu_bf16": "yes"}, "cpu_bf16")):
        with pytest.raises(AppError, match=f"'{field}' must be"):
            client.predict(model="demo", api_name="/plan", **kwargs)
    with pytest.raises(AppError) as refused:
        client.predict(model="demo", gpu="x" * 1_000_000, api_name="/plan")
    assert "'gpu' is 1,000,000 characters long" in str(refused.value) and len(str(refused.value)) < 300
