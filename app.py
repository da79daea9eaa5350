"""The entry point gradio and Spaces expect: `demo`, built at import, and `python app.py`'s `main()`.

Only that: the page lives in the `page` package (`page.layout` builds it, `page.cli` is the command line). Imported
(a Space's `demo`, the tests), it builds one context and page with the defaults, without loading a model: the model
loads on the first page visit or request, and under ZeroGPU at import. `python app.py` builds its one context and
page from the command line and loads the model before serving. `gradio app.py` (reload mode) starts as `python
app.py` does; after each change to a .py or .css file it serves the page this file builds with the defaults, anew
(for working on the page: that page keeps uploads in a store of its own, while the upload route and the sweep keep
the first page's).
"""

from __future__ import annotations

import contextlib
import sys

from page.zerogpu import ZERO_GPU  # first: it imports `spaces` before anything loads torch, as ZeroGPU needs

import gradio as gr

from longqa_core.errors import LongQAError
from page.cli import default_lock_profile, default_max_request_s, default_visitor_header, main
from page.context import make_context
from page.layout import build_blocks
from page.asking import ensure_loaded

if __name__ == "__main__" and gr.NO_RELOAD:  # `python app.py`, and the first run of `gradio app.py`
    sys.exit(main())
# Imported (a Space's `demo`, the tests), and each run of gradio's reload mode: its watcher runs this file again in a
# thread (gr.NO_RELOAD false there), whose `demo` it serves after a change: one context and page with the defaults.
context = make_context(lock_profile=default_lock_profile() or ZERO_GPU, max_request_s=default_max_request_s(),
                       visitor_header=default_visitor_header())  # as `python app.py` starts without flags
demo = build_blocks(context)
if ZERO_GPU:
    # ZeroGPU forks its GPU workers from this process: the model must be loaded (onto the patched CUDA) before,
    # at import, with the profile fixed. `python app.py` does the same in main() before serving.
    with contextlib.suppress(LongQAError):  # the banner says why; the page still starts
        ensure_loaded(context)
