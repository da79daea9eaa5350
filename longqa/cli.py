"""Command line: `python -m longqa ask|compare|profiles|plan|bench` (also the `longqa` console script).

Parses arguments, calls the session and the profiles, prints. Errors become one line on stderr and a non-zero
exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import warnings
from pathlib import Path

from transformers.utils import logging as hf_logging

from longqa.arguments import non_negative_int, positive_int
from longqa.bench import runner as bench_module
from longqa.compare import Comparison, choices_from, compare_profiles
from longqa.gpu_plan import MachinePlan, plan_request
from longqa.models import DEFAULT_MODEL, model_config
from longqa.request import run_request
from longqa.session import ReadRequest, Session, page_image, read_documents
from longqa_core.documents import format_location
from longqa_core.errors import LongQAError
from longqa_core.limits import PASSAGE_WINDOW_TOKENS, validate_request
from longqa_core.reading import DEFAULT_READING, READING_MODES
from strategies.auto import resolve_auto
from strategies.gpu_catalog import GPU_MODELS
from strategies.hardware import detect_hardware
from strategies.memory_planner import plan_profile
from strategies.profiles import PROFILES, describe_profiles

EXIT_USAGE = 2


def program_name() -> str:
    """How this command was started, for its usage lines: `longqa` (the console script) or `python -m longqa`."""
    return "longqa" if os.path.splitext(os.path.basename(sys.argv[0]))[0] == "longqa" else "python -m longqa"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=program_name(), description="Long-document question answering "
                                     "with Longformer and memory strategies.")
    commands = parser.add_subparsers(dest="command", required=True)

    ask = commands.add_parser("ask", help="answer a question over one or more documents")
    ask.add_argument("files", nargs="+", metavar="FILE", help=".txt, .md, .pdf or .html files")
    ask.add_argument("--question", "-q", required=True)
    ask.add_argument("--model", default=DEFAULT_MODEL,
                     help="Hub id, local folder, or 'demo' (the bundled offline demo model); "
                          "the default falls back to 'demo' when it cannot be fetched")
    ask.add_argument("--profile", default="auto", help="hardware profile (see `python -m longqa profiles`)")
    ask.add_argument("--max-seq-len", type=positive_int)
    ask.add_argument("--doc-stride", type=int)
    ask.add_argument("--max-answer-len", type=positive_int)
    ask.add_argument("--top-k", type=positive_int)
    ask.add_argument("--max-file-mb", type=float, default=50.0)
    ask.add_argument("--reading", choices=READING_MODES, default=DEFAULT_READING,
                     help="full: read every window; guided: read the windows the question's words point to, more "
                          "while the answer is weak; auto (default): guided past a few windows, full where ranking "
                          "cannot serve")
    ask.add_argument("--passage-window-tokens", type=non_negative_int, metavar="N",
                     help="a guided read reads each ranked passage first in a window of N tokens around it, and the "
                          f"whole window only while the answer is weak (default {PASSAGE_WINDOW_TOKENS}; 0: whole "
                          "windows at once; docs/reading.md)")
    ask.add_argument("--no-answer-below", type=float, metavar="SCORE",
                     help="say 'not found' when the best answer scores under SCORE (between 0 and 1); replaces the "
                          "model's own rule (the demo model's measured threshold, a SQuAD 2.0 model's null score)")
    ask.add_argument("--json", action="store_true", help="print one JSON object with answers and readouts")
    ask.add_argument("--page-image", metavar="PATH", help="write the top answer's PDF page, the answer marked on it, "
                     "as a PNG to PATH (an answer from a PDF only)")

    compare = commands.add_parser("compare", help="ask one question under several profiles in turn, each loaded "
                                  "afresh, and compare time, memory and answers")
    compare.add_argument("files", nargs="+", metavar="FILE", help=".txt, .md, .pdf or .html files")
    compare.add_argument("--question", "-q", required=True)
    compare.add_argument("--profiles", default="cpu,baseline-fp32",
                         help="comma-separated profiles, the first the reference for the ratios (default: "
                              "cpu,baseline-fp32)")
    compare.add_argument("--strategies", default="", help="for the profile custom: comma-separated strategies")
    compare.add_argument("--model", default=DEFAULT_MODEL,
                         help="as for ask; the default falls back to 'demo' when it cannot be fetched")
    compare.add_argument("--reading", choices=READING_MODES, default="full",
                         help="as for ask (default: full, so every profile reads the same windows)")
    compare.add_argument("--top-k", type=positive_int)
    compare.add_argument("--max-file-mb", type=float, default=50.0)
    compare.add_argument("--json", action="store_true", help="print one JSON object: each profile's row and readout")

    profiles = commands.add_parser("profiles", help="list hardware profiles and whether they can run here")
    profiles.add_argument("--json", action="store_true")
    profiles.add_argument("--model", default=DEFAULT_MODEL,
                          help="model whose memory to predict per profile (its config only; default: the default model)")

    plan = commands.add_parser("plan", help="predict each profile's memory on a GPU or CPU you do not have")
    add_plan_arguments(plan)

    bench = commands.add_parser("bench", help="measure memory and latency of every profile")
    bench_module.add_arguments(bench)
    return parser


def add_plan_arguments(plan: argparse.ArgumentParser) -> None:
    plan.add_argument("--model", default=DEFAULT_MODEL,
                      help="registry model (offline), local folder or Hub id (when the Hub can be reached); its config "
                           "only")
    gpu = plan.add_mutually_exclusive_group()
    gpu.add_argument("--gpu", metavar="NAME", help=f"a GPU by name: {', '.join(GPU_MODELS)}")
    gpu.add_argument("--gpu-memory", type=float, metavar="GB", help="any other GPU, by its memory in GB")
    plan.add_argument("--compute-capability", metavar="X.Y",
                      help="with --gpu-memory: the card's compute capability (8.0+ has bf16; not given: no bf16)")
    plan.add_argument("--gpus", type=int, default=1, metavar="N", help="how many such GPUs (default 1)")
    plan.add_argument("--cpu-memory", type=float, metavar="GB",
                      help="the host's RAM in GB; alone, a CPU-only machine (default with a GPU: 16, assumed)")
    plan.add_argument("--cpu-bf16", action="store_true",
                      help="the host CPU has native bf16 (AVX512-BF16 or AMX); default: without, as an AVX2 CPU")
    plan.add_argument("--tokens", type=int, metavar="N", help="tokens per window (default: the model's 4,096)")
    plan.add_argument("--batch", type=int, metavar="N", help="windows per forward (default: each profile's own)")
    plan.add_argument("--json", action="store_true", help="print one JSON object")


def run_plan(args) -> int:
    plan = plan_request(args.model, gpu=args.gpu, gpu_memory_gb=args.gpu_memory,
                        compute_capability=args.compute_capability, gpus=args.gpus, cpu_memory_gb=args.cpu_memory,
                        cpu_bf16=args.cpu_bf16, tokens=args.tokens, batch=args.batch)
    if args.json:
        print(json.dumps(plan.to_json(), indent=2))
    else:
        print("\n".join(plan_lines(plan)))
    return 0


PART_LABELS = {"weights": "weights", "activations": "activations", "offload_stream": "offloaded layer",
               "allocator_slack": "allocator slack", "cuda_context": "CUDA context", "process": "process",
               "overhead": "allocator/scratch"}


def plan_lines(plan: MachinePlan) -> list[str]:
    """The plan as text: the machine, one line per profile and device with what its need is made of, the
    recommendation and the article's advice."""
    gb = lambda value: f"{value / 1e9:.2f}"  # noqa: E731
    lines = [f"Predicted memory of {plan.model} on {plan.machine.description}",
             "(predicted by the memory planner from the config, not measured; GPU predictions are not yet checked "
             "on a GPU: docs/gpu-planning.md)", ""]
    for row in plan.profiles:
        setting = f"{row.tokens:,} tokens, batch {row.batch}" if row.tokens else ""
        lines.append(f"{row.name:<22} {'fits' if row.fits else 'no':<5} {setting:<24} {row.why}")
        for device in row.devices:
            parts = " + ".join(f"{PART_LABELS.get(name, name)} {gb(value)}" for name, value in
                               device.parts_bytes.items() if value)
            total = f" of {device.total_bytes / 1e9:g}" if device.total_bytes else ""
            lines.append(f"{'':<29}{device.device}: {gb(device.need_bytes)} GB{total} = {parts}")
    lines += ["", f"Recommended: {plan.recommended or 'none'} ({plan.recommendation_reason})"]
    if plan.article:
        lines.append(f"The article's advice for {plan.article.cards}: {plan.article.advice} "
                     f"(profile {plan.article.profile}). Where the predictions disagree:")
        lines += [f"  - {line}" for line in plan.article.corrections]
    return lines


