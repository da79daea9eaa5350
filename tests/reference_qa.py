"""An independent port of transformers 5.2's question-answering pipeline (removed in 5.3), for comparison only.

Follows the pipeline's own steps literally: full outer-product span scores, `<s>` kept in the softmax and
zeroed after, `top_k * 2 + 10` spans per window, each widened to whole words with the fast tokenizer's
`token_to_word` / `word_to_chars` (`QuestionAnsweringPipeline.get_indices`, `align_to_words=True`, its default),
answers merged case-insensitively. `project_rules=True` adds what this project does on top, written out here
on their own with the tokenizer's words (`project_span`): a word cut by the window's edge is completed with the
words of the whole context, a number is never cut at its separator, white space and stray punctuation are trimmed
from the ends, and a span with no letter or digit is skipped so that the window's next span takes its place.
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


def get_indices(enc, s, e, sequence_index, align_to_words):
    """QuestionAnsweringPipeline.get_indices of transformers 5.2, unchanged."""
    if align_to_words:
        try:
            start_word = enc.token_to_word(s)
            end_word = enc.token_to_word(e)
            start_index = enc.word_to_chars(start_word, sequence_index=sequence_index)[0]
            end_index = enc.word_to_chars(end_word, sequence_index=sequence_index)[1]
        except Exception:
            start_index = enc.offsets[s][0]
            end_index = enc.offsets[e][1]
    else:
        start_index = enc.offsets[s][0]
        end_index = enc.offsets[e][1]
    return start_index, end_index


def project_span(context, words, start, end):
    """The project's rules on a pipeline answer, with the tokenizer's own words: trimmed of white space, widened to
    the words of the whole context and over the separators of a number ("48,213"), then stray punctuation cut
    from the ends, one character at a time, until nothing changes."""
    def spaces_trimmed(start, end):
        while start < end and context[start].isspace():
            start += 1
        while end > start and context[end - 1].isspace():
            end -= 1
        return start, end

    def separates_digits(i):
        return 0 < i < len(context) - 1 and context[i] in ",." and context[i - 1].isdigit() and context[i + 1].isdigit()

    start, end = spaces_trimmed(start, end)
    if start >= end:
        return start, end
    start = words.word_to_chars(words.char_to_word(start))[0]
    end = words.word_to_chars(words.char_to_word(end - 1))[1]
    while start > 0 and (separates_digits(start) or context[start].isdigit() and separates_digits(start - 1)):
        start = words.word_to_chars(words.char_to_word(start - 1))[0]
    while end < len(context) and (separates_digits(end - 1) or context[end - 1].isdigit() and separates_digits(end)):
        end = words.word_to_chars(words.char_to_word(end))[1]
    pairs = {"(": ")", "[": "]", "{": "}", ")": "(", "]": "[", "}": "{"}
    while True:
        previous = (start, end)
        start, end = spaces_trimmed(start, end)
        answer = context[start:end]
        initial = len(answer) >= 2 and answer[-2].isupper() and (len(answer) == 2 or not answer[-3].isalnum())
        if answer and (answer[0] in ",.;:!?»-–—/|" or answer[0] in pairs and pairs[answer[0]] not in answer[1:]):
            start += 1
        elif answer and (answer[-1] in ",;:!?«-–—/|" or answer[-1] == "." and not initial
                         or answer[-1] in pairs and pairs[answer[-1]] not in answer[:-1]):
            end -= 1
        if (start, end) == previous:
            return start, end


def reference_answers(model, tokenizer, question, context, max_seq_len, doc_stride, top_k=1, max_answer_len=15,
                      handle_impossible_answer=False, align_to_words=True, project_rules=True):
    enc = tokenizer(text=question, text_pair=context, truncation="only_second", max_length=max_seq_len,
                    stride=doc_stride, return_overflowing_tokens=True, return_offsets_mapping=True)
    words = tokenizer(context, add_special_tokens=False)
    answers, min_null_score = [], 1000000
    pre_topk = top_k * 2 + 10 if align_to_words else top_k
    for span in range(len(enc["input_ids"])):
        ids = enc["input_ids"][span]
        p_mask = np.array([[tok != 1 for tok in enc.sequence_ids(span)]], dtype=int)
        for cls_index in np.nonzero(np.array(ids) == tokenizer.cls_token_id)[0]:
            p_mask[0, cls_index] = 0
        attention = np.array([enc["attention_mask"][span]])
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids]), attention_mask=torch.tensor(attention))
        # With the project's rules every span of the window is ranked, in the pipeline's order, so that skipped
        # ones can be replaced; spans of score 0 (end before start, too long) are never candidates.
        asked = len(ids) ** 2 + 1 if project_rules else pre_topk
        starts, ends, scores, min_null_score = select_starts_ends(
            out.start_logits.numpy(), out.end_logits.numpy(), p_mask, attention, min_null_score, asked,
            handle_impossible_answer, max_answer_len)
        kept = 0
        for s, e, score in zip(starts, ends, scores):
            if kept == pre_topk or (project_rules and score <= 0):
                break
            start_index, end_index = get_indices(enc[span], s, e, 1, align_to_words)
            if project_rules:
                start_index, end_index = project_span(context, words, start_index, end_index)
                if not any(ch.isalnum() for ch in context[start_index:end_index]):
                    continue
            kept += 1
            target = context[start_index:end_index]
            match = next((a for a in answers if a["answer"].lower() == target.lower()), None)
            if match:
                match["score"] += score.item()
            else:
                answers.append({"score": score.item(), "start": start_index, "end": end_index, "answer": target})
    if handle_impossible_answer:
        answers.append({"score": min_null_score, "start": 0, "end": 0, "answer": ""})
    return sorted(answers, key=lambda x: x["score"], reverse=True)[:top_k]


def cuts_a_word(text, start, end):
    """Whether `text[start:end]` starts or ends inside a word: a letter on both sides of an edge, or a digit on
    both, or an edge at the separator of a number ("48|,213"). Letters and digits are different words, as for the
    pipeline, so "1990" of "1990s" is a whole word."""
    def same_run(a, b):
        return (a.isalpha() and b.isalpha()) or (a.isdigit() and b.isdigit())

    def in_number(i):  # text[i] is a separator between digits
        return 0 < i < len(text) - 1 and text[i] in ",." and text[i - 1].isdigit() and text[i + 1].isdigit()

    return (0 < start < len(text) and (same_run(text[start - 1], text[start]) or in_number(start - 1)
                                       or in_number(start))) or \
        (0 < end < len(text) and (same_run(text[end - 1], text[end]) or in_number(end) or in_number(end - 1)))
