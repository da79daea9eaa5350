"""The page's command line: `python app.py`'s flags, one backend, one context and one page from them, the model
loaded before serving, and `serve`. Not the page: `page.layout` builds it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

import gradio as gr

from longqa.arguments import non_negative_int, positive_int
from longqa.backend import Backend
from longqa.models import DEFAULT_MODEL
from longqa.serving import policy
from longqa.serving.lane import MAX_QUEUED_WINDOWS
from longqa.serving.ray_replicas import DEFAULT_BATCH_REQUESTS, RaySession
from longqa.serving.uploads import DEFAULT_KEEP_S, DEFAULT_PER_VISITOR_BYTES, DEFAULT_TOTAL_BYTES, UploadStore
from longqa.session import Session
from longqa_core.errors import LongQAError, ProfileError
from longqa_core.html_files import READERS as HTML_READERS
from longqa_core.limits import DEFAULT_MAX_TOTAL_TOKENS, PASSAGE_WINDOW_TOKENS
from page import format as fmt
from page.context import DEFAULT_MAX_COMPARE_S, DEFAULT_MAX_FILE_MB, DEFAULT_QUEUE_SIZE, MB, AppContext, make_context
from page.layout import build_blocks
from page.loading import ensure_loaded
from page.zerogpu import ZERO_GPU
from strategies.profiles import PROFILES

SPACE_MAX_REQUEST_S = 120.0
SPACE_VISITOR_HEADER = "X-Forwarded-For"


def serve(demo: gr.Blocks, *, host: str = "127.0.0.1", port: int = 7860, share: bool = False,
          max_file_mb: float = DEFAULT_MAX_FILE_MB, block: bool = True) -> tuple[str, str | None]:
    """Launch; a share link that cannot be made (offline) leaves the app serving locally. Returns both URLs."""
    if share:
        print("note: --share makes a PUBLIC link: anyone who has it can use this app on this machine.", flush=True)
    # show_error=False: our own errors are gr.Error and always reach the visitor; what gradio raises before a
    # handler runs (a crafted call naming a server path) would otherwise echo the server's absolute paths.
    # quiet=True: gradio's own lines ("To create a public link, set `share=True`...") speak to a developer calling
    # launch(), not to whoever runs the page; the page says where it serves itself, once.
    launch = dict(server_name=host, server_port=port, max_file_size=int(max_file_mb * 1024 * 1024),
                  prevent_thread_lock=True, show_error=False, quiet=True)
    try:
        _, local_url, share_url = demo.launch(share=share, **launch)
    except Exception as exc:  # gradio catches tunnel failures itself; this covers any it lets through
        if not share:
            raise
        print(f"warning: --share failed ({type(exc).__name__}: {exc}); serving locally only.", flush=True)
        demo.close()
        _, local_url, share_url = demo.launch(share=False, **launch)
    if share and not share_url:
        print("warning: --share: the public link could not be created (offline?); serving locally only.", flush=True)
    print(f"Serving the page at {local_url}", flush=True)
    if share_url:
        print(f"Public link (anyone who has it can use this app): {share_url}", flush=True)
    if block:
        demo.block_thread()
    return local_url, share_url


def default_max_request_s() -> float:
    """A shared Space bounds each request's time so that one visitor cannot hold the model for minutes; a laptop
    runs whatever its owner asks."""
    return SPACE_MAX_REQUEST_S if os.environ.get("SPACE_ID") else 0.0


def default_visitor_header() -> str | None:
    """On a Space, the proxy names the visitor in X-Forwarded-For; a direct connection has no such header."""
    return SPACE_VISITOR_HEADER if os.environ.get("SPACE_ID") else None


def default_lock_profile() -> bool:
    """Locked on a Space (Spaces set SPACE_ID), where any visitor could otherwise reload the model for all."""
    setting = os.environ.get("LONGQA_LOCK_PROFILE", "").strip().lower()
    if setting:
        return setting in ("1", "true", "yes", "on")
    return bool(os.environ.get("SPACE_ID"))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Serve the long-document QA page.")
    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help="model to start with; also the only model besides the registry the page may load "
                             "(the default falls back to the bundled demo model when it cannot be fetched)")
    parser.add_argument("--profile", default="auto", choices=list(PROFILES), help="hardware profile to start with")
    # Spaces set GRADIO_SERVER_NAME=0.0.0.0: an explicit server_name would override it and hide the app.
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
    parser.add_argument("--share", action="store_true", help="also serve through a PUBLIC Gradio share link")
    parser.add_argument("--max-file-mb", type=float, default=DEFAULT_MAX_FILE_MB, help="upload size limit per file")
    parser.add_argument("--max-tokens", type=positive_int, default=DEFAULT_MAX_TOTAL_TOKENS,
                        help="refuse requests whose documents have more tokens than this")
    parser.add_argument("--queue-size", type=positive_int, default=DEFAULT_QUEUE_SIZE,
                        help="requests that may wait; more are refused with 'queue is full'")
    parser.add_argument("--max-request-s", type=float, default=default_max_request_s(),
                        help="refuse a request predicted (from this deployment's measured tokens per second) to take "
                             "longer than this many seconds; 0: no limit (default: "
                             f"{SPACE_MAX_REQUEST_S:.0f} in a Hugging Face Space, no limit elsewhere)")
    parser.add_argument("--lock-profile", action=argparse.BooleanOptionalAction, default=default_lock_profile(),
                        help="shared deployments: the model and profile stay as started; the page and the API "
                             "cannot change them (default: on in a Hugging Face Space, off elsewhere; "
                             "LONGQA_LOCK_PROFILE=1/0 overrides; always on under ZeroGPU)")
    parser.add_argument("--allow-compare", action="store_true",
                        help="under --lock-profile, visitors may still compare profiles (each comparison reloads the "
                             "shared model for every profile, alone on it)")
    parser.add_argument("--allow-training", action="store_true",
                        help="under --lock-profile, visitors may still run the training-step readout")
    parser.add_argument("--max-compare-s", type=float, default=DEFAULT_MAX_COMPARE_S,
                        help="a comparison's reads, all profiles together, may take about this many seconds; one "
                             "predicted to take longer is refused, one that runs longer is ended; 0: no limit")
    parser.add_argument("--passage-window-tokens", type=non_negative_int, default=None, metavar="N",
                        help="a guided read reads each ranked passage first in a window of N tokens around it (the "
                             "first answer about 4x sooner with the default model on a CPU), and the whole window "
                             f"only while the answer is weak (default {PASSAGE_WINDOW_TOKENS}; 0: whole windows at "
                             "once; docs/reading.md)")
    parser.add_argument("--visitor-header", default=default_visitor_header(),
                        help="behind a proxy: the header naming the visitor's address (the rightmost public address "
                             "in it, which the proxy appended: docs/serving.md), so that per-visitor limits count "
                             "the address as well as the page session (default: "
                             f"{SPACE_VISITOR_HEADER} in a Hugging Face Space, none elsewhere: on a direct connection "
                             "many visitors may share one address); 'none' turns it off")
    parser.add_argument("--max-queued-windows", type=int, default=MAX_QUEUED_WINDOWS,
                        help="refuse a new request larger than a few batches when the windows queued for the model "
                             "(its own included) would pass this; 0: no bound")
    bounds = parser.add_argument_group("uploads and HTML reading (per process)")
    bounds.add_argument("--uploads-total-mb", type=float, default=DEFAULT_TOTAL_BYTES / MB,
                        help="uploads this server holds on disk, all visitors together; an upload past it is refused "
                             "once older unread uploads made what room they could")
    bounds.add_argument("--uploads-per-visitor-mb", type=float, default=DEFAULT_PER_VISITOR_BYTES / MB,
                        help="uploads one visitor may hold (counted where --visitor-header names visitors)")
    bounds.add_argument("--uploads-keep-min", type=float, default=DEFAULT_KEEP_S / 60,
                        help="minutes an upload is kept (unless it is being read) before it is deleted")
    bounds.add_argument("--html-readers", type=positive_int, default=HTML_READERS.readers,
                        help="HTML pages and PDFs parsed at once, each in its own child process (default: one per "
                             "core); more wait their turn, their place shown")
    bounds.add_argument("--html-memory-mb", type=float, default=HTML_READERS.memory_bytes / MB,
                        help="memory all reading children (HTML and PDF) may use together; an HTML child may use "
                             "64 MB + 256 bytes per byte of its page, a PDF child 256 MB + 32 per byte, within this")
    scale = parser.add_argument_group("past one machine (Ray Serve; pip install -r requirements-ray.txt)")
    scale.add_argument("--engine", choices=["embedded", "ray"], default="embedded",
                       help="embedded: the model in this process (default); ray: in Ray Serve replicas")
    scale.add_argument("--ray-address", default=None,
                       help="a running Ray cluster: 'auto' or HOST:PORT (default: start a local Ray instance and "
                            "stop it on exit)")
    scale.add_argument("--replicas", type=positive_int, default=1,
                       help="Ray Serve replicas, each with its own copy of the model (one GPU each where the cluster "
                            "has GPUs)")
    scale.add_argument("--ray-batch", type=positive_int, default=DEFAULT_BATCH_REQUESTS,
                       help="concurrent requests whose windows may share one forward pass in a replica (1: none)")
    scale.add_argument("--ray-cpus-per-replica", type=float, default=None,
                       help="CPUs each replica reserves (default: the cluster's CPUs split between the replicas, or 1 "
                            "beside each GPU)")
    return parser


def make_session(args) -> Backend:
    """The embedded session, or one whose model lives in Ray Serve replicas (`--engine ray`)."""
    if args.engine == "ray":
        return RaySession(replicas=args.replicas, address=args.ray_address, batch_requests=args.ray_batch,
                          cpus_per_replica=args.ray_cpus_per_replica)
    return Session()


def main(argv: list[str] | None = None) -> int:
    """`python app.py`: one backend, one context and one page, from the command line; the model loads before
    serving."""
    args = build_parser().parse_args(argv)
    policy.tune_server_process()  # before the model and the request threads allocate
    try:
        session = make_session(args)
    except LongQAError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # A stop signal ends the process through `finally`, so replicas and a Ray instance of ours are stopped and the
    # uploads deleted too; the reads in flight end before their next batch (`policy.stop_serving`), so that freeing
    # the model waits a batch, not their whole reads.
    signal.signal(signal.SIGTERM, stop_on_signal)
    ctx = None
    try:
        ctx = context_from(args, session)
        if not load_before_serving(ctx, args):
            return 2
        serve(build_blocks(ctx, args.queue_size), host=args.host, port=args.port, share=args.share,
              max_file_mb=args.max_file_mb)
        return 0
    finally:
        session.close()
        if ctx is not None:
            ctx.uploads.delete_all()


def stop_on_signal(*_) -> None:
    """SIGTERM: every request in progress is abandoned, then the process exits through `main`'s `finally`."""
    policy.stop_serving()
    sys.exit(0)


