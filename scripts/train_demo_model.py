"""Train the demo model from scratch on CPU: a tiny Longformer QA model for the fact-finding task.

Usage: python scripts/train_demo_model.py [--steps 12000] [--minutes 100] [--run-dir results/demo-model-training]
       python scripts/train_demo_model.py --resume [--minutes 100]     # go on where the last sitting stopped
       python scripts/train_demo_model.py --resume --more-steps 6000   # a finished run, trained further
Builds a byte-level BPE tokenizer, then trains on short generated contexts of the classic and the broad task
(`training.demo_task`), with windows that do not hold the fact (target `<s>`), and the fused-attention swap, which
computes the same function as the eager attention the saved model runs with. A checkpoint is written every
--save-every steps and a validation measure (held-out classic, broad and short-note batches) every --validate-every
steps to RUN_DIR/validation.jsonl. The finished model goes to RUN_DIR/model, never over the shipped
longqa/demo_model: copy it there after `python -m evals demo-model --model RUN_DIR/model` says it is better.
This is a one-off build script, not part of the product's runtime.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path

import torch
from tokenizers import ByteLevelBPETokenizer
from tokenizers.processors import RobertaProcessing
from transformers import LongformerConfig, LongformerForQuestionAnswering, PreTrainedTokenizerFast

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from training import broad_task, demo_task  # noqa: E402
from strategies.fast_attention import swap_attention  # noqa: E402

MAX_POSITIONS = 4098  # 4,096 usable tokens, like the real checkpoints
SPECIAL_TOKENS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def build_tokenizer(out: Path, vocab_size: int, seed: int = 12345, n_facts: int = 40000) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on the training prose and on facts and questions of both the classic and the broad
    task, so names' syllables and the templates' words get whole tokens."""
    classic = demo_task.FactWriter(seed, "train", with_licenses=True)
    broad = broad_task.BroadFactWriter(seed + 1, "train", with_licenses=True)
    corpus = list(demo_task.filler_pool("train", True)) + list(broad_task._TRAIN_REGISTERS)
    for index in range(n_facts):
        writer = broad if index % 2 else classic
        fact = writer.target()
        corpus.append(fact.sentence)
        corpus.append(fact.question)
        corpus.append(demo_task.generated_sentence(classic.rng))
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


STAGES = [  # (name, context tokens, chars per token of filler, p(answer present), max distractors, p(broad task))
    ("facts", (48, 112), (0.0, 0.3), 0.90, (2, 1, 0), 0.7),  # facts nearly alone: learn to match entity and attribute
    ("notes", (40, 160), (0.2, 0.6), 0.85, (2, 2, 1), 0.9),  # short notes, the fact first, last or among a few others
    ("prose", (96, 256), (0.4, 1.0), 0.70, (4, 3, 2), 0.8),  # prose around them, and windows without the answer
    ("mix", (160, 384), (0.8, 1.3), 0.60, (5, 3, 4), 0.8),  # the evaluation mix
]
CURRICULUM = [  # (until this fraction of the steps, weight of each stage): mixed, so no stage is ever forgotten
    (0.15, (1.0, 0.0, 0.0, 0.0)),
    (0.40, (0.3, 0.3, 0.4, 0.0)),
    (1.00, (0.1, 0.2, 0.3, 0.4)),
]


def stage_for(fraction: float, rng: random.Random):
    weights = next((w for until, w in CURRICULUM if fraction <= until), CURRICULUM[-1][1])
    return rng.choices(STAGES, weights=weights)[0]


def make_batch(tokenizer, rng: random.Random, seed_base: int, stage, batch_size: int, split: str = "train"):
    _, (lo, hi), (f_lo, f_hi), p_present, (max_a, max_e, max_u), p_broad = stage
    length = rng.randint(lo, hi)
    questions, contexts, answers = [], [], []
    for _ in range(batch_size):
        writer_class = broad_task.BroadFactWriter if rng.random() < p_broad else demo_task.FactWriter
        writer = writer_class(rng.getrandbits(48) ^ seed_base, split, with_licenses=(split == "train"))
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


