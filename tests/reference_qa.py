"""An independent port of transformers 5.2's question-answering pipeline (removed in 5.3), for comparison only.

Follows the pipeline's own steps literally: full outer-product span scores, `<s>` kept in the softmax and
zeroed after, top-k per window, answers merged case-insensitively. align_to_words=False (token offsets).
"""

from __future__ import annotations

import numpy as np
import torch


def decode_spans(start, end, topk, max_answer_len, undesired_tokens):
    if start.ndim == 1:
        start = start[None]
    if end.ndim == 1:
        end = end[None]
    outer = np.matmul(np.expand_dims(start, -1), np.expand_dims(end, 1))
    candidates = np.tril(np.triu(outer), max_answer_len - 1)
    scores_flat = candidates.flatten()
    if topk == 1:
        idx_sort = [np.argmax(scores_flat)]
    elif len(scores_flat) < topk:
        idx_sort = np.argsort(-scores_flat)
    else:
        idx = np.argpartition(-scores_flat, topk)[0:topk]
        idx_sort = idx[np.argsort(-scores_flat[idx])]
    starts, ends = np.unravel_index(idx_sort, candidates.shape)[1:]
    desired = np.isin(starts, undesired_tokens.nonzero()) & np.isin(ends, undesired_tokens.nonzero())
    starts, ends = starts[desired], ends[desired]
    return starts, ends, candidates[0, starts, ends]


def select_starts_ends(start, end, p_mask, attention_mask, min_null_score=1000000, top_k=1,
                       handle_impossible_answer=False, max_answer_len=15):
    undesired_tokens = np.abs(np.array(p_mask) - 1)
    if attention_mask is not None:
        undesired_tokens = undesired_tokens & attention_mask
    undesired_tokens_mask = undesired_tokens == 0.0
    start = np.where(undesired_tokens_mask, -10000.0, start)
    end = np.where(undesired_tokens_mask, -10000.0, end)
    start = np.exp(start - start.max(axis=-1, keepdims=True))
    start = start / start.sum()
    end = np.exp(end - end.max(axis=-1, keepdims=True))
    end = end / end.sum()
    if handle_impossible_answer:
        min_null_score = min(min_null_score, (start[0, 0] * end[0, 0]).item())
    start[0, 0] = end[0, 0] = 0.0
    starts, ends, scores = decode_spans(start, end, top_k, max_answer_len, undesired_tokens)
    return starts, ends, scores, min_null_score


def reference_answers(model, tokenizer, question, context, max_seq_len, doc_stride, top_k=1, max_answer_len=15,
                      handle_impossible_answer=False):
    enc = tokenizer(text=question, text_pair=context, truncation="only_second", max_length=max_seq_len,
                    stride=doc_stride, return_overflowing_tokens=True, return_offsets_mapping=True)
    answers, min_null_score = [], 1000000
    for span in range(len(enc["input_ids"])):
        ids = enc["input_ids"][span]
        p_mask = np.array([[tok != 1 for tok in enc.sequence_ids(span)]], dtype=int)
        for cls_index in np.nonzero(np.array(ids) == tokenizer.cls_token_id)[0]:
            p_mask[0, cls_index] = 0
        attention = np.array([enc["attention_mask"][span]])
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids]), attention_mask=torch.tensor(attention))
        starts, ends, scores, min_null_score = select_starts_ends(
            out.start_logits.numpy(), out.end_logits.numpy(), p_mask, attention, min_null_score, top_k,
            handle_impossible_answer, max_answer_len)
        offsets = enc["offset_mapping"][span]
        for s, e, score in zip(starts, ends, scores):
            start_index, end_index = offsets[s][0], offsets[e][1]
            target = context[start_index:end_index]
            match = next((a for a in answers if a["answer"].lower() == target.lower()), None)
            if match:
                match["score"] += score.item()
            else:
                answers.append({"score": score.item(), "start": start_index, "end": end_index, "answer": target})
    if handle_impossible_answer:
        answers.append({"score": min_null_score, "start": 0, "end": 0, "answer": ""})
    return sorted(answers, key=lambda x: x["score"], reverse=True)[:top_k]
