"""The `cpu` profile against the peer it replaces, side by side in one run: transformers 5.2's `question-answering`
pipeline (the last release that has it) in fp32, and this project's engine with the `cpu` profile, on the same
arch:base checkpoint (random weights), the same question and a document of one 4,096-token window, best of
`--repeat` after a warm-up each:

    python -m venv --system-site-packages .venv-peer
    .venv-peer/bin/pip install transformers==5.2.0 kernels==0.12.3   # a `kernels` that 5.2 can import
    python scripts/measure_peer.py --peer-python .venv-peer/bin/python [--repeat 3] [--out docs/cpu-floor/peer.json]

The peer runs in its own process under `--peer-python` (a Python whose transformers is 5.2, beside the same torch);
this project's side runs here. Not a test: it needs that second environment.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PEER = r"""
import json, sys, time
import torch, transformers
from transformers import pipeline
folder, tokenizer_folder, question, context, repeat = sys.argv[1:6]
qa = pipeline("question-answering", model=folder, tokenizer=tokenizer_folder, device=-1, dtype=torch.float32)
kwargs = dict(question=question, context=context, max_seq_len=4096, doc_stride=128, max_question_len=64)
times = []
with torch.inference_mode():
    for _ in range(int(repeat) + 1):
        began = time.perf_counter()
        out = qa(**kwargs)
        times.append(time.perf_counter() - began)
print(json.dumps({"transformers": transformers.__version__, "torch": torch.__version__,
                  "threads": torch.get_num_threads(), "best_s": min(times[1:]), "times_s": times,
                  "answer": out["answer"], "start": out["start"]}))
"""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/measure_peer.py")
    parser.add_argument("--peer-python", required=True, help="a Python with transformers 5.2 (see the docstring)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default="docs/cpu-floor/peer.json")
    args = parser.parse_args(argv)

    import torch

    from longqa.bench.runner import cpu_flags, cpu_model
    from longqa.bench.worker import agreement_inputs
    from longqa.loader import _fetch, load_model
    from longqa.models import resolve_model
    from longqa_core import answering
    from longqa_core.documents import Document

    loaded = load_model("arch:base", "cpu")
    folder, tokenizer_folder = _fetch(resolve_model("arch:base"), lambda fraction, message: None)
    check = agreement_inputs(loaded.tokenizer, 4096, 1)[0]
    settings = loaded.settings.resolved(loaded.tokenizer)
    peer = subprocess.run([args.peer_python, "-c", PEER, str(folder), str(tokenizer_folder), check.question,
                           check.document.text, str(args.repeat)], capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "PYTHONPATH": ""})
    if peer.returncode != 0:
        raise SystemExit(f"the peer failed:\n{peer.stderr[-3000:]}")
    peer_result = json.loads(peer.stdout.strip().splitlines()[-1])

    times = []
    for _ in range(args.repeat + 1):
        began = time.perf_counter()
        result = answering.answer(loaded.runner, loaded.tokenizer, [Document("check", check.document.text)],
                                  check.question, settings, batch_state=loaded.batch_state)
        times.append(time.perf_counter() - began)
    ours = {"profile": "cpu", "strategies": loaded.readout.strategies, "threads": torch.get_num_threads(),
            "best_s": min(times[1:]), "times_s": times, "windows": result.windows, "tokens": result.tokens,
            "answer": result.answers[0].text if result.answers else None}
    report = {"command": "python scripts/measure_peer.py " + " ".join(argv), "date": time.strftime("%Y-%m-%d"),
              "cpu": cpu_model(), "cpu_flags": cpu_flags(), "python": platform.python_version(),
              "load_average_at_end": list(os.getloadavg()), "model": "arch:base (random weights)",
              "peer": {"what": "transformers question-answering pipeline, fp32", **peer_result}, "ours": ours,
              "peer_over_ours": peer_result["best_s"] / ours["best_s"]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
