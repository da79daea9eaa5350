"""A stand-in for Hugging Face's `spaces` package that does to a `@spaces.GPU` function what ZeroGPU does.

As `spaces` 0.51 (`zero/wrappers.py`) does when SPACES_ZERO_GPU is true: the call's `(args, kwargs)` are pickled
(a PicklingError reaches the caller), the function runs in a forked worker process that inherits the module
state, its result comes back pickled, a `gr.Error` raised there reaches the caller as it is and any other
exception as a generic "ZeroGPU worker error"; `duration` may be a callable of the same arguments. A generator
function's yields come back one by one as the worker makes them (`generator_function_wrapper`). Outside
ZeroGPU it returns the function unchanged. Not the real package: no GPU scheduling, quotas or tensor moving.
When ZEROGPU_STANDIN_LOG names a file, each call appends one JSON line (function, duration, worker pid).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
from functools import partial, wraps

import inspect

import gradio as gr

ZERO_GPU = os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")


def GPU(task=None, *, duration=None, size=None):  # noqa: N802 - the real package's name
    if task is None:
        return partial(GPU, duration=duration, size=size)
    if not ZERO_GPU:
        return task
    generator = inspect.isgeneratorfunction(task)

    def outcomes(args, kwargs):
        """Each (kind, value) the worker sends: ("yield", value)... for a generator, then one final outcome."""
        seconds = duration(*args, **kwargs) if callable(duration) else duration
        payload = pickle.dumps((args, kwargs))
        context = multiprocessing.get_context("fork")
        receiver, sender = context.Pipe(duplex=False)
        worker = context.Process(target=_run_in_worker, args=(task, payload, sender, generator), daemon=True)
        worker.start()
        sender.close()
        yields = 0
        try:
            while True:
                try:
                    kind, value = pickle.loads(receiver.recv_bytes())
                except EOFError:
                    kind, value = "error", "the worker died"
                if kind != "yield":
                    break
                yields += 1
                yield kind, value
        finally:
            worker.join()
            _log({"function": task.__name__, "duration_s": seconds, "worker_pid": worker.pid,
                  "server_pid": os.getpid(), "outcome": kind, "yields": yields})
        yield kind, value

    def result(kind, value):
        if kind in ("ok", "yield"):
            return value
        if kind == "gradio_error":
            raise value
        raise gr.Error(f"ZeroGPU worker error: {value}")

    if generator:
        @wraps(task)
        def gradio_generator(*args, **kwargs):
            for kind, value in outcomes(args, kwargs):
                if kind == "ok":
                    return
                yield result(kind, value)
        return gradio_generator

    @wraps(task)
    def gradio_handler(*args, **kwargs):
        *_, (kind, value) = outcomes(args, kwargs)
        return result(kind, value)

    return gradio_handler


def _run_in_worker(task, payload, sender, generator: bool) -> None:
    args, kwargs = pickle.loads(payload)
    try:
        if generator:
            for value in task(*args, **kwargs):
                sender.send_bytes(pickle.dumps(("yield", value)))
            outcome = ("ok", None)
        else:
            outcome = ("ok", task(*args, **kwargs))
    except gr.Error as exc:
        outcome = ("gradio_error", exc)
    except Exception as exc:  # the real wrapper shows only the class name to the caller
        outcome = ("error", type(exc).__name__)
    try:
        data = pickle.dumps(outcome)
    except Exception as exc:
        data = pickle.dumps(("error", f"PicklingError: {exc}"))
    sender.send_bytes(data)
    sender.close()
    os._exit(0)


def _log(record: dict) -> None:
    path = os.environ.get("ZEROGPU_STANDIN_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(json.dumps(record) + "\n")
