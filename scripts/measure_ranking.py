"""How the ranking alone places the window that holds the fact, on the long evaluation documents
(`longqa.demo_model.long_eval`): its rank among the full read's windows, its score as a share of the best, and how
many windows tie with the best (score at least `reading.TIE_SHARE` of it). The fact's window is the best ranked of
those holding the whole fact sentence (windows overlap). No model runs: this is what the guided reading's first two
rounds (the best 2, then the ties) are chosen from.

Usage: python scripts/measure_ranking.py [--n 40] [--tokens 100000] [--out docs/ranking.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from transformers import AutoTokenizer  # noqa: E402

from longqa.demo_model import long_eval  # noqa: E402
from longqa.models import DEMO_MODEL_DIR  # noqa: E402
from longqa_core import limits, plan, reading  # noqa: E402
from longqa_core.documents import Document  # noqa: E402
from scripts.evaluate_reading import load_notes  # noqa: E402

CATEGORIES = ("literal", "paraphrased", "notes")


def place(item, tokenizer, settings) -> dict:
    """Where the window holding the item's fact ranks for its question."""
    documents = [Document(item.name, item.text)]
    guide = plan.plan_request(tokenizer, documents, item.question, settings, "guided")
    index = reading.build_index(documents)  # the index the plan was made from: built from the documents alone
    ranking = reading.rank(index, item.question, guide.cuts)
    order = [int(r) for r in ranking.order]
    holding = min((i for i, c in enumerate(guide.cuts) if c.start_char <= item.fact_start and
                   item.fact_end <= c.end_char), key=order.index)
    best = ranking.best
    return {"category": item.category, "windows": len(guide.cuts), "rank": order.index(holding) + 1,
            "share_of_best": float(ranking.scores[holding] / best) if best > 0 else None,
            "tied": len(ranking.tied()), "plan": guide.mode,
            "in_first_two_rounds": holding in [r for rnd in guide.reading.rounds for r in rnd]}


def summarize(rows: list[dict]) -> dict:
    ranks = [r["rank"] for r in rows]
    shares = [r["share_of_best"] for r in rows if r["share_of_best"] is not None]
    return {"n": len(rows), "first": sum(r == 1 for r in ranks), "top_2": sum(r <= 2 for r in ranks),
            "rank_median": statistics.median(ranks), "rank_max": max(ranks),
            "share_of_best_min": min(shares) if shares else None,
            "tied_median": statistics.median(r["tied"] for r in rows), "tied_max": max(r["tied"] for r in rows),
            "in_first_two_rounds": sum(r["in_first_two_rounds"] for r in rows if r["plan"] == "guided"),
            "guided": sum(r["plan"] == "guided" for r in rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=40)
    parser.add_argument("--tokens", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=7_000)  # not the evaluation's seed: other documents
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(DEMO_MODEL_DIR)
    settings = limits.EngineSettings().resolved(tokenizer)
    notes = load_notes()
    rows = []
    for category in CATEGORIES:
        items = long_eval.make_items(category, args.n, args.seed, args.tokens,
                                     notes=notes if category == "notes" else None)
        rows += [place(item, tokenizer, settings) for item in items]
    summary = {c: summarize([r for r in rows if r["category"] == c]) for c in CATEGORIES}
    print(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps({"settings": vars(args), "summary": summary, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
