"""Time to a first answer (`python -m bench first-answer`): one model on one profile, a PDF of `--pages`
pages (100 pages: about 13 windows of 4,096 tokens) read whole, guided in whole windows, and guided in windows sized
to the ranked passage (`EngineSettings.passage_window_tokens`), in one process, the guided reads alternating: the
seconds a window, the first candidate (the first batch's end, heard through `on_window_progress`), the end, and what
the plan expected the read to take before it began (issue 50 items 3 and 4). docs/reading.md keeps the numbers.

It measures (`measure`); `bench.first_answer_report` makes the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

import torch

from bench.first_answer_report import markdown
from bench.measured import write_measurement
from longqa.bench.runner import machine_info
from bench.streaming import pdf_bytes
from evals import eval_task
from longqa.loader import load_model
from longqa.session import read_documents
from longqa_core import answering
from longqa_core.documents import Document
from longqa_core.plan import plan_request
from strategies.hardware import detect_hardware

PAGES = 100
PAGE_WORDS = 280  # about 1,600 characters and 520 tokens a page: 100 pages fill about 13 windows of 4,096
SIZED_TOKENS = 1_024
DOCUMENT_SEED = 50


def make_pdf(pages: int) -> tuple[bytes, eval_task.EvalDocument]:
    """A PDF of `pages` pages of the independent evaluation generator's prose, with its one asked fact."""
    item = eval_task.make_document(DOCUMENT_SEED, pages * PAGE_WORDS)
    words = item.text.split(" ")
    per_page = -(-len(words) // pages)
    return pdf_bytes([" ".join(words[i: i + per_page]) for i in range(0, len(words), per_page)]), item


def timed_read(loaded, documents, question: str, mode: str, settings, weak_answer_score: float | None) -> dict:
    """Plan and answer once: when the first batch ended, the end, and what the plan expected."""
    first: list[float] = []
    began = time.perf_counter()

    def heard(progress) -> None:
        if progress.windows_done > 0 and not first:
            first.append(time.perf_counter() - began)
    plan = plan_request(loaded.tokenizer, documents, question, settings, mode, batch_state=loaded.batch_state,
                        weak_answer_score=weak_answer_score)
    planned_s = time.perf_counter() - began
    result = answering.answer_plan(loaded.runner, loaded.tokenizer, plan, batch_state=loaded.batch_state,
                                   on_window_progress=heard)
    total_s = time.perf_counter() - began
    best = result.answers[0] if result.answers else None
    read = result.reading
    return {"mode": mode, "passage_window_tokens": settings.passage_window_tokens, "resolved_mode": read.mode,
            "windows_read": read.windows_read, "windows_total": read.windows_total, "narrowed": read.narrowed,
            "widened": read.widened, "window_passes": result.forward.windows, "window_tokens": result.window_tokens,
            "forward_tokens": result.forward.tokens, "forward_s": result.latency_s.get("forward"),
            "seconds_per_window": (result.forward.seconds / result.forward.windows if result.forward.windows
                                   else None),
            "planned_s": planned_s, "first_candidate_s": first[0] if first else None, "total_s": total_s,
            "expected_s": read.expected_s, "full_read_expected_s": plan.full_read_s,
            "guided_read_expected_s": plan.guided_read_s,
            "answer": best.text if best else None, "answer_start": best.start_char if best else None,
            "score": best.score if best else None}


def measure(model: str, profile: str, pages: int, sized_tokens: int, rounds: int) -> dict:
    machine = machine_info(detect_hardware())  # the load before the reads
    loaded = load_model(model, profile)
    pdf, item = make_pdf(pages)
    documents, extract_s = read_documents([(f"report-{pages}-pages.pdf", pdf)])
    weak = 0.0 if model.startswith("arch:") else None  # random weights: their scores say nothing (as reading_sweep)
    whole = dataclasses.replace(loaded.settings, top_k=1, passage_window_tokens=0)  # sized: the default (issue 60)
    sized = dataclasses.replace(whole, passage_window_tokens=sized_tokens)
    warm = eval_task.make_document(1, 400)  # the throughput every plan's estimate reads, and the first call's costs
    answering.answer(loaded.runner, loaded.tokenizer, [Document("warm.txt", warm.text)], warm.question,
                     whole, batch_state=loaded.batch_state)
    rows = []
    for round_index in range(rounds):  # the two guided reads alternate, so a changing load falls on both
        pair = [("guided", whole), ("guided", sized)]
        for mode, settings in (pair if round_index % 2 == 0 else pair[::-1]):
            rows.append({"round": round_index, **timed_read(loaded, documents, item.question, mode, settings, weak)})
    rows.append({"round": 0, **timed_read(loaded, documents, item.question, "full", whole, weak)})
    return {"model": model, "profile": profile, "pages": pages, "chars": documents[0].n_chars,
            "extract_s": extract_s, "threads": torch.get_num_threads(), "question": item.question,
            "answer": item.answer, "machine": machine,
            "load_average_end": list(os.getloadavg()), "weak_answer_score": weak, "rows": rows}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench first-answer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="arch:large")
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--pages", type=int, default=PAGES)
    parser.add_argument("--sized-tokens", type=int, default=SIZED_TOKENS,
                        help="the sized guided read's windows, in tokens (default 1024)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the two guided reads (default 2)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--out", default="docs/results/first-answer")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    result = measure(args.model, args.profile, args.pages, args.sized_tokens, args.rounds)
    result["command"] = "python -m bench first-answer " + " ".join(argv)
    write_measurement(args.out, "first-answer", result, markdown(result))
    return 0