def run_ask(args) -> int:
    session = Session()

    def read() -> ReadRequest:  # refuse bad input before any model work, once
        documents, extract_s = read_documents(args.files, max_bytes=int(args.max_file_mb * 1024 * 1024))
        return ReadRequest(documents, validate_request(documents, args.question), extract_s)

    def load() -> None:
        loaded = session.load(args.model, args.profile, fallback_to_demo=(args.model == DEFAULT_MODEL))
        if loaded.fallback_reason:
            print(f"note: {loaded.fallback_reason}", file=sys.stderr)

    answered = run_request(session, read, args.reading, load=load, max_seq_len=args.max_seq_len,
                           doc_stride=args.doc_stride, max_answer_len=args.max_answer_len, top_k=args.top_k,
                           no_answer_below=args.no_answer_below, passage_window_tokens=args.passage_window_tokens)
    readout, documents = answered.readout, answered.read.documents
    if args.page_image:
        write_page_image(args.page_image, readout.result, documents)
    if args.json:
        print(json.dumps(readout.to_json()))
        return 0
    result, reading = readout.result, readout.result.reading
    for notice in result.notices:
        print(f"note: {notice}", file=sys.stderr)
    verdict = result.verdict
    if result.found is False:
        print(f"{verdict.message}. The best span, for the curious:")
    for rank, answer in enumerate(result.answers, 1):
        place = format_location(answer.location) if answer.location else answer.document
        where = f"{place}, chars {answer.start_char}-{answer.end_char}" if answer.document else "no answer"
        print(f"{rank}. {answer.text!r}  score {answer.score:.4g}, {answer.confidence} confidence  ({where})")
    if result.found is None and not verdict.outside_form:  # outside the form, the notice above said why
        print(f"note: {verdict.message}; --no-answer-below SCORE gives a threshold", file=sys.stderr)
    print(f"{result.windows} windows, {result.tokens} tokens, batch {result.batch_size}, "
          f"{result.latency_s['total']:.2f} s, model {readout.model}, profile {readout.profile}; "
          f"read {reading.windows_read} of {reading.windows_total} windows, {reading.mode}: {reading.reason}",
          file=sys.stderr)
    return 0