def context_from(args, session: Backend) -> AppContext:
    """The page's context as the command line sets it (always locked under ZeroGPU), with the HTML readers'
    bounds set for this process."""
    HTML_READERS.configure(readers=args.html_readers, memory_bytes=int(args.html_memory_mb * MB))
    uploads = UploadStore(total_bytes=int(args.uploads_total_mb * MB),
                          per_visitor_bytes=int(args.uploads_per_visitor_mb * MB), keep_s=args.uploads_keep_min * 60)
    return make_context(session, default_model=args.model, default_profile=args.profile,
                        max_file_mb=args.max_file_mb, max_total_tokens=args.max_tokens,
                        lock_profile=args.lock_profile or ZERO_GPU, max_request_s=args.max_request_s,
                        queue_size=args.queue_size,
                        visitor_header=None if str(args.visitor_header).lower() == "none" else args.visitor_header,
                        max_queued_windows=args.max_queued_windows, uploads=uploads,
                        allow_compare=args.allow_compare, allow_training=args.allow_training,
                        max_compare_s=args.max_compare_s, passage_window_tokens=args.passage_window_tokens)


def load_before_serving(ctx: AppContext, args) -> bool:
    """Load the starting model, saying so on the console; False (after saying why) when the profile cannot run
    here. A model that fails to load leaves the page to start without one."""
    try:
        ctx.session.runnable_profile(args.profile)
    except ProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return False
    print(f"Loading {args.model} with profile {args.profile} ({ctx.hardware.describe()}) ...", flush=True)
    try:
        ensure_loaded(ctx)
        readout = ctx.session.loaded.readout
        if readout.fallback_reason:
            print(f"note: {readout.fallback_reason}", flush=True)
        print(f"Loaded {readout.model_ref} ({readout.profile}) in {fmt.format_seconds(readout.load_time_s)}.",
              flush=True)
    except LongQAError as exc:
        print(f"warning: no model loaded: {exc} The page still starts; pick a model there.", flush=True)
    return True
