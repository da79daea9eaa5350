"""Command line: `python -m longqa ask|profiles|bench`.

Parses arguments, calls the session and the profiles, prints. Errors become one line on stderr and a non-zero
exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import warnings

from transformers.utils import logging as hf_logging

from longqa.bench import reading_sweep
from longqa.bench import runner as bench_module
from longqa.arguments import positive_int
from longqa.models import DEFAULT_MODEL, model_config
from longqa.session import Session, read_documents
from longqa_core.errors import LongQAError
from longqa_core.limits import validate_request
from longqa_core.reading import DEFAULT_READING, READING_MODES
from strategies.auto import resolve_auto
from strategies.hardware import detect_hardware
from strategies.memory_planner import plan_profile
from strategies.profiles import PROFILES, describe_profiles

EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m longqa", description="Long-document question answering "
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
    ask.add_argument("--no-answer-below", type=float, metavar="SCORE",
                     help="say 'not found' when the best answer scores under SCORE (between 0 and 1); replaces the "
                          "model's own rule (the demo model's measured threshold, a SQuAD 2.0 model's null score)")
    ask.add_argument("--json", action="store_true", help="print one JSON object with answers and readouts")

    profiles = commands.add_parser("profiles", help="list hardware profiles and whether they can run here")
    profiles.add_argument("--json", action="store_true")
    profiles.add_argument("--model", default=DEFAULT_MODEL,
                          help="model whose memory to predict per profile (its config only; default: the default model)")

    bench = commands.add_parser("bench", help="measure memory and latency of every profile")
    bench_module.add_arguments(bench)
    reading_sweep.add_arguments(bench)
    return parser


def run_ask(args) -> int:
    documents, extract_s = read_documents(args.files, max_bytes=int(args.max_file_mb * 1024 * 1024))
    validate_request(documents, args.question)  # refuse bad input before any model work
    session = Session()
    loaded = session.load(args.model, args.profile, fallback_to_demo=(args.model == DEFAULT_MODEL))
    if loaded.fallback_reason:
        print(f"note: {loaded.fallback_reason}", file=sys.stderr)
    plan = session.plan(documents, args.question, args.reading, max_seq_len=args.max_seq_len,
                        doc_stride=args.doc_stride, max_answer_len=args.max_answer_len, top_k=args.top_k,
                        no_answer_below=args.no_answer_below)
    readout = session.ask(plan, extract_s=extract_s)
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
        where = f"{answer.document} chars {answer.start_char}-{answer.end_char}" if answer.document else "no answer"
        print(f"{rank}. {answer.text!r}  score {answer.score:.4g}, {answer.confidence} confidence  ({where})")
    if result.found is None:
        print(f"note: {verdict.message}; --no-answer-below SCORE gives a threshold", file=sys.stderr)
    print(f"{result.windows} windows, {result.tokens} tokens, batch {result.batch_size}, "
          f"{result.latency_s['total']:.2f} s, model {readout.model}, profile {readout.profile}; "
          f"read {reading.windows_read} of {'about ' if reading.windows_total_estimated else ''}"
          f"{reading.windows_total} windows, {reading.mode}: {reading.reason}", file=sys.stderr)
    return 0


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
    args = build_parser().parse_args(argv)
    quiet_libraries()
    try:
        if args.command == "ask":
            return run_ask(args)
        if args.command == "profiles":
            return run_profiles(args)
        if args.reading:
            return reading_sweep.run(args)
        return bench_module.run(args)
    except LongQAError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # the promise is one line, never a traceback
        print(f"error: unexpected {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
