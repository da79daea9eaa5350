"""The question and answer panels: the documents, the question, Ask and Stop, the answer area and every readout one
answer updates, with their events. Not what asking does (`page.asking`) nor the other panels.
"""

from __future__ import annotations

import gradio as gr
from gradio.blocks import Block

from longqa.session import SAMPLES_DIR, sample_examples
from longqa_core.files import SUPPORTED_EXTENSIONS
from longqa_core.gpu_devices import gpu_snapshot
from longqa_core.reading import DEFAULT_READING, READING_MODES
from page import format as fmt
from page import words
from page.asking import (DEFAULT_TOP_K, answered_before, ask, ask_in_full, let_go_of_documents, new_documents,
                         no_question_shown, noting_outcome, press_stop, show_answer_page,
                         show_outcome, start_asking)
from page.context import REQUEST_CONCURRENCY, AppContext, request_workers
from page.events import bind, listen
from page.hardening import LATER_INPUT, accept_counts_as_text
from page.history_panel import build_history_panel, recolour_after
from page.page_view import build_page_room, room_after_answer
from page.preview import preview_with_status
from page.tables import ReadoutTable

GPU_REFRESH_S = 2.0
# The visitor's wait, timed in the browser: each way of asking marks its click (or Enter), and when the answer's
# outputs are on the screen the seconds since go to `show_wait` with the readout's stages and queue (not the whole
# readout: it can be large).
MARK_ASKED = "() => { window.longqaAskedAt = performance.now(); }"
MEASURE_WAIT = """(waited, readout) => [
  typeof window.longqaAskedAt === "number" ? (performance.now() - window.longqaAskedAt) / 1000 : null,
  {latency_s: readout?.latency_s ?? null, queue: readout?.queue ?? null}]"""


def example_rows(per_file: int = 2) -> list[list]:
    rows, seen = [], {}
    for example in sample_examples():
        seen[example["file"]] = seen.get(example["file"], 0) + 1
        if seen[example["file"]] <= per_file:
            rows.append([[str(SAMPLES_DIR / example["file"])], "", example["question"], DEFAULT_TOP_K])
    return rows


def first_example() -> dict:
    """The bundled example the introduction offers to try: its document and question."""
    return sample_examples()[0]


def fill_first_example() -> dict:
    """The introduction's example clicked: its bundled document and question in the inputs, pasted text cleared."""
    example = first_example()
    return {"files": [str(SAMPLES_DIR / example["file"])], "pasted": "", "question": example["question"]}


# What `new_documents` needs of the pasted text is whether there is any: the browser sends that, not the text (a
# pasted book would otherwise go to the server at every key pressed in the box).
PASTED_AS_FLAG = "(files, pasted) => [files, pasted && pasted.trim() ? 'text' : '']"


def show_wait(waited_s, parts) -> str:
    """The visitor's wait beside the engine's stages (`fmt.wait_line`), from the browser's time and the readout's
    parts (MEASURE_WAIT)."""
    parts = parts if isinstance(parts, dict) else {}
    return fmt.wait_line(waited_s if isinstance(waited_s, (int, float)) else None, parts.get("latency_s"),
                         parts.get("queue"))


def refresh_gpu_gauge():
    return fmt.gpu_gauge(gpu_snapshot())


