"""The long-document QA engine: limits checked before model work, windows, batches, forward passes (stoppable
between batches), span decoding, one result with readouts.

It receives a ready runner (model), a tokenizer and settings; it never loads a model (longqa.loader does),
and it never formats numbers for people (the UI does).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import numbers
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, NamedTuple, Protocol, Union

import numpy as np
import torch
from accelerate.utils.memory import clear_device_cache, should_reduce_batch_size

from longqa_core import reading, telemetry
from longqa_core.documents import Document, clean_text
from longqa_core.errors import Cancelled, InputError, LongQAError, OutOfMemoryError, RequestTooLongError
from longqa_core.spans import Candidate, merge_candidates, window_candidates

DEFAULT_MAX_TOTAL_TOKENS = 2_000_000
# How many characters a request may have per token of its limit. Byte-level BPE averages about four characters a
# token on English prose and one or fewer on CJK text or combining marks; more than eight a token takes degenerate
# text (long runs of one character). So text over 8 x the token limit is refused without tokenizing it, and the
# readers stop extracting there (`max_chars_for`).
CHARS_PER_TOKEN_BOUND = 8
FIT_PROFILES_HINT = ("consumer-gpu (bitsandbytes quantization + CPU offload) or cpu; "
                     "or lower --max-seq-len")


def max_chars_for(max_total_tokens: int) -> int:
    """The characters a request may have under a token limit: where readers stop extracting, and what the engine
    refuses before tokenizing (16,000,000 for the default 2,000,000 tokens)."""
    return CHARS_PER_TOKEN_BOUND * max_total_tokens


StopCheck = Union[Callable[[], bool], threading.Event]


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
    max_request_s: float | None = None  # refuse a request predicted to take longer (None: no limit)

    def resolved(self, tokenizer) -> "EngineSettings":
        """Fill in the window length and stride for this tokenizer, and check they make sense.

        Counts must be whole numbers: 3.0 (what a UI slider sends) is taken as 3, but 2.7 is an InputError rather
        than silently cut to 2.
        """
        whole = {name: whole_number(name, value) for name in _WHOLE_NUMBER_FIELDS
                 if (value := getattr(self, name)) is not None}
        if any(type(getattr(self, name)) is not int for name in whole):
            return replace(self, **whole).resolved(tokenizer)
        if self.max_request_s is not None and not self.max_request_s > 0:
            raise InputError(f"max_request_s must be a positive number of seconds, got {self.max_request_s!r}.")
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


_WHOLE_NUMBER_FIELDS = ("max_seq_len", "doc_stride", "max_question_len", "max_answer_len", "top_k", "batch_size",
                        "max_total_tokens")


def whole_number(name: str, value) -> int:
    """A count given as a number (3 or 3.0): InputError for anything else (2.7, "3", True), never truncated."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not float(value).is_integer():
        raise InputError(f"{name} must be a whole number, got {value!r}.")
    return int(value)


@dataclass
class BatchState:
    """What the engine remembers about a loaded model between requests: the batch size that last worked, how many
    out-of-memory back-offs happened, and the forward throughput measured on it (what time predictions use)."""

    size: int
    backoffs: int = 0
    # Window tokens run and the seconds they took, each earlier request counting half as much as the next, so the
    # rate follows a machine whose load changes. Zero until a request has run (or a caller seeds a measured figure).
    forward_tokens: float = 0.0
    forward_s: float = 0.0

    @property
    def tokens_per_s(self) -> float | None:
        """Window tokens per second of forward passes on this model, or None before any was measured."""
        return self.forward_tokens / self.forward_s if self.forward_s > 0 and self.forward_tokens > 0 else None

    def record_forward(self, tokens: int, seconds: float) -> None:
        if tokens > 0 and seconds > 0:
            self.forward_tokens = self.forward_tokens / 2 + tokens
            self.forward_s = self.forward_s / 2 + seconds


class Runner(Protocol):
    """Runs one collated batch. A runner that waits for turns on a shared model before a batch may say how long
    it has waited in all (`waited_s`): those seconds are not forward time."""

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
    # What was read: mode (as resolved), windows_read, windows_total, reason, read (each window's document_index,
    # start_char, end_char); see `reading_readout`.
    reading: dict = field(default_factory=dict)

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
    """Cut the question to `max_question_len` tokens; returns the text and a notice when it was cut.

    Only the question's head is tokenized when it is far longer than that (a pasted book is not a question).
    """
    head_chars = 4 * CHARS_PER_TOKEN_BOUND * max_question_len
    head = question[:head_chars]
    encoding = tokenizer(head, add_special_tokens=False, return_offsets_mapping=True)
    if len(encoding["input_ids"]) <= max_question_len and len(head) == len(question):
        return question, None
    cut = encoding["offset_mapping"][min(max_question_len, len(encoding["input_ids"])) - 1][1]
    length = (f"{len(encoding['input_ids'])} tokens long" if len(head) == len(question)
              else f"{len(question):,} characters long")
    notice = f"The question was {length} and was cut to its first {max_question_len} tokens."
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


