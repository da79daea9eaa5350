"""The long-document QA engine: windows, batches, forward passes, span decoding, one result with readouts.

It receives a ready runner (model), a tokenizer and settings; it never loads a model (strategies.loader does),
and it never formats numbers for people (the UI does).
"""

from __future__ import annotations

import contextlib
import gc
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Protocol

import numpy as np
import torch
from accelerate.utils.memory import clear_device_cache, should_reduce_batch_size

from longqa import telemetry
from longqa.documents import Document, clean_text
from longqa.errors import InputError, OutOfMemoryError
from longqa.spans import Candidate, merge_candidates, window_candidates

DEFAULT_MAX_TOTAL_TOKENS = 2_000_000
FIT_PROFILES_HINT = ("consumer-gpu (bitsandbytes quantization + CPU offload) or cpu; "
                     "or lower --max-seq-len")


@dataclass(frozen=True)
class EngineSettings:
    max_seq_len: int | None = None  # None: the tokenizer's limit (4,096 for the real checkpoints)
    doc_stride: int | None = None  # overlap of consecutive windows in tokens; None: min(max_seq_len // 2, 128)
    max_question_len: int = 64
    max_answer_len: int = 15
    top_k: int = 1
    batch_size: int = 1
    adaptive_batching: bool = False  # halve the batch on out-of-memory (the dynamic batching strategy)
    handle_impossible_answer: bool = False
    max_total_tokens: int = DEFAULT_MAX_TOTAL_TOKENS

    def resolved(self, tokenizer) -> "EngineSettings":
        """Fill in the window length and stride for this tokenizer, and check they make sense."""
        limit = int(getattr(tokenizer, "model_max_length", 4096) or 4096)
        limit = min(limit, 4096) if limit > 10**8 else limit  # tokenizers without a limit report a huge number
        max_seq_len = self.max_seq_len or limit
        if max_seq_len > limit:
            raise InputError(f"max_seq_len {max_seq_len} is over this model's limit of {limit} tokens.")
        doc_stride = self.doc_stride if self.doc_stride is not None else min(max_seq_len // 2, 128)
        if self.batch_size < 1 or self.top_k < 1 or self.max_answer_len < 1:
            raise InputError("batch_size, top_k and max_answer_len must each be at least 1.")
        if self.max_question_len < 1:
            raise InputError("max_question_len must be at least 1.")
        if max_seq_len < self.max_question_len + 8:
            raise InputError(f"max_seq_len {max_seq_len} leaves no room for the document after the question.")
        if not 0 <= doc_stride < max_seq_len - self.max_question_len - 3:
            raise InputError(f"doc_stride {doc_stride} must be smaller than the room for the document in a "
                             f"{max_seq_len}-token window.")
        return replace(self, max_seq_len=max_seq_len, doc_stride=doc_stride)


@dataclass
class BatchState:
    """The batch size that last worked for a loaded model, and how many out-of-memory back-offs happened."""

    size: int
    backoffs: int = 0


class Runner(Protocol):
    devices: list[torch.device]

    def __call__(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]: ...


class ModelRunner:
    """Runs a batch on one model: inputs to its device, inference mode plus the strategies' context."""

    def __init__(self, model: torch.nn.Module, context_factory: Callable = contextlib.nullcontext, device=None):
        self.model = model
        self.context_factory = context_factory
        self.device = torch.device(device) if device is not None else _input_device(model)
        self.devices = _model_devices(model) or [self.device]

    def __call__(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        inputs = {name: tensor.to(self.device) for name, tensor in batch.items()}
        with torch.inference_mode(), self.context_factory():
            out = self.model(**inputs)
        return out.start_logits.float().cpu(), out.end_logits.float().cpu()  # (B, L) each


def _input_device(model: torch.nn.Module) -> torch.device:
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if embeddings is not None and embeddings.weight.device.type != "meta":
        return embeddings.weight.device
    for parameter in model.parameters():
        if parameter.device.type != "meta":
            return parameter.device
    return torch.device("cpu")


def _model_devices(model: torch.nn.Module) -> list[torch.device]:
    seen: list[torch.device] = []
    for parameter in model.parameters():
        if parameter.device.type not in ("meta",) and parameter.device not in seen:
            seen.append(parameter.device)
    return seen


@dataclass
class Window:
    """One model input: `<s> question </s></s> context-slice </s>` with offsets into its document."""

    document_index: int
    input_ids: list[int]
    offsets: list[tuple[int, int]]
    context: np.ndarray  # (L,) bool: tokens of the document
    n_global: int  # `<s>` and the question tokens: the positions with global attention


@dataclass
class DocumentStats:
    name: str
    chars: int
    tokens: int
    windows: int


@dataclass
class Answer:
    text: str
    score: float
    document: str | None
    document_index: int
    start_char: int
    end_char: int


@dataclass
class QAResult:
    question: str
    answers: list[Answer]
    documents: list[DocumentStats]
    windows: int
    tokens: int
    batch_size: int
    backoffs: int
    latency_s: dict[str, float]
    memory: dict
    notices: list[str] = field(default_factory=list)
    window_tokens: int = 0  # the longest window, in tokens (what the memory planner needs)

    @property
    def tokens_per_s(self) -> float | None:
        total = self.latency_s.get("total") or 0.0
        return self.tokens / total if total > 0 else None

    def to_dict(self, **extra) -> dict:
        """The JSON readout shared by the CLI's --json and the web API's last output."""
        out = asdict(self)
        out["tokens_per_s"] = self.tokens_per_s
        out.update(extra)
        return out


def truncate_question(tokenizer, question: str, max_question_len: int) -> tuple[str, str | None]:
    """Cut the question to `max_question_len` tokens; returns the text and a notice when it was cut."""
    encoding = tokenizer(question, add_special_tokens=False, return_offsets_mapping=True)
    if len(encoding["input_ids"]) <= max_question_len:
        return question, None
    cut = encoding["offset_mapping"][max_question_len - 1][1]
    notice = (f"The question was {len(encoding['input_ids'])} tokens long and was cut to its first "
              f"{max_question_len} tokens.")
    return question[:cut], notice


def trim_offset(text: str, start: int, end: int) -> tuple[int, int]:
    """The token's character span without surrounding white space.

    The tokenizer leaves the leading space on the first context token of an overflowing window; trimmed, the
    same token has the same span in every window and answers never start with a space.
    """
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def make_windows(tokenizer, question: str, documents: list[Document],
                 settings: EngineSettings) -> tuple[list[Window], list[DocumentStats]]:
    """Windows of every document, question first, overlapping by `doc_stride` tokens (the pipeline's meaning)."""
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
            # Question tokens' offsets point into the question, not the document: only context ones are trimmed.
            offsets = [trim_offset(document.text, start, end) if in_context else (start, end)
                       for (start, end), in_context in zip(encoded["offset_mapping"][w], context)]
            windows.append(Window(index, encoded["input_ids"][w], offsets, context, first_sep))
            covered += int(context.sum())
        tokens = covered - settings.doc_stride * (n_windows - 1)
        stats.append(DocumentStats(document.name, len(document.text), max(tokens, 0), n_windows))
    return windows, stats


def collate(windows: list[Window], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Pad windows to the longest one; global attention on `<s>` and the question tokens."""
    length = max(len(w.input_ids) for w in windows)
    input_ids = torch.full((len(windows), length), pad_token_id, dtype=torch.long)  # (B, L)
    attention_mask = torch.zeros((len(windows), length), dtype=torch.long)  # (B, L)
    global_attention_mask = torch.zeros((len(windows), length), dtype=torch.long)  # (B, L)
    for row, window in enumerate(windows):
        input_ids[row, : len(window.input_ids)] = torch.tensor(window.input_ids)
        attention_mask[row, : len(window.input_ids)] = 1
        global_attention_mask[row, : window.n_global] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask,
            "global_attention_mask": global_attention_mask}


def is_out_of_memory(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or should_reduce_batch_size(exc)


def run_windows(runner: Runner, windows: list[Window], pad_token_id: int, settings: EngineSettings,
                batch_state: BatchState, on_progress: Callable[[int, int], None] | None = None):
    """Start/end logits of every window, in batches; on out-of-memory halve the batch and go on.

    Finished windows are kept (never recomputed); the size that worked stays in `batch_state` for the next
    request. Without adaptive batching, or at batch size 1, out-of-memory is a clear OutOfMemoryError.
    """
    logits: list[tuple[np.ndarray, np.ndarray]] = []
    size = max(1, batch_state.size if settings.adaptive_batching else settings.batch_size)
    done = 0
    while done < len(windows):
        chunk = windows[done: done + size]
        try:
            start, end = runner(collate(chunk, pad_token_id))  # (B, L) each
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            del exc
            gc.collect()
            clear_device_cache()
            if not settings.adaptive_batching or size == 1:
                raise OutOfMemoryError(
                    f"Out of memory at batch size {size} with {settings.max_seq_len}-token windows. "
                    f"Try a profile that offloads or quantizes: {FIT_PROFILES_HINT}.") from None
            size = max(1, size // 2)
            batch_state.size = size
            batch_state.backoffs += 1
            continue
        for row, window in enumerate(chunk):
            n = len(window.input_ids)
            logits.append((start[row, :n].numpy(), end[row, :n].numpy()))
        done += len(chunk)
        if on_progress is not None:
            on_progress(done, len(windows))
    if settings.adaptive_batching:
        batch_state.size = size
    return logits, size


def decode_answers(windows: list[Window], logits, documents: list[Document],
                   settings: EngineSettings) -> list[Answer]:
    """Every window's word-aligned candidates, merged across windows; never an empty or punctuation answer."""
    found: list[Candidate] = []
    null_score = 1_000_000.0
    for window, (start, end) in zip(windows, logits):
        candidates, window_null = window_candidates(start, end, window.context, window.offsets,
                                                    documents[window.document_index].text, window.document_index,
                                                    settings.top_k, settings.max_answer_len)
        null_score = min(null_score, window_null)
        found.extend(candidates)
    merged = merge_candidates(found, settings.top_k, null_score if settings.handle_impossible_answer else None)
    return [Answer(c.text, c.score, documents[c.document_index].name if c.document_index >= 0 else None,
                   c.document_index, c.start_char, c.end_char) for c in merged]


def validate_request(documents: list[Document], question: str) -> str:
    """The question cleaned like document text (no control or zero-width characters, white space collapsed);
    InputError when nothing is left of it or there is no document."""
    question = " ".join(clean_text(question or "").split())
    if not question:
        raise InputError("The question is empty: type a question about the documents.")
    if not documents:
        raise InputError("No document given: upload a file or paste some text.")
    return question


def answer(runner: Runner, tokenizer, documents: list[Document], question: str, settings: EngineSettings, *,
           batch_state: BatchState | None = None, on_progress: Callable[[int, int], None] | None = None,
           extract_s: float = 0.0) -> QAResult:
    """Answer `question` over every document; the result carries the request's latency and memory readouts."""
    question = validate_request(documents, question)
    settings = settings.resolved(tokenizer)
    batch_state = batch_state or BatchState(settings.batch_size)
    rough_tokens = sum(len(d.text) for d in documents) // 8  # a lower bound, to refuse huge input before tokenizing
    if rough_tokens > settings.max_total_tokens:
        raise InputError(f"The documents are far over the limit of {settings.max_total_tokens:,} tokens.")
    notices: list[str] = []
    backoffs_before = batch_state.backoffs
    with telemetry.measure(runner.devices) as measurement:
        measurement.latency_s["extract"] = extract_s
        with measurement.stage("tokenize"):
            question, notice = truncate_question(tokenizer, question, settings.max_question_len)
            if notice:
                notices.append(notice)
            windows, stats = make_windows(tokenizer, question, documents, settings)
            tokens = sum(s.tokens for s in stats)
            if tokens > settings.max_total_tokens:
                raise InputError(f"The documents have {tokens:,} tokens, over the limit of "
                                 f"{settings.max_total_tokens:,}.")
        with measurement.stage("forward"):
            logits, used_size = run_windows(runner, windows, tokenizer.pad_token_id, settings, batch_state,
                                            on_progress)
        with measurement.stage("decode"):
            answers = decode_answers(windows, logits, documents, settings)
    measurement.latency_s["total"] += extract_s
    return QAResult(question, answers, stats, len(windows), tokens, used_size,
                    batch_state.backoffs - backoffs_before,
                    measurement.latency_s, measurement.memory, notices,
                    window_tokens=max(len(w.input_ids) for w in windows))