def build_question_panel(ctx: AppContext) -> dict[str, Block]:
    """Side by side (one above the other on a phone): the documents, the question, Ask and Stop, and the reading
    options; and the answer area right beside them, on the first screen: whether the answer was found, the answer
    with a copy button, its passage with the answer highlighted, the downloads, and the documents' preview
    (updated as they change). The answer panel wires Ask and Stop."""
    with gr.Row(elem_id="ask-row"):
        with gr.Column(min_width=320):
            files = gr.File(file_count="multiple", file_types=list(SUPPORTED_EXTENSIONS), type="filepath",
                            label="Documents", elem_id="documents", height=84)
            # one line until something is pasted (it grows to max_lines): Ask stays on a laptop's first screen
            pasted = gr.Textbox(label="Or paste text", lines=1, max_lines=8, placeholder="Paste a document here")
            question = gr.Textbox(label="Question",  # no `info`: it would join the label, which tests select by
                                  placeholder="What is the frequency of Chiomklian Oustklaeth? (Enter asks)")
            # beside the box when Ask finds it empty (the page stays where the visitor types)
            question_note = gr.Markdown("", visible=False, elem_id="question-note")
            with gr.Row():
                ask_btn = gr.Button("Ask", variant="primary", min_width=90)
                full_btn = gr.Button("Read the whole document", min_width=90, scale=2)  # its words on one line
                stop_btn = gr.Button("Stop", variant="stop", min_width=90, interactive=False)  # while a read runs
            with gr.Accordion("Reading options", open=False):
                top_k = accept_counts_as_text(gr.Slider(1, 10, value=DEFAULT_TOP_K, step=1, label="Top-k answers",
                                                        info=words.TOP_K_INFO))
                reading = gr.Radio(list(READING_MODES), value=DEFAULT_READING, label="Reading",
                                   info="auto: guided past a few windows; guided: read where the question's words "
                                        "point, more while the answer is weak; full: every window")
                no_answer_below = gr.Textbox("", label="Not-found threshold (optional)", placeholder="e.g. 0.001",
                                             elem_id=LATER_INPUT,
                                             info="say 'not found' when the best answer scores under this (between "
                                                  "0 and 1); empty: the model's own rule, where it has one")
        with gr.Column(min_width=320):
            status = gr.Markdown(fmt.NO_ANSWER_YET, elem_id="answer-status")
            answer_box = gr.Textbox(label=fmt.answer_label(), interactive=False, elem_id="best-answer",
                                    buttons=["copy"])
            evidence_box = gr.HighlightedText(label=fmt.EVIDENCE_LABEL, elem_id="evidence",
                                              color_map={"answer": "yellow"}, show_legend=False,
                                              show_inline_category=False)
            room = build_page_room()
            with gr.Row():
                download_json = gr.DownloadButton("Readout (JSON)", visible=False, size="sm", min_width=140,
                                                  elem_id="download-readout")
                download_csv = gr.DownloadButton("History (CSV)", visible=False, size="sm", min_width=140,
                                                 elem_id="download-history")
            doc_table = ReadoutTable(headers=fmt.DOCUMENT_HEADERS, label="Documents read")
    rows = example_rows()
    examples = gr.Examples(rows, inputs=[files, pasted, question, top_k], label=words.EXAMPLES_LABEL,
                           example_labels=[row[2] for row in rows],  # the questions: a list that fits a phone
                           api_visibility="private")

    # pasted text previewed when the box is left; files after `new_documents` (build_answer_panel), so that what is
    # left out is said after "press Ask", never before it
    listen(pasted.blur, bind(preview_with_status, ctx), inputs=[files, pasted, question],
           outputs={"documents": doc_table, "status": status}, api_visibility="private")
    return {"files": files, "pasted": pasted, "question": question, "top_k": top_k, "reading": reading,
            "no_answer_below": no_answer_below, "ask": ask_btn, "full": full_btn, "stop": stop_btn,
            "documents": doc_table, "examples": examples, "status": status, "answer": answer_box,
            "question_note": question_note,
            "evidence": evidence_box, "download_json": download_json, "download_csv": download_csv, **room}


def wire_document_claims(ctx: AppContext, demo: gr.Blocks) -> None:
    """The uploads in this page's Documents stay on the server while the page holds them: claimed at each change of
    the documents and each ask (`page.asking.read_at_door`), let go when the page closes."""
    demo.unload(bind(let_go_of_documents, ctx))