def make_windows(tokenizer, question: str, documents: list[Document], settings: EngineSettings, *,
                 should_stop: StopCheck | None = None) -> tuple[list[Window], list[DocumentStats]]:
    """Windows of every document, question first, overlapping by `doc_stride` tokens (the pipeline's meaning).

    Tokenizes each document whole, with offsets: check the request with `plan_request` first.
    """
    windows: list[Window] = []
    stats: list[DocumentStats] = []
    stop = _stop_check(should_stop)
    for index, document in enumerate(documents):
        if stop():
            raise Cancelled("The request was cancelled while its windows were being built.")
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


# Counting tokens before building windows: a count needs no offsets, and it stops at the limit, so a text that
# tokenizes to about one token a character is refused after the limit's worth of tokens, not after all of them.

_COUNT_CHUNK_CHARS = 1 << 16  # tokenized at a time when counting (at most about 130,000 tokens held at once)
_CUT_SEARCH_CHARS = 1024  # how far back from a chunk's end to look for a space to cut at


class TokenCount(NamedTuple):
    tokens: int  # exact unless `hard_cuts`; over the limit asked for when `stopped`
    chars: int  # characters counted (all of them unless `stopped`)
    hard_cuts: int  # chunks cut inside a word: each may shift the count by a token or two
    stopped: bool  # counting stopped once past the limit


def count_tokens(tokenizer, text: str, limit: int | None = None, *, should_stop: StopCheck | None = None,
                 chunk_chars: int = _COUNT_CHUNK_CHARS) -> TokenCount:
    """The tokens of `text` alone (no special tokens), counted a chunk at a time without offsets; stops as soon as
    the count is surely over `limit`.

    Chunks end at a single space between two non-space characters: byte-level BPE (Longformer's) never joins
    tokens across such a space, so there the sum of the chunks' counts is the whole text's count. Only a stretch of
    `chunk_chars` characters without such a space is cut inside a word (`hard_cuts`).
    """
    backend = _counting_backend(tokenizer)
    stop = _stop_check(should_stop)
    tokens = hard_cuts = start = 0
    while start < len(text):
        if stop():
            raise Cancelled("The request was cancelled while its documents were being tokenized.")
        end, is_hard = _chunk_end(text, start, chunk_chars)
        hard_cuts += is_hard
        chunk = text[start:end]
        tokens += len(backend.encode_batch_fast([chunk], add_special_tokens=False)[0]) if backend is not None \
            else len(tokenizer(chunk, add_special_tokens=False)["input_ids"])
        start = end
        if limit is not None and tokens - 2 * hard_cuts > limit:
            return TokenCount(tokens, start, hard_cuts, start < len(text))
    return TokenCount(tokens, start, hard_cuts, False)


def _chunk_end(text: str, start: int, chunk_chars: int) -> tuple[int, bool]:
    """Where the chunk from `start` ends, and whether that cut is inside a word."""
    end = start + chunk_chars
    if end >= len(text):
        return len(text), False
    lowest = max(start + 1, end - _CUT_SEARCH_CHARS)
    for cut in range(end, lowest, -1):  # the chunk ends before the space, the next one starts with it
        if text[cut] == " " and not text[cut - 1].isspace() and cut + 1 < len(text) and not text[cut + 1].isspace():
            return cut, False
    return end, True


