"""Exact match of the bundled demo model on held-out generated documents, measured through the engine.

Usage: python scripts/evaluate_demo_model.py [--model longqa/demo_model] [--n 200] [--seed 2026]
Documents of 200 to 40,000 tokens (log-uniform), prose the model never saw (the held-out filler split),
windows of 4,096 tokens overlapping by 128, so a fact on a window boundary is whole in one window.
Document seeds here are fixed numbers from 1,000,000,000 up; training draws random 48-bit seeds from its own
generator (a collision has a chance of about one in a billion) and only ever trains on the other filler split.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from longqa import demo_task  # noqa: E402
from longqa.documents import Document  # noqa: E402
from longqa.engine import EngineSettings, ModelRunner, answer  # noqa: E402

HELD_OUT_SEED_BASE = 1_000_000_000


def chars_per_token(tokenizer) -> float:
    sample = demo_task.make_example(HELD_OUT_SEED_BASE - 1, 20000).text
    return len(sample) / len(tokenizer(sample, add_special_tokens=False)["input_ids"])


def evaluate(model, tokenizer, n: int, seed: int, max_seq_len: int = 4096, doc_stride: int = 128,
             batch_size: int = 4, on_result=None) -> dict:
    rng = random.Random(seed)
    ratio = chars_per_token(tokenizer)
    settings = EngineSettings(max_seq_len=max_seq_len, doc_stride=doc_stride, batch_size=batch_size)
    runner = ModelRunner(model)
    hits, tokens, rows = 0, 0, []
    for i in range(n):
        target_tokens = int(math.exp(rng.uniform(math.log(200), math.log(40000))))
        example = demo_task.make_example(HELD_OUT_SEED_BASE + seed * 10_000 + i, int(target_tokens * ratio),
                                         split="test", n_distractors=(rng.randint(1, 4), rng.randint(1, 3),
                                                                      rng.randint(0, 4)))
        result = answer(runner, tokenizer, [Document(f"doc{i}", example.text)], example.question, settings)
        best = result.answers[0]
        ok = best.text == example.answer and best.start_char == example.answer_start
        hits += ok
        tokens += result.tokens
        rows.append({"tokens": result.tokens, "windows": result.windows, "ok": bool(ok), "expected": example.answer,
                     "got": best.text})
        if on_result:
            on_result(i, ok, hits)
    return {"n": n, "exact_match": hits / n, "seed": seed, "max_seq_len": max_seq_len, "doc_stride": doc_stride,
            "mean_tokens": tokens / n, "min_tokens": min(r["tokens"] for r in rows),
            "max_tokens": max(r["tokens"] for r in rows), "misses": [r for r in rows if not r["ok"]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=Path("longqa/demo_model"))
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--out", type=Path, help="write the summary JSON here")
    args = parser.parse_args()
    from transformers import AutoTokenizer, LongformerForQuestionAnswering

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = LongformerForQuestionAnswering.from_pretrained(args.model).eval()
    began = time.time()

    def report(i, ok, hits):
        if (i + 1) % 20 == 0:
            print(f"{i + 1}/{args.n} exact match so far {hits / (i + 1):.3f} ({time.time() - began:.0f} s)",
                  flush=True)

    summary = evaluate(model, tokenizer, args.n, args.seed, on_result=report)
    summary["seconds"] = time.time() - began
    print(json.dumps({k: v for k, v in summary.items() if k != "misses"}, indent=2))
    for miss in summary["misses"][:10]:
        print("miss:", miss)
    if args.out:
        args.out.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
