"""The full read's windows as the tokenizer cuts them itself, in one call over each whole document (its overflow:
`truncation="only_second"`, `return_overflowing_tokens=True`), for comparison only: what `make_windows` gave before
it tokenized a document a chunk at a time, kept as the reference its windows are checked against token for token.
"""

from __future__ import annotations

import numpy as np

from longqa_core.documents import Document
from longqa_core.limits import EngineSettings
from longqa_core.windows import DocumentStats, Window, trim_offset


def windows_by_overflow(tokenizer, question: str, documents: list[Document],
                        settings: EngineSettings) -> tuple[list[Window], list[DocumentStats]]:
    settings = settings.resolved(tokenizer)
    windows: list[Window] = []
    stats: list[DocumentStats] = []
    for index, document in enumerate(documents):
        encoded = tokenizer(question, document.text, truncation="only_second", max_length=settings.max_seq_len,
                            stride=settings.doc_stride, return_overflowing_tokens=True,
                            return_offsets_mapping=True)
        n_windows = len(encoded["input_ids"])
        covered = 0
        for w in range(n_windows):
            sequence_ids = encoded.sequence_ids(w)
            context = np.array([s == 1 for s in sequence_ids], dtype=bool)  # (L,)
            first_sep = sequence_ids.index(None, 1)  # the `</s>` after the question
            offsets = [trim_offset(document.text, start, end) if in_context else (start, end)
                       for (start, end), in_context in zip(encoded["offset_mapping"][w], context)]
            windows.append(Window(index, np.asarray(encoded["input_ids"][w], dtype=np.int32),  # (L,)
                                  np.asarray(offsets, dtype=np.int64).reshape(-1, 2), context, first_sep))  # (L, 2)
            covered += int(context.sum())
        tokens = covered - settings.doc_stride * (n_windows - 1)
        stats.append(DocumentStats(document.name, len(document.text), max(tokens, 0), n_windows))
    return windows, stats