def _counting_backend(tokenizer):
    """The Rust tokenizer, made ready to encode without truncation or padding (what transformers' own call does
    first), when it can count without building offsets; None otherwise."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not hasattr(backend, "encode_batch_fast"):
        return None
    if backend.truncation is not None:
        backend.no_truncation()
    if backend.padding is not None:
        backend.no_padding()
    return backend


def _stop_check(should_stop: StopCheck | None) -> Callable[[], bool]:
    if should_stop is None:
        return lambda: False
    if isinstance(should_stop, threading.Event):
        return should_stop.is_set
    return should_stop


def count_windows(n_tokens: int, room: int, doc_stride: int) -> int:
    """How many windows a document of `n_tokens` takes with `room` tokens for it in each (the tokenizer's
    overflow: each window starts `room - doc_stride` tokens after the one before)."""
    if n_tokens <= room:
        return 1
    return 1 + -(-(n_tokens - room) // (room - doc_stride))


@dataclass
class RequestPlan:
    """What a request will cost, known before any model work and without building offsets."""

    question: str  # cleaned and cut to `max_question_len` tokens
    notices: list[str]
    documents: list[DocumentStats]  # tokens and windows per document, as `make_windows` will find them
    question_tokens: int
    window_tokens: int  # the tokens of all windows together: the forward passes' work
    tokens_per_s: float | None  # the model's measured forward throughput the prediction used
    predicted_s: float | None  # forward time predicted from it; None before any was measured

    @property
    def tokens(self) -> int:
        return sum(d.tokens for d in self.documents)

    @property
    def windows(self) -> int:
        return sum(d.windows for d in self.documents)


def plan_request(tokenizer, documents: list[Document], question: str, settings: EngineSettings, *,
                 batch_state: BatchState | None = None, should_stop: StopCheck | None = None) -> RequestPlan:
    """Check a request against every limit before any model work, cheapest check first.

    InputError for an empty question or no document, characters over `max_chars_for(max_total_tokens)` (refused
    without tokenizing), or tokens over `max_total_tokens` (counting stops there); RequestTooLongError when
    `settings.max_request_s` is set and the throughput measured in `batch_state` predicts more; Cancelled when
    `should_stop` says so between chunks. Cheap enough to preview a request with; use it from one thread at a time
    per tokenizer (like any call of a fast tokenizer that changes its truncation).
    """
    question = validate_request(documents, question)
    settings = settings.resolved(tokenizer)
    check_chars(documents, settings.max_total_tokens)
    question, notice = truncate_question(tokenizer, question, settings.max_question_len)
    question_tokens = len(tokenizer(question, add_special_tokens=False)["input_ids"])
    room = document_room(tokenizer, settings, question_tokens)
    stats: list[DocumentStats] = []
    window_tokens = 0
    slack = 0  # tokens the counts may be off by, where chunks were cut inside a word
    for document in documents:
        left = settings.max_total_tokens - sum(s.tokens for s in stats) + slack
        count = count_tokens(tokenizer, document.text, left, should_stop=should_stop)
        if count.stopped:
            used = settings.max_total_tokens + slack - left
            raise InputError(f"The documents have more than {settings.max_total_tokens:,} tokens (counting stopped "
                             f"{count.chars:,} of {len(document.text):,} characters into '{document.name}', at "
                             f"{used + count.tokens:,} tokens), over the limit of {settings.max_total_tokens:,}.")
        slack += 2 * count.hard_cuts
        n_windows = count_windows(count.tokens, room, settings.doc_stride)
        window_tokens += n_windows * (settings.max_seq_len - room) + count.tokens \
            + (n_windows - 1) * settings.doc_stride
        stats.append(DocumentStats(document.name, len(document.text), count.tokens, n_windows))
    tokens_per_s = batch_state.tokens_per_s if batch_state is not None else None
    plan = RequestPlan(question, [notice] if notice else [], stats, question_tokens, window_tokens, tokens_per_s,
                       window_tokens / tokens_per_s if tokens_per_s else None)
    check_predicted_time(plan.predicted_s, settings, plan.windows, window_tokens, tokens_per_s)
    return plan


def document_room(tokenizer, settings: EngineSettings, question_tokens: int) -> int:
    """Tokens of document in each window after a question of `question_tokens`; InputError when that is not more
    than the overlap (no window would move forward)."""
    room = settings.max_seq_len - question_tokens - tokenizer.num_special_tokens_to_add(pair=True)
    if room <= settings.doc_stride:
        raise InputError(f"The question leaves {room} tokens for the document in each {settings.max_seq_len}-token "
                         f"window, not more than the overlap of {settings.doc_stride}: shorten the question or "
                         f"lower doc_stride.")
    return room


def check_chars(documents: list[Document], max_total_tokens: int) -> None:
    """InputError when the documents have more characters than `max_total_tokens` can hold at any tokenization,
    refused without tokenizing."""
    n_chars = sum(len(d.text) for d in documents)
    max_chars = max_chars_for(max_total_tokens)
    if n_chars > max_chars:
        raise InputError(f"The documents have {n_chars:,} characters: over the limit of "
                         f"{max_total_tokens:,} tokens even at {CHARS_PER_TOKEN_BOUND} characters a token "
                         f"({max_chars:,} characters).")


def check_predicted_time(predicted_s: float | None, settings: EngineSettings, windows: int, window_tokens: int,
                         tokens_per_s: float | None, *, after: str = "") -> None:
    """RequestTooLongError when `predicted_s` is over `settings.max_request_s` (no limit or no prediction: fine)."""
    if settings.max_request_s is None or predicted_s is None or predicted_s <= settings.max_request_s:
        return
    raise RequestTooLongError(
        f"This request would take about {predicted_s:,.0f} s{after} ({windows:,} windows, {window_tokens:,} tokens, "
        f"at the {tokens_per_s:,.0f} tokens/s this model runs at here), over the limit of "
        f"{settings.max_request_s:g} s a request. Ask about fewer or shorter documents.",
        predicted_s=predicted_s, max_request_s=settings.max_request_s, windows=windows,
        window_tokens=window_tokens, tokens_per_s=tokens_per_s)


def release_memory() -> None:
    """Hand freed memory back to the system: collect reference cycles, then ask glibc to return its free heap
    pages. Without the trim, the allocations of a refused huge request stay in the process's RSS."""
    gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def _malloc_trim():
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc (macOS, musl, Windows)
        return None


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


