"""Train the bundled demo model from scratch on CPU: a tiny Longformer QA model for the fact-finding task.

Usage: python scripts/train_demo_model.py [--minutes 70] [--out longqa/demo_model]
Builds a byte-level BPE tokenizer, then trains on short generated contexts (with the fused-attention swap,
which computes the same function as the eager attention the saved model runs with). This is a one-off
build script, not part of the product's runtime.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path

import torch
from tokenizers import ByteLevelBPETokenizer
from tokenizers.processors import RobertaProcessing
from transformers import LongformerConfig, LongformerForQuestionAnswering, PreTrainedTokenizerFast

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from longqa import demo_task  # noqa: E402
from strategies.fast_attention import swap_attention  # noqa: E402

MAX_POSITIONS = 4098  # 4,096 usable tokens, like the real checkpoints
SPECIAL_TOKENS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def build_tokenizer(out: Path, vocab_size: int, seed: int = 12345) -> PreTrainedTokenizerFast:
    rng_writer = demo_task.FactWriter(seed, "train", with_licenses=True)
    corpus = list(demo_task.filler_pool("train", True))
    for _ in range(40000):
        fact = rng_writer.target()
        corpus.append(fact.sentence)
        corpus.append(fact.question)
        corpus.append(demo_task.generated_sentence(rng_writer.rng))
    bpe = ByteLevelBPETokenizer(add_prefix_space=True, trim_offsets=True)
    bpe.train_from_iterator(corpus, vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIAL_TOKENS)
    bpe.post_processor = RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True, add_prefix_space=True)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>", sep_token="</s>", cls_token="<s>",
        unk_token="<unk>", pad_token="<pad>", mask_token="<mask>", model_max_length=MAX_POSITIONS - 2)
    tokenizer.save_pretrained(out)
    return tokenizer


def sinusoid(positions: int, dim: int, scale: float) -> torch.Tensor:
    pos = torch.arange(positions, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(positions, dim)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)
    return table * scale


def build_model(vocab_size: int, args) -> LongformerForQuestionAnswering:
    config = LongformerConfig(
        vocab_size=vocab_size, hidden_size=args.hidden, num_hidden_layers=args.layers,
        num_attention_heads=args.heads, intermediate_size=args.ffn, attention_window=[args.window] * args.layers,
        max_position_embeddings=MAX_POSITIONS, pad_token_id=1, bos_token_id=0, eos_token_id=2, sep_token_id=2,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, initializer_range=0.05, type_vocab_size=1)
    model = LongformerForQuestionAnswering(config)
    # Fixed sinusoidal positions: every one of the 4,098 positions is meaningful without having to be trained.
    positions = model.longformer.embeddings.position_embeddings
    positions.weight.data.copy_(sinusoid(MAX_POSITIONS, args.hidden, scale=0.05))
    positions.weight.requires_grad_(False)
    # Symmetric query/key at the start: tokens first attend to tokens like themselves, the seed of the
    # "does this sentence name what the question names" circuit the task needs.
    for layer in model.longformer.encoder.layer:
        attention = layer.attention.self
        attention.key.weight.data.copy_(attention.query.weight.data)
        attention.key_global.weight.data.copy_(attention.query_global.weight.data)
    return model


STAGES = [  # (name, context tokens, chars per token of filler, p(answer present), max distractors)
    ("facts", (48, 112), (0.0, 0.3), 0.90, (2, 1, 0)),  # facts nearly alone: learn to match entity and attribute
    ("prose", (96, 256), (0.4, 1.0), 0.75, (4, 3, 2)),  # prose around them, and windows without the answer
    ("mix", (160, 384), (0.8, 1.3), 0.65, (5, 3, 4)),  # the evaluation mix
]
CURRICULUM = [  # (until this fraction of the time, weight of each stage): mixed, so no stage is ever forgotten
    (0.20, (1.0, 0.0, 0.0)),
    (0.45, (0.3, 0.7, 0.0)),
    (1.00, (0.1, 0.3, 0.6)),
]


def stage_for(fraction: float, rng: random.Random):
    weights = next((w for until, w in CURRICULUM if fraction <= until), CURRICULUM[-1][1])
    return rng.choices(STAGES, weights=weights)[0]


def make_batch(tokenizer, rng: random.Random, seed_base: int, stage, batch_size: int, split: str = "train"):
    _, (lo, hi), (f_lo, f_hi), p_present, (max_a, max_e, max_u) = stage
    length = rng.randint(lo, hi)
    questions, contexts, answers = [], [], []
    for _ in range(batch_size):
        writer = demo_task.FactWriter(rng.getrandbits(48) ^ seed_base, split, with_licenses=(split == "train"))
        target = writer.target()
        others = writer.distractors(target, rng.randint(0, max_a), rng.randint(0, max_e), rng.randint(0, max_u))
        include = rng.random() < p_present
        n_chars = int(length * 4 * rng.uniform(f_lo, f_hi))
        example = writer.document(n_chars, target, others, include_target=include)
        questions.append(example.question)
        contexts.append(example.text)
        answers.append((example.answer_start, example.answer_end) if include else None)
    enc = tokenizer(questions, contexts, truncation="only_second", max_length=length, padding="longest",
                    return_offsets_mapping=True, return_tensors="pt")
    ids = enc["input_ids"]  # (B, L)
    batch, seq = ids.shape
    starts = torch.zeros(batch, dtype=torch.long)
    ends = torch.zeros(batch, dtype=torch.long)
    context_mask = torch.zeros(batch, seq, dtype=torch.bool)
    for row in range(batch):
        seq_ids = enc.sequence_ids(row)
        context_mask[row] = torch.tensor([s == 1 for s in seq_ids])
        if answers[row] is None:
            continue
        a_start, a_end = answers[row]
        offsets = enc["offset_mapping"][row]
        tok_start = [i for i in range(seq) if seq_ids[i] == 1 and offsets[i][0] <= a_start < offsets[i][1]]
        tok_end = [i for i in range(seq) if seq_ids[i] == 1 and offsets[i][0] < a_end <= offsets[i][1]]
        if tok_start and tok_end:  # else the fact was truncated away: a negative (answer at <s>)
            starts[row], ends[row] = tok_start[0], tok_end[0]
    attention = enc["attention_mask"]
    first_sep = (ids == 2).int().argmax(dim=1)  # (B,)
    global_mask = (torch.arange(seq)[None, :] < first_sep[:, None]).long()  # <s> + question
    # Context positions jump by a random offset so every position of a 4,096-token window is used.
    positions = torch.arange(seq)[None, :].repeat(batch, 1) + 2
    offsets_pos = torch.tensor([rng.randint(0, MAX_POSITIONS - 2 - seq) for _ in range(batch)])
    positions = positions + context_mask.long() * offsets_pos[:, None]
    positions = torch.where(attention.bool(), positions, torch.ones_like(positions))
    candidates = context_mask.clone()
    candidates[:, 0] = True  # <s> is where "not in this window" goes, as in the classic pipeline
    return dict(input_ids=ids, attention_mask=attention, global_attention_mask=global_mask, position_ids=positions,
                candidates=candidates, starts=starts, ends=ends)


def span_loss(start_logits, end_logits, batch):
    neg = torch.finfo(start_logits.dtype).min
    s = start_logits.masked_fill(~batch["candidates"], neg)
    e = end_logits.masked_fill(~batch["candidates"], neg)
    return (torch.nn.functional.cross_entropy(s, batch["starts"]) + torch.nn.functional.cross_entropy(e, batch["ends"])) / 2


def exact_match(start_logits, end_logits, batch, max_answer_len: int = 15, positives_only: bool = False) -> float:
    neg = torch.finfo(start_logits.dtype).min
    candidates = batch["candidates"].clone()
    if positives_only:
        candidates[:, 0] = False  # as the engine decodes: `<s>` never is an answer
    ps = start_logits.masked_fill(~candidates, neg).softmax(-1)
    pe = end_logits.masked_fill(~candidates, neg).softmax(-1)
    outer = ps[:, :, None] * pe[:, None, :]  # (B, L, L)
    outer = torch.triu(outer) - torch.triu(outer, diagonal=max_answer_len)
    flat = outer.flatten(1).argmax(-1)
    s, e = flat // outer.shape[-1], flat % outer.shape[-1]
    hits = (s == batch["starts"]) & (e == batch["ends"])
    if positives_only:
        hits = hits[batch["starts"] > 0]
    return hits.float().mean().item() if hits.numel() else 0.0


def forward(model, batch):
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                global_attention_mask=batch["global_attention_mask"], position_ids=batch["position_ids"])
    return out.start_logits, out.end_logits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("longqa/demo_model"))
    parser.add_argument("--minutes", type=float, default=80.0)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--ffn", type=int, default=512)
    parser.add_argument("--window", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=10**9)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)

    tokenizer = build_tokenizer(args.out, args.vocab)
    model = build_model(len(tokenizer), args)
    swap_attention(model)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M", flush=True)
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01, betas=(0.9, 0.98))
    val_rng = random.Random(999)
    validation = [make_batch(tokenizer, val_rng, 7_000_000, STAGES[-1], 64, split="test") for _ in range(4)]

    budget_s = args.minutes * 60
    began = time.time()
    step, ema = 0, None
    while step < args.max_steps:
        fraction = (time.time() - began) / budget_s
        if fraction >= 1.0:
            break
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * fraction)))
        for group in optimizer.param_groups:
            group["lr"] = lr
        batch = make_batch(tokenizer, rng, 0, stage_for(fraction, rng), args.batch)
        start_logits, end_logits = forward(model, batch)
        loss = span_loss(start_logits, end_logits, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        step += 1
        if step % 200 == 0:
            model.eval()
            with torch.no_grad():
                em = sum(exact_match(*forward(model, b), b) for b in validation) / len(validation)
                em_pos = sum(exact_match(*forward(model, b), b, positives_only=True) for b in validation) / len(validation)
                train_pos = exact_match(start_logits, end_logits, batch, positives_only=True)
            model.train()
            elapsed = time.time() - began
            print(f"step {step} t={elapsed / 60:.1f}m lr={lr:.2e} loss={ema:.3f} val_em={em:.3f} val_em_pos={em_pos:.3f} train_em_pos={train_pos:.3f}", flush=True)
            if step % 1000 == 0:
                model.save_pretrained(args.out)
    model.save_pretrained(args.out)
    print(f"saved {args.out} after {step} steps", flush=True)


if __name__ == "__main__":
    main()