def learning_rate(step: int, args) -> float:
    """Linear warm-up, then cosine down to a tenth, from `args.schedule_from` (0, or where --more-steps began) to
    `args.steps`; by step, so a resumed run continues it."""
    done = step - args.schedule_from
    progress = min(1.0, done / max(args.steps - args.schedule_from, 1))
    return args.lr * min(1.0, (done + 1) / args.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def validation_sets(tokenizer, batches: int = 4, size: int = 64) -> dict[str, list[dict]]:
    """Fixed held-out batches (the test filler split, seeds training never draws): the classic task's evaluation
    mix, the broad task's, and short notes. Built once, so every measure compares the same examples."""
    sets = {}
    for name, stage in (("classic", STAGES[-1][:-1] + (0.0,)), ("broad", STAGES[-1][:-1] + (1.0,)),
                        ("notes", STAGES[1][:-1] + (1.0,))):
        rng = random.Random(f"validation-{name}")
        sets[name] = [make_batch(tokenizer, rng, 7_000_000, stage, size, split="test") for _ in range(batches)]
    return sets


def measure(model, sets: dict[str, list[dict]]) -> dict[str, float]:
    """Exact match of the best span (answer or `<s>`), and of answer spans alone where the fact is present."""
    model.eval()
    numbers = {}
    with torch.no_grad():
        for name, batches in sets.items():
            outputs = [(forward(model, b), b) for b in batches]
            numbers[f"{name}_em"] = sum(exact_match(*out, b) for out, b in outputs) / len(outputs)
            numbers[f"{name}_em_pos"] = sum(exact_match(*out, b, positives_only=True) for out, b in outputs) / len(outputs)
    model.train()
    return {k: round(v, 4) for k, v in numbers.items()}


def save_checkpoint(path: Path, model, optimizer, step: int, rng: random.Random, ema, elapsed_s: float, args) -> None:
    """Everything a run needs to go on where it stopped; written aside and renamed, so a kill never leaves half."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step, "ema": ema,
             "rng": rng.getstate(), "torch_rng": torch.get_rng_state(), "elapsed_s": elapsed_s,
             "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}}
    partial = path.with_suffix(".tmp")
    torch.save(state, partial)
    os.replace(partial, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", type=Path, default=Path("results/demo-model-training"),
                        help="tokenizer, checkpoint, validation log and the finished model go here")
    parser.add_argument("--out", type=Path, help="where the finished model is saved (default RUN_DIR/model)")
    parser.add_argument("--resume", action="store_true", help="go on from RUN_DIR/checkpoint.pt")
    parser.add_argument("--steps", type=int, default=12000, help="total optimizer steps of the whole run")
    parser.add_argument("--more-steps", type=int, default=0,
                        help="with --resume: lengthen the run by this many steps (the learning rate warms up again "
                             "from the schedule's end and decays over the new steps)")
    parser.add_argument("--minutes", type=float, help="stop this sitting after so many minutes (checkpoint kept)")
    parser.add_argument("--sitting-steps", type=int, help="stop this sitting after so many steps (checkpoint kept)")
    parser.add_argument("--validate-every", type=int, default=250)
    parser.add_argument("--validation-batches", type=int, default=4, help="per validation set")
    parser.add_argument("--validation-size", type=int, default=64, help="examples in a validation batch")
    parser.add_argument("--save-every", type=int, default=250)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--ffn", type=int, default=512)
    parser.add_argument("--window", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--tokenizer-facts", type=int, default=40000, help="facts in the tokenizer's corpus")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, help="peak learning rate (default 5e-4; with --more-steps, the new peak)")
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    args.schedule_from = 0
    torch.set_num_threads(args.threads)
    run_dir, out = args.run_dir, args.out or args.run_dir / "model"
    checkpoint_path = run_dir / "checkpoint.pt"
    tokenizer_dir = run_dir / "tokenizer"
    if args.resume:
        checkpoint = torch.load(checkpoint_path, weights_only=False)
        lr_given = args.lr
        kept = ("hidden", "layers", "heads", "ffn", "window", "vocab", "steps", "lr", "warmup", "batch")
        for name in kept:  # the model's shape and the schedule are the run's; only the sitting's limits change
            setattr(args, name, checkpoint["args"][name])
        args.schedule_from = checkpoint["args"].get("schedule_from", 0)
        if args.more_steps:  # a new warm-up and decay over the added steps, at --lr if given
            args.schedule_from, args.steps = checkpoint["step"], checkpoint["step"] + args.more_steps
            args.lr = lr_given or args.lr
        tokenizer = PreTrainedTokenizerFast.from_pretrained(tokenizer_dir)
    else:
        if checkpoint_path.exists():
            raise SystemExit(f"{checkpoint_path} exists: pass --resume to go on, or choose another --run-dir")
        run_dir.mkdir(parents=True, exist_ok=True)
        tokenizer = build_tokenizer(tokenizer_dir, args.vocab, n_facts=args.tokenizer_facts)
        checkpoint = None
        args.lr = args.lr or 5e-4
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    model = build_model(len(tokenizer), args)
    swap_attention(model)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01, betas=(0.9, 0.98))
    step, ema, elapsed_before = 0, None, 0.0
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        step, ema, elapsed_before = checkpoint["step"], checkpoint["ema"], checkpoint["elapsed_s"]
        rng.setstate(checkpoint["rng"])
        torch.set_rng_state(checkpoint["torch_rng"])
        print(f"resumed at step {step} of {args.steps} ({elapsed_before / 60:.1f} min so far)", flush=True)
    model.train()
    print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M", flush=True)
    validation = validation_sets(tokenizer, batches=args.validation_batches, size=args.validation_size)
    log = (run_dir / "validation.jsonl").open("a")

    began = time.time()
    limit_s = args.minutes * 60 if args.minutes else float("inf")
    last_step = min(args.steps, step + args.sitting_steps) if args.sitting_steps else args.steps
    while step < last_step and time.time() - began < limit_s:
        lr = learning_rate(step, args)
        for group in optimizer.param_groups:
            group["lr"] = lr
        batch = make_batch(tokenizer, rng, 0, stage_for(step / args.steps, rng), args.batch)
        start_logits, end_logits = forward(model, batch)
        loss = span_loss(start_logits, end_logits, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        step += 1
        elapsed = elapsed_before + time.time() - began
        if step % args.validate_every == 0 or step == args.steps:
            numbers = {"step": step, "minutes": round(elapsed / 60, 1), "lr": lr, "loss": round(ema, 4),
                       **measure(model, validation)}
            log.write(json.dumps(numbers) + "\n")
            log.flush()
            print(" ".join(f"{k}={v}" for k, v in numbers.items()), flush=True)
        if step % args.save_every == 0 or step == args.steps:
            save_checkpoint(checkpoint_path, model, optimizer, step, rng, ema, elapsed, args)
    save_checkpoint(checkpoint_path, model, optimizer, step, rng, ema, elapsed_before + time.time() - began, args)
    if step >= args.steps:
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        print(f"finished: {step} steps, model in {out}", flush=True)
    else:
        print(f"stopped at step {step} of {args.steps}; go on with: python scripts/train_demo_model.py --resume "
              f"--run-dir {run_dir}", flush=True)


if __name__ == "__main__":
    main()