def build_answer_panel(ctx: AppContext, question: dict[str, Block], seen: gr.State,
                       intro: dict[str, Block], reloads: list = ()) -> dict[str, Block]:
    """The top answers, latency, memory and run readouts, the live GPU gauge, the run history, and the full readout:
    all that one answer updates with the answer area, so Ask, Stop, the examples and the introduction's example
    are wired here. Each way of asking first clears the previous answer, and after it the answer area says how it
    ended; after one of the `reloads`, that the answer shown came from the model loaded before. Returns the
    history's components (the compare panel adds runs to it)."""
    has_gpu = bool(ctx.hardware.usable_gpus)
    with gr.Row():
        with gr.Column(min_width=320, scale=3):
            answers_table = ReadoutTable(headers=fmt.ANSWER_HEADERS, label="Top answers")
        with gr.Column(min_width=320, scale=2):
            run_table = ReadoutTable(headers=fmt.RUN_HEADERS, label="Run")
    with gr.Row():
        with gr.Column(min_width=320, scale=2):
            latency_table = ReadoutTable(headers=fmt.LATENCY_HEADERS, label="Latency by stage")
            wait = gr.Markdown(elem_id="visitor-wait")
            waited = gr.Number(visible=False)  # the browser's time from click to answer, for `show_wait`
        with gr.Column(min_width=320, scale=3):
            memory_table = ReadoutTable(headers=fmt.MEMORY_HEADERS, label="Memory")
    gauge = gr.Label(label="Live GPU memory (NVML)", visible=has_gpu)
    timer = gr.Timer(GPU_REFRESH_S, active=has_gpu)
    history = build_history_panel()
    readout_json = gr.JSON(label="Full readout (JSON)", elem_id="readout")
    for reload in reloads:
        listen(reload.success, bind(answered_before, ctx), inputs=readout_json, outputs={"status": question["status"]},
               queue=False, show_progress="hidden", api_visibility="private")

    timer.tick(refresh_gpu_gauge, outputs=gauge, concurrency_limit=None, show_progress="hidden",
               api_visibility="private")
    # The not-found threshold comes last: a call made before it was added sends one value less (`hardening.harden`
    # pads it).
    inputs = [question["files"], question["pasted"], question["question"], question["top_k"], question["reading"],
              history["history"], seen, question["no_answer_below"]]
    in_full = [question["files"], question["pasted"], question["question"], question["top_k"], history["history"],
               seen, question["no_answer_below"]]
    outputs = {"documents": question["documents"], "answer": question["answer"], "answers": answers_table,
               "evidence": question["evidence"], "latency": latency_table, "memory": memory_table, "run": run_table,
               **history, "seen": seen,
               "readout": readout_json}  # last: API clients take the readout as `*_, readout = predict(...)`
    room = {name: question[name] for name in ("page_room", "page_pick", "page_note", "page_image")}
    cleared = {"question_note": question["question_note"], **room, "status": question["status"],
               "answer": question["answer"], "evidence": question["evidence"], "answers": answers_table, "latency": latency_table, "wait": wait, "memory": memory_table,
               "run": run_table, "readout": readout_json, "download_json": question["download_json"],
               "download_csv": question["download_csv"]}
    ended = {**{name: question[name] for name in ("status", "evidence", "download_json", "download_csv", "answer",
                                                  "question_note")},
             "answers": answers_table, "stop": question["stop"]}
    # Every event of the requests group names the same limit: gradio lowers a group to its smallest one. Progress
    # shows over the line above the answer, not over the answer box, where the best answer so far shows meanwhile.
    request = dict(concurrency_id=REQUEST_CONCURRENCY, concurrency_limit=request_workers(ctx),
                   show_progress_on=[question["status"]])

    def asks_after(trigger, handler, handler_inputs, **event):
        """`trigger` clears the answer area, then asks with `handler` (streaming the best answer so far), then says
        how it ended and how long the visitor waited (timed in the browser from the trigger to the answer's outputs
        on the screen)."""
        trigger(None, js=MARK_ASKED, queue=False, api_visibility="private")
        clearing = listen(trigger, start_asking, inputs=[question["files"], question["pasted"], question["question"]],
                          outputs={**cleared, "stop": question["stop"]}, queue=False, show_progress="hidden",
                          api_visibility="private")
        listen(clearing.failure, no_question_shown, outputs={name: question[name] for name in
                                                             ("status", "question_note")},
               queue=False, show_progress="hidden", api_visibility="private")
        asking = listen(clearing.success, noting_outcome(ctx, bind(handler, ctx), outputs),
                        inputs=handler_inputs, outputs=outputs, **request, **event)
        asking.then(show_wait, js=MEASURE_WAIT, inputs=[waited, readout_json], outputs=wait, queue=False,
                    show_progress="hidden", api_visibility="private")
        listen(asking.success, room_after_answer, outputs=room, queue=False, show_progress="hidden",
               api_visibility="private")
        for outcome in (asking.success, asking.failure):  # `then` alone would not run after an error
            listen(outcome, bind(show_outcome, ctx), outputs=ended, queue=False, show_progress="hidden",
                   api_visibility="private")
        return asking

    asked = [asks_after(question["ask"].click, ask, inputs, api_name="ask"),
             asks_after(question["question"].submit, ask, inputs, api_visibility="private"),
             asks_after(question["full"].click, ask_in_full, in_full, api_visibility="private"),
             asks_after(question["examples"].load_input_event.then, ask, inputs, api_visibility="private")]
    filling = listen(intro["try"].click, fill_first_example, outputs={name: question[name] for name in
                                                                      ("files", "pasted", "question")},
                     queue=False, api_visibility="private")
    asked.append(asks_after(filling.then, ask, inputs, api_visibility="private"))
    recolour_after(history, *asked)
    question["stop"].click(bind(press_stop, ctx), queue=False, api_visibility="private")
    # The answer's page is drawn when the visitor opens the room, or picks another answer's page in it; an API
    # client asks for it by name after its answer (`/answer_page`, the pick's choice or none for the top answer's).
    for trigger, api in ((room["page_room"].expand, dict(api_name="answer_page")),
                         (room["page_pick"].input, dict(api_visibility="private"))):
        listen(trigger, bind(show_answer_page, ctx), inputs=room["page_pick"],
               outputs={"page_note": room["page_note"], "page_image": room["page_image"]},
               concurrency_id=REQUEST_CONCURRENCY, concurrency_limit=request_workers(ctx), **api)
    # New documents: the answer to the old ones goes (the examples and the introduction set them, and ask, above).
    for trigger, is_file in ((question["files"].upload, True), (question["files"].clear, True),
                             (question["files"].delete, True), (question["pasted"].input, False)):
        changed = listen(trigger, new_documents, inputs=[question["files"], question["pasted"]], outputs=cleared,
                         js=PASTED_AS_FLAG, queue=False, show_progress="hidden", api_visibility="private")
        if is_file:  # the documents' preview, and any file left out, after it
            listen(changed.then, bind(preview_with_status, ctx),
                   inputs=[question["files"], question["pasted"], question["question"]],
                   outputs={"documents": question["documents"], "status": question["status"]},
                   api_visibility="private")
    return history