def write_page_image(path: str, result, documents) -> None:
    """The top answer's first page, its place marked (`session.page_image`, as the page draws it), written to `path`
    as a PNG; a note where there is none to draw (not found, not from a PDF)."""
    best = result.answers[0] if result.answers and result.found is not False else None
    marks = best.location.marks if best is not None and best.location is not None else ()
    if not marks:
        why = "no answer was found" if best is None else "the answer is not marked on a PDF page"
        print(f"note: no page image written: {why}", file=sys.stderr)
        return
    document = documents[best.document_index]
    Path(path).write_bytes(page_image(document.source, document.name, marks[0]))
    print(f"note: page {marks[0].page} of {best.document}, the answer marked, written to {path}", file=sys.stderr)


def run_compare(args) -> int:
    documents, extract_s = read_documents(args.files, max_bytes=int(args.max_file_mb * 1024 * 1024))
    question = validate_request(documents, args.question)  # refuse bad input before any model work, once
    choices = choices_from(args.profiles.split(","), [s for s in args.strategies.split(",") if s])
    comparison = compare_profiles(Session(), args.model, choices, documents, question, args.reading,
                                  extract_s=extract_s, fallback_to_demo=args.model == DEFAULT_MODEL, top_k=args.top_k)
    if args.json:
        print(json.dumps(comparison.to_json()))
        return 0
    print("\n".join(compare_lines(comparison)))
    return 0


