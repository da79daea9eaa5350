"""The best answer so far, streamed (issue 50): an answer's handler run in a worker thread while a generator handler
yields each best answer the engine reports after a batch of windows, labelled provisional, then the answer itself.
Not the answer nor Stop (`page.asking`).

The engine hears of the page's listener through a context variable, set in the worker thread's copy of gradio's
context: the handlers' signatures (gradio's inputs) and the GPU function's picklable arguments stay as they are. A
ZeroGPU worker runs in another process: there the GPU function's listener is its own queue, and it yields each best
answer so far back to the page's listener (`page.asking.answer_on_gpu`, `from_gpu_worker`).
"""

from __future__ import annotations

import contextvars
import functools
import queue
import threading
from typing import Callable, Iterator

import gradio as gr
import pandas as pd

from longqa.backend import Provisional
from longqa_core.documents import Document
from longqa_core.errors import Cancelled
from page import format as fmt

CandidateListener = Callable[[Provisional, list[Document]], None]
# Who hears the best answer so far of the answer running in this context (None: nobody, nothing decoded for it).
LISTENER: contextvars.ContextVar[CandidateListener | None] = contextvars.ContextVar("candidate_listener",
                                                                                     default=None)


def provisional_outputs(best: Provisional, documents: list[Document]) -> dict:
    """The answer area and the top answers while a read goes on: the best answer so far, its score and place, in
    its passage, labelled provisional; the readout says so for API clients (`Provisional.to_json`)."""
    answer = best.answer
    if not best.plausible:  # under the model's not-found threshold: no span in large type, none marked
        return {"answer": gr.update(value="", label=fmt.implausible_label(best.windows_read, best.windows_total)),
                "answers": pd.DataFrame(fmt.provisional_rows(best, fmt.UNDER_THE_BAR), columns=fmt.ANSWER_HEADERS),
                "evidence": None, "readout": best.to_json()}
    return {"answer": gr.update(value=answer.text, label=fmt.answer_label(fmt.provisional_label(best))),
            "answers": pd.DataFrame(fmt.provisional_rows(best), columns=fmt.ANSWER_HEADERS),
            "evidence": fmt.evidence(documents[answer.document_index].text, answer.start_char, answer.end_char),
            "readout": best.to_json()}


def streaming(handler: Callable[..., dict]) -> Callable[..., Iterator[dict]]:
    """`handler` (an answer through the page, values by name) as a generator handler: it runs in a worker thread, in
    a copy of gradio's context (progress, warnings and the abandonment check work there as in the handler's own
    thread), and each best answer so far comes out as `provisional_outputs` (only the latest, when several came
    while the page was sent one); then the handler's outputs, or its error raised here. A Stop's best answer
    (`Cancelled.best`) is shown before its error is raised. Same signature and hints."""
    @functools.wraps(handler)
    def streamed(*args, **kwargs):
        documents = None  # the documents the candidates come from
        try:
            for kind, value in heard_while(lambda: handler(*args, **kwargs), "answer"):
                if kind == "candidate":
                    best, documents = value
                    yield provisional_outputs(best, documents)
                else:
                    yield value
        except BaseException as exc:
            best = exc.__cause__.best if isinstance(exc.__cause__, Cancelled) else None
            if best is not None and documents is not None:
                yield provisional_outputs(best, documents)
            raise

    return streamed


def heard_while(work: Callable[[], object], name: str) -> Iterator[tuple[str, object]]:
    """Runs `work()` in a thread of its own (`name`), in a copy of this context (gradio's progress, warnings and
    abandonment check work there as here), with the page's listener set to hear it: yields ("candidate", (best,
    documents)) for each best answer so far (only the latest, when several came while the caller was busy), then
    ("done", what `work` returned); its error is raised here, in the caller's thread."""
    updates: queue.SimpleQueue = queue.SimpleQueue()

    def run() -> None:
        LISTENER.set(lambda best, documents: updates.put(("candidate", (best, documents))))
        try:
            updates.put(("done", work()))
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            updates.put(("error", exc))

    threading.Thread(target=contextvars.copy_context().run, args=(run,), name=name, daemon=True).start()
    while True:
        kind, value = next_update(updates)
        if kind == "error":
            raise value
        yield kind, value
        if kind == "done":
            return


def next_update(updates: queue.SimpleQueue) -> tuple[str, object]:
    """The next update to show: waits for one, then skips candidates that a later update replaces."""
    kind, value = updates.get()
    while kind == "candidate":
        try:
            kind, value = updates.get_nowait()
        except queue.Empty:
            break
        if kind != "candidate":
            break
    return kind, value