def stack_batches(batches: list[dict[str, torch.Tensor]], pad_token_id: int) -> tuple[dict[str, torch.Tensor],
                                                                                      list[int]]:
    """Collated batches (of other requests, perhaps of other lengths) as one: each padded to the longest and
    stacked, and the rows each brought, so `split_rows` can hand every caller its own part of the logits."""
    length = max(batch["input_ids"].shape[1] for batch in batches)
    rows = [batch["input_ids"].shape[0] for batch in batches]
    merged = {}
    for name in batches[0]:
        fill = pad_token_id if name == "input_ids" else 0  # padding: no attention, no global attention
        merged[name] = torch.cat([torch.nn.functional.pad(batch[name], (0, length - batch[name].shape[1]), value=fill)
                                  for batch in batches])  # (sum of B, L)
    return merged, rows


def split_rows(start: torch.Tensor, end: torch.Tensor, rows: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The (start, end) logits of each batch `stack_batches` merged, in order; each keeps the merged width, which
    is at least its own (the engine reads only a window's own tokens)."""
    return list(zip(torch.split(start, rows), torch.split(end, rows)))


def is_out_of_memory(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or should_reduce_batch_size(exc)


@dataclass(frozen=True)
class WindowProgress:
    """Where a request's forward passes stand, reported before the first batch and after each one."""

    windows_done: int
    windows_total: int
    elapsed_s: float  # its own forward seconds since the first batch began (turns waited for others not counted)
    eta_s: float | None  # time left: this request's own rate once a batch is done, before that the model's
    # measured throughput; None when neither exists yet

    @property
    def windows_left(self) -> int:
        return self.windows_total - self.windows_done

    @property
    def fraction(self) -> float:
        return self.windows_done / self.windows_total if self.windows_total else 1.0


def run_windows(runner: Runner, windows: list[Window], pad_token_id: int, settings: EngineSettings,
                batch_state: BatchState, on_progress: Callable[[int, int], None] | None = None, *,
                should_stop: StopCheck | None = None,
                on_window_progress: Callable[[WindowProgress], None] | None = None):
    """Start/end logits of every window, in batches; on out-of-memory halve the batch and go on.

    Finished windows are kept (never recomputed); the size that worked stays in `batch_state` for the next
    request, with the forward throughput measured here. Without adaptive batching, or at batch size 1,
    out-of-memory is a clear OutOfMemoryError. `should_stop` is checked before every batch (Cancelled);
    `on_progress(done, total)` and `on_window_progress(WindowProgress)` report after every batch. With
    `settings.max_request_s` and no throughput measured before, the first batch measures it and the rest of the
    request is refused (RequestTooLongError) if it would go over.
    """
    logits: list[tuple[np.ndarray, np.ndarray]] = []
    size = max(1, batch_state.size if settings.adaptive_batching else settings.batch_size)
    stop = _stop_check(should_stop)
    total_tokens = sum(len(w.input_ids) for w in windows)
    rate_before = batch_state.tokens_per_s
    done = done_tokens = 0
    began = time.perf_counter()
    waited_before = getattr(runner, "waited_s", 0.0)

    def forward_s() -> float:
        """Seconds since the first batch began, less those spent waiting for turns on a shared model."""
        return time.perf_counter() - began - (getattr(runner, "waited_s", 0.0) - waited_before)

    def report() -> None:
        if on_window_progress is None:
            return
        elapsed = forward_s()
        rate = done_tokens / elapsed if done_tokens and elapsed > 0 else rate_before
        eta = (total_tokens - done_tokens) / rate if rate else None
        on_window_progress(WindowProgress(done, len(windows), elapsed, eta))

    try:
        report()
        while done < len(windows):
            if stop():
                raise Cancelled(f"The request was cancelled after {done:,} of {len(windows):,} windows.",
                                windows_done=done, windows_total=len(windows))
            size = _run_batch(runner, windows, done, size, pad_token_id, settings, batch_state, logits)
            done_tokens += sum(len(w.input_ids) for w in windows[done: len(logits)])
            done = len(logits)
            if on_progress is not None:
                on_progress(done, len(windows))
            report()
            if rate_before is None and done < len(windows):
                rate_before = _check_after_first_batch(settings, windows, done_tokens, total_tokens, forward_s())
    finally:
        batch_state.record_forward(done_tokens, forward_s())
    if settings.adaptive_batching:
        batch_state.size = size
    return logits, size


def _check_after_first_batch(settings: EngineSettings, windows: list[Window], done_tokens: int, total_tokens: int,
                             elapsed_s: float) -> float:
    """With no throughput known before, the first batch's: RequestTooLongError if the whole request would take
    longer than `max_request_s` at that rate."""
    rate = done_tokens / elapsed_s if elapsed_s > 0 else float("inf")
    check_predicted_time(total_tokens / rate, settings, len(windows), total_tokens, rate,
                         after=" (measured on its first batch: no earlier request had measured this model)")
    return rate


def _run_batch(runner: Runner, windows: list[Window], done: int, size: int, pad_token_id: int,
               settings: EngineSettings, batch_state: BatchState, logits: list) -> int:
    """Run the next batch of windows into `logits`, halving the batch on out-of-memory; the size that worked."""
    while True:
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
        return size


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
           extract_s: float = 0.0, should_stop: StopCheck | None = None,
           on_window_progress: Callable[[WindowProgress], None] | None = None,
           reading_mode: str = "full", index_cache: dict | None = None,
           weak_answer_score: float | None = None) -> QAResult:
    """Answer `question` over the documents; the result carries the request's latency and memory readouts, and in
    `reading` what was read.

    `reading_mode` "full" reads every window; "guided" reads the windows the ranking picks (`longqa_core.reading`),
    round by round while the answer is weak, falling back to the full read where ranking cannot serve; "auto" is
    guided past a few windows. `index_cache` (a dict the caller keeps) holds the documents' BM25 index, so a second
    question on the same documents pays only the query. `weak_answer_score` replaces the score under which guided
    reading goes on (`reading.WEAK_ANSWER_SCORE`, measured on the demo model; 0 stops after the ranked rounds). Every limit is checked before model work; `should_stop`
    (a callable or a threading.Event) ends the request between batches with Cancelled; progress goes to
    `on_progress(done, total)` and `on_window_progress(WindowProgress)`. A refused or cancelled request hands its
    memory back before raising.
    """
    settings = settings.resolved(tokenizer)
    reading.check_mode(reading_mode)
    batch_state = batch_state or BatchState(settings.batch_size)
    backoffs_before = batch_state.backoffs
    windows = logits = None
    try:
        with telemetry.measure(runner.devices) as measurement:
            measurement.latency_s["extract"] = extract_s
            plan = guide = None
            if reading_mode != "full":
                guide = plan_guided(tokenizer, documents, question, settings, reading_mode, measurement,
                                    index_cache=index_cache, batch_state=batch_state)
                plan = guide.plan
                if weak_answer_score is not None:
                    plan.weak_answer_score = weak_answer_score
            if plan is None or plan.mode == "full":
                result = _read_full(runner, tokenizer, documents, question, settings, batch_state, measurement,
                                    on_progress, should_stop, on_window_progress)
                reason = plan.reason if plan is not None else "the full read was asked for"
                windows, logits, stats, used_size, notices, q = result
                read_rows = [window_span(w) for w in windows]
                total, estimated = len(windows), False
            else:
                windows, logits, used_size, notices, best, cut_short = _read_guided(
                    runner, tokenizer, documents, guide, settings, batch_state, measurement, on_progress,
                    should_stop, on_window_progress)
                q, stats, reason = guide.question, guide.stats, guide.plan.reason
                read_rows = guide.read_rows
                total, estimated = sum(s.windows for s in stats), True
                notices = guide.notices + notices
                if plan.is_weak(best) and not cut_short:
                    # Still weak after every window the ranking could point to: read everything, in the full read's
                    # own windows, so that guided reading never ends on less than the full read would find (the
                    # same text cut into other windows can score its answers differently) -- unless that would
                    # pass the request's time limit, where the answer read so far is kept and says so.
                    too_long = _full_read_passes_limit(settings, batch_state, measurement, total)
                    if too_long:
                        notices.append(too_long)
                    else:
                        guided_windows = len(windows)
                        windows = logits = None
                        windows, logits, stats, used_size, notices, q = _read_full(
                            runner, tokenizer, documents, question, settings, batch_state, measurement,
                            on_progress, should_stop, on_window_progress)
                        plan = reading.ReadingPlan(
                            "full", f"guided reading found no strong answer in {guided_windows} "
                                    f"window{'s' if guided_windows != 1 else ''} "
                                    f"({guide.plan.reason.split(':')[0]}): read whole")
                        reason = plan.reason
                        read_rows = [window_span(w) for w in windows]
                        total, estimated = len(windows), False
            with measurement.stage("decode"):
                answers = decode_answers(windows, logits, documents, settings)
    except LongQAError as exc:
        # The traceback keeps every frame it passed through, and with them the windows and logits: drop them.
        windows = logits = None
        traceback.clear_frames(exc.__traceback__)
        release_memory()
        raise
    measurement.latency_s["total"] += extract_s
    mode = "full" if plan is None else plan.mode
    reading_info = reading_readout(mode, reading_mode, reason, read_rows, total, estimated)
    read_tokens = sum(int(w.context.sum()) for w in windows) if mode == "guided" else sum(s.tokens for s in stats)
    return QAResult(q, answers, stats, len(windows), read_tokens, used_size,
                    batch_state.backoffs - backoffs_before,
                    measurement.latency_s, measurement.memory, notices,
                    window_tokens=max(len(w.input_ids) for w in windows), reading=reading_info)


def reading_readout(mode: str, requested: str, reason: str, read_rows: list[dict], windows_total: int,
                    estimated: bool) -> dict:
    """The result's `reading` object: the mode used (after auto), what was asked, why, and each window read."""
    return {"mode": mode, "requested": requested, "windows_read": len(read_rows), "windows_total": windows_total,
            "windows_total_estimated": estimated, "reason": reason, "read": read_rows}


def window_span(window: Window) -> dict:
    """The stretch of its document a window read: from its first context token's start to its last one's end."""
    spans = [window.offsets[i] for i in np.flatnonzero(window.context)]
    start, end = (spans[0][0], spans[-1][1]) if spans else (0, 0)
    return {"document_index": window.document_index, "start_char": int(start), "end_char": int(end)}


def _read_full(runner, tokenizer, documents, question, settings, batch_state, measurement, on_progress,
               should_stop, on_window_progress):
    """Today's read of every window, unchanged: plan (every limit), windows, forward passes."""
    with measurement.stage("tokenize"):
        plan = plan_request(tokenizer, documents, question, settings, batch_state=batch_state,
                            should_stop=should_stop)
        windows, stats = make_windows(tokenizer, plan.question, documents, settings, should_stop=should_stop)
        tokens = sum(s.tokens for s in stats)
        if tokens > settings.max_total_tokens:
            raise InputError(f"The documents have {tokens:,} tokens, over the limit of "
                             f"{settings.max_total_tokens:,}.")
    with measurement.stage("forward"):
        logits, used_size = run_windows(runner, windows, tokenizer.pad_token_id, settings, batch_state,
                                        on_progress, should_stop=should_stop,
                                        on_window_progress=on_window_progress)
    return windows, logits, stats, used_size, plan.notices, plan.question


# Question-guided reading -------------------------------------------------------------------------------------
# Characters per token are measured on a few samples of each document instead of tokenizing it whole: the 2M-token
# document a full read tokenizes in about 14 s is cut and ranked on its characters, and only what is read is
# tokenized for the model.
_SAMPLE_CHARS = 4_000
_SAMPLES = 5
# A guided request is refused on its estimated tokens only past this margin over the limit: the estimate from
# samples may be off by a few percent, and counting every token to settle it would cost what guided reading saves.
_ESTIMATE_SLACK = 1.05
_CACHED_INDEXES = 3


@dataclass
class GuidedPlan:
    """A guided request before model work: the question as cut, the documents' estimated sizes, the ranking's
    plan and the regions behind it."""

    question: str
    notices: list[str]
    stats: list[DocumentStats]  # tokens and windows estimated from characters
    plan: reading.ReadingPlan
    regions: list[reading.Region]
    read_rows: list[dict] = field(default_factory=list)  # filled as regions are read

    def expected_spans(self, documents: list[Document]) -> list[tuple[int, int, int]]:
        """What a guided read is expected to read before it stops on a strong answer: the first round, and the ties
        too where the ranking was not decisive (`read_spans` of those regions)."""
        rounds = self.plan.rounds
        expected = rounds[0] + (rounds[1] if len(rounds) > 1 and not self.plan.decisive else [])
        return read_spans([self.regions[r] for r in expected], documents)


def chars_per_token(tokenizer, text: str) -> float:
    """Characters per token of `text`, measured on a few evenly spread samples (all of a short text)."""
    if len(text) <= _SAMPLES * _SAMPLE_CHARS:
        samples = [text]
    else:
        step = (len(text) - _SAMPLE_CHARS) // (_SAMPLES - 1)
        samples = [text[i * step: i * step + _SAMPLE_CHARS] for i in range(_SAMPLES)]
    backend = _counting_backend(tokenizer)
    counts = [len(backend.encode_batch_fast([t], add_special_tokens=False)[0]) if backend is not None
              else len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in samples]
    return max(1.0, sum(len(t) for t in samples) / max(1, sum(counts)))


def plan_guided(tokenizer, documents: list[Document], question: str, settings: EngineSettings, mode: str,
                measurement=None, *, index_cache: dict | None = None,
                batch_state: BatchState | None = None) -> GuidedPlan:
    """Check a guided request's limits on characters (no full tokenizing), index the documents (or take the index
    from `index_cache`), rank and plan. Cheap enough to run before asking for a GPU."""
    stage = measurement.stage if measurement is not None else (lambda name: contextlib.nullcontext())
    question = validate_request(documents, question)
    settings = settings.resolved(tokenizer)
    check_chars(documents, settings.max_total_tokens)
    with stage("tokenize"):
        question, notice = truncate_question(tokenizer, question, settings.max_question_len)
        room = document_room(tokenizer, settings, len(tokenizer(question, add_special_tokens=False)["input_ids"]))
        # Regions are cut for the longest question the settings allow, so the index does not depend on this one.
        region_room = max(room // 2, settings.max_seq_len - settings.max_question_len
                          - tokenizer.num_special_tokens_to_add(pair=True))
        ratios = [chars_per_token(tokenizer, d.text) for d in documents]
    stats = []
    for document, ratio in zip(documents, ratios):
        tokens = round(len(document.text) / ratio)
        stats.append(DocumentStats(document.name, len(document.text), tokens,
                                   count_windows(tokens, room, settings.doc_stride)))
    estimated_tokens = sum(s.tokens for s in stats)
    if estimated_tokens > settings.max_total_tokens * _ESTIMATE_SLACK:
        raise InputError(f"The documents have about {estimated_tokens:,} tokens (estimated from their characters), "
                         f"over the limit of {settings.max_total_tokens:,}.")
    region_chars = [max(reading.PASSAGE_CHARS,
                        int(region_room * ratio * reading.REGION_FILL) - 2 * reading.REGION_MARGIN_CHARS)
                    for ratio in ratios]
    estimated_windows = sum(s.windows for s in stats)
    index = ranking = None
    if mode == "guided" or estimated_windows > reading.AUTO_MIN_WINDOWS:
        with stage("rank"):
            key = reading.content_key(documents, region_chars)
            index = index_cache.get(key) if index_cache is not None else None
            if index is None:
                index = reading.build_index(documents, region_chars)
                if index_cache is not None:
                    # The last few uploads' indexes (visitors take turns); each can hold millions of characters'
                    # passages, so no more.
                    while len(index_cache) >= _CACHED_INDEXES:
                        index_cache.pop(next(iter(index_cache)))
                    index_cache[key] = index
            elif index_cache is not None:
                index_cache[key] = index_cache.pop(key)  # the most recently used goes last
            ranking = reading.rank(index, question)
    plan = reading.plan_reading(mode, index, ranking, question, estimated_windows)
    return GuidedPlan(question, [notice] if notice else [], stats, plan, index.regions if index else [])


def read_spans(regions: list[reading.Region], documents: list[Document]) -> list[tuple[int, int, int]]:
    """(document index, start, end) to read for `regions`: each with its margins, neighbours merged."""
    spans: list[list[int]] = []
    for region in sorted(regions, key=lambda r: (r.document_index, r.start_char)):
        start = max(0, region.start_char - reading.REGION_MARGIN_CHARS)
        end = min(len(documents[region.document_index].text), region.end_char + reading.REGION_MARGIN_CHARS)
        if spans and spans[-1][0] == region.document_index and start <= spans[-1][2]:
            spans[-1][2] = max(spans[-1][2], end)
        else:
            spans.append([region.document_index, start, end])
    return [tuple(span) for span in spans]


def span_windows(tokenizer, question: str, documents: list[Document], spans, settings: EngineSettings,
                 should_stop: StopCheck | None = None) -> list[Window]:
    """The windows of the given stretches of the documents, with offsets into the whole documents."""
    windows: list[Window] = []
    for document_index, start, end in spans:
        piece = Document(documents[document_index].name, documents[document_index].text[start:end])
        piece_windows, _ = make_windows(tokenizer, question, [piece], settings, should_stop=should_stop)
        for window in piece_windows:
            offsets = [(a + start, b + start) if in_context else (a, b)
                       for (a, b), in_context in zip(window.offsets, window.context)]
            windows.append(replace(window, document_index=document_index, offsets=offsets))
    return windows


def _full_read_passes_limit(settings: EngineSettings, batch_state: BatchState, measurement,
                            windows_total: int) -> str | None:
    """The notice to give when reading every window now would pass `settings.max_request_s` at the measured rate
    (counting the forward time already spent), else None."""
    rate = batch_state.tokens_per_s
    if settings.max_request_s is None or not rate:
        return None
    spent = measurement.latency_s.get("forward", 0.0)
    predicted = spent + windows_total * settings.max_seq_len / rate
    if predicted <= settings.max_request_s:
        return None
    return (f"The answer is weak, and reading all {windows_total:,} windows would take about {predicted:,.0f} s, "
            f"over the limit of {settings.max_request_s:g} s a request: the answer comes from the windows the "
            f"ranking picked.")


def _read_guided(runner, tokenizer, documents, guide: GuidedPlan, settings, batch_state, measurement, on_progress,
                 should_stop, on_window_progress):
    """Read the plan's rounds in order, deciding after each whether the answer so far is enough. Returns the
    windows, their logits, the batch size used, notices, the best answer's score and whether the time limit cut
    the rounds short."""
    windows: list[Window] = []
    logits: list = []
    notices: list[str] = []
    best_score = None
    cut_short = False
    used_size = batch_state.size if settings.adaptive_batching else settings.batch_size
    plan = guide.plan
    windows_total = sum(s.windows for s in guide.stats)
    for round_index, round_regions in enumerate(plan.rounds):
        with measurement.stage("tokenize"):
            new = span_windows(tokenizer, guide.question, documents,
                               read_spans([guide.regions[r] for r in round_regions], documents), settings,
                               should_stop)
        new_tokens = sum(len(w.input_ids) for w in new)
        rate = batch_state.tokens_per_s
        if round_index > 0 and settings.max_request_s is not None and rate and \
                measurement.latency_s.get("forward", 0.0) + new_tokens / rate > settings.max_request_s:
            notices.append(f"Read {len(windows):,} windows; reading {len(new):,} more would pass the limit of "
                           f"{settings.max_request_s:g} s a request, so the answer comes from those read.")
            cut_short = True
            break
        if round_index == 0:
            check_predicted_time(new_tokens / rate if rate else None, settings, len(new), new_tokens, rate)
        done_before = len(windows)

        def round_progress(state: WindowProgress, done_before=done_before, n_new=len(new)) -> None:
            if on_window_progress is not None:
                on_window_progress(replace(state, windows_done=done_before + state.windows_done,
                                           windows_total=max(windows_total, done_before + n_new)))
        with measurement.stage("forward"):
            new_logits, used_size = run_windows(
                runner, new, tokenizer.pad_token_id, settings, batch_state,
                (lambda done, total, b=done_before: on_progress(b + done, max(windows_total, b + total)))
                if on_progress else None,
                should_stop=should_stop, on_window_progress=round_progress)
        windows.extend(new)
        logits.extend(new_logits)
        guide.read_rows.extend(window_span(w) for w in new)
        with measurement.stage("decode"):
            best = decode_answers(windows, logits, documents, replace(settings, top_k=1))
        best_score = best[0].score if best and best[0].document_index >= 0 else None
        if plan.should_stop_after(round_index, best_score):
            break
    return windows, logits, used_size, notices, best_score, cut_short