def compare_lines(comparison: Comparison) -> list[str]:
    """The comparison as text: one line per profile, each figure with its ratio to the first profile's."""
    mb = lambda value: "-" if value is None else f"{value / 1e6:,.1f} MB"  # noqa: E731
    times = lambda value: "" if value is None else f" ({value:.2f}x)"  # noqa: E731
    lines = [f"{comparison.question!r} over {', '.join(comparison.documents)} with {comparison.model}; ratios to "
             f"the first profile; memory: the process's peak, and the request's own peak above the model loaded",
             f"{'profile':<32} {'time':>16} {'process peak':>22} {'request peak':>20} {'windows/s':>16}  same answer"]
    for run in comparison.runs:
        ratios = comparison.ratios(run)
        rate = "-" if run.windows_per_s is None else f"{run.windows_per_s:.2f}"
        lines.append(f"{run.choice.label:<32} {f'{run.time_s:.2f} s' + times(ratios['time']):>16} "
                     f"{mb(run.peak_bytes) + times(ratios['peak']):>22} "
                     f"{mb(run.request_peak_bytes) + times(ratios['request_peak']):>20} "
                     f"{rate + times(ratios['windows_per_s']):>16}  "
                     f"{'yes' if comparison.same_answer(run) else 'no'}: {run.answer_text or '(not found)'!r}")
    return lines


def run_profiles(args) -> int:
    hardware = detect_hardware()
    rows = describe_profiles(hardware)
    add_memory_predictions(rows, args.model, hardware)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        state = "available" if row["available"] else f"unavailable: {row['reason']}"
        print(f"{row['name']:<15} {', '.join(row['strategies']) or '-':<55} {row['targets']}  [{state}]")
    return 0


def add_memory_predictions(rows: list[dict], model_ref: str, hardware) -> None:
    """`predicted_peak_bytes` and `fits` per available profile (its default window and batch), None elsewhere."""
    config = model_config(model_ref)
    for row in rows:
        row["predicted_peak_bytes"] = row["fits"] = None
        if not row["available"] or row["name"] == "custom":
            continue
        profile = resolve_auto(hardware, config) if row["name"] == "auto" else PROFILES[row["name"]]
        plan = plan_profile(config, profile, hardware)
        row["predicted_peak_bytes"], row["fits"] = plan.peak_bytes, plan.fits(hardware)
        if row["name"] == "auto":
            row["resolves_to"] = profile.name


def quiet_libraries() -> None:
    """stderr carries only our own one-line notes: no library warnings, log records or progress bars (the
    readouts already say what those would: padding, dtypes, load progress)."""
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    warnings.simplefilter("ignore")
    logging.getLogger().addHandler(logging.NullHandler())  # no "last resort" printing of other libraries' records
    for name in ("", "torch", "torchao"):  # torch's loggers carry their own handler
        logging.getLogger(name).setLevel(logging.ERROR)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    quiet_libraries()
    commands = {"ask": run_ask, "compare": run_compare, "profiles": run_profiles, "plan": run_plan,
                "bench": bench_module.run}
    try:
        return commands[args.command](args)
    except LongQAError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # the promise is one line, never a traceback
        print(f"error: unexpected {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
