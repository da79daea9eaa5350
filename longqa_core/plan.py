"""A request read and planned once, before any model work and before it joins a lane: the question as cut, the
documents' sizes, the reading (every window, or the ranked rounds), the limits and the time budget, and the windows
it is expected to read. Admission, ZeroGPU's duration, the preview and the engine all read this one plan.

It checks and ranks; it runs no model and builds no window (`longqa_core.answering` reads a plan).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from longqa_core import reading
from longqa_core.batching import BatchState
from longqa_core.documents import Document
from longqa_core.errors import InputError
from longqa_core.index_cache import IndexCache
from longqa_core.limits import (EngineSettings, StopCheck, check_chars, check_predicted_time, document_room,
                                truncate_question, validate_request)
from longqa_core.telemetry import timed
from longqa_core.windows import DocumentStats, chars_per_token, count_tokens, count_windows

# A guided request is refused on its estimated tokens only past this margin over the limit: the estimate from
# samples may be off by a few percent, and counting every token to settle it would cost what guided reading saves.
_ESTIMATE_SLACK = 1.05
CACHED_INDEXES = 3  # the last few uploads' ranking indexes a plain dict keeps (a server's IndexCache: bytes)


@dataclass
class RequestPlan:
    """One request, read and planned: everything the engine needs besides the model, and what the page and the
    lane ask of it before the model is free. Picklable: a ZeroGPU worker and a Ray replica receive it whole."""

    documents: list[Document]
    question: str  # cleaned and cut to `max_question_len` tokens
    settings: EngineSettings  # resolved for the tokenizer: windows, limits, and the time budget (`max_request_s`)
    requested: str  # the reading mode asked for: "auto", "full" or "guided"
    reading: reading.ReadingPlan  # the mode as resolved, why, and for a guided read its rounds of regions
    stats: list[DocumentStats]  # tokens and windows per document: counted for a full read, estimated for guided
    notices: list[str] = field(default_factory=list)
    regions: list[reading.Region] = field(default_factory=list)  # a guided read's regions, which the rounds name
    question_tokens: int = 0
    window_tokens: int = 0  # a full read: the tokens of all windows together (the forward passes' work)
    expected_chars: int = 0  # the characters it is expected to read: all, or the ranking's first rounds
    expected_windows: int = 0  # about how many windows that is: the lane's admission and ZeroGPU's duration
    tokens_per_s: float | None = None  # the loaded model's measured forward throughput the prediction used
    predicted_s: float | None = None  # a full read's forward time at that rate; None before any was measured
    latency_s: dict[str, float] = field(default_factory=dict)  # seconds planning took, by stage (tokenize, rank)
    generation: int = 0  # the caller's count of the model loads: which model this plan was made for
    overrides: dict = field(default_factory=dict)  # the settings the request set itself (the rest: the model's)

    @property
    def mode(self) -> str:
        return self.reading.mode

    @property
    def is_estimated(self) -> bool:
        """Whether the documents' tokens and windows are estimated from characters (a guided read tokenizes only
        what it reads) rather than counted."""
        return self.mode == "guided"

    @property
    def tokens(self) -> int:
        return sum(d.tokens for d in self.stats)

    @property
    def windows(self) -> int:
        return sum(d.windows for d in self.stats)

    @property
    def expected_window_tokens(self) -> int:
        """The tokens of the windows it is expected to read: counted for a full read, a whole window each for a
        guided one (what a forward-time prediction multiplies)."""
        return self.window_tokens if self.mode == "full" else self.expected_windows * self.settings.max_seq_len

    def with_budget(self, max_request_s: float | None) -> "RequestPlan":
        """The same plan with another time budget (ZeroGPU grants a request only the seconds it asked for)."""
        return replace(self, settings=replace(self.settings, max_request_s=max_request_s))

    def stage(self, name: str):
        """Time a stage of planning: the answer's latency counts it under `name`."""
        return timed(self.latency_s, name)

    def check_time(self) -> None:
        """RequestTooLongError when a full read is predicted to take longer than the budget."""
        check_predicted_time(self.predicted_s, self.settings, self.windows, self.window_tokens, self.tokens_per_s)


def plan_request(tokenizer, documents: list[Document], question: str, settings: EngineSettings,
                 mode: str = "full", *, batch_state: BatchState | None = None, index_cache: IndexCache | dict | None = None,
                 should_stop: StopCheck | None = None, weak_answer_score: float | None = None) -> RequestPlan:
    """Check a request against every limit, cheapest check first, and plan its read; no model work.

    InputError for an empty question or no document, characters over `max_chars_for(max_total_tokens)` (refused
    without tokenizing), or tokens over `max_total_tokens` (a full read counts them and stops there; a guided read
    estimates them from samples of its characters); RequestTooLongError when `settings.max_request_s` is set and
    the throughput measured in `batch_state` predicts more; Cancelled when `should_stop` says so between chunks.
    `mode` "guided" (and "auto" past a few windows) ranks the documents' regions for the question, with the index
    from `index_cache` when the same documents were ranked before. `weak_answer_score` replaces the score under
    which guided reading goes on. Use it from one thread at a time per tokenizer.
    """
    reading.check_mode(mode)
    question = validate_request(documents, question)
    settings = settings.resolved(tokenizer)
    check_chars(documents, settings.max_total_tokens)
    plan = RequestPlan(documents, question, settings, mode, reading.full_read(reading.FULL_ASKED), [])
    with plan.stage("tokenize"):
        plan.question, notice = truncate_question(tokenizer, question, settings.max_question_len)
        plan.notices = [notice] if notice else []
        plan.question_tokens = len(tokenizer(plan.question, add_special_tokens=False)["input_ids"])
        room = document_room(tokenizer, settings, plan.question_tokens)
    if mode != "full":
        _rank(plan, tokenizer, room, index_cache, should_stop)
        if weak_answer_score is not None:
            plan.reading.weak_answer_score = weak_answer_score
    if plan.mode == "full":
        with plan.stage("tokenize"):
            _count(plan, tokenizer, room, should_stop)
        plan.tokens_per_s = batch_state.tokens_per_s if batch_state is not None else None
        plan.predicted_s = plan.window_tokens / plan.tokens_per_s if plan.tokens_per_s else None
        plan.check_time()
    return plan


def _count(plan: RequestPlan, tokenizer, room: int, should_stop: StopCheck | None) -> None:
    """A full read: every document's tokens counted (stopping past the limit) and its windows."""
    settings = plan.settings
    stats: list[DocumentStats] = []
    window_tokens = 0
    slack = 0  # tokens the counts may be off by, where chunks were cut inside a word
    for document in plan.documents:
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
    plan.stats, plan.window_tokens = stats, window_tokens
    plan.expected_chars = sum(d.n_chars for d in plan.documents)
    plan.expected_windows = plan.windows


def _rank(plan: RequestPlan, tokenizer, room: int, index_cache: IndexCache | dict | None,
          should_stop: StopCheck | None = None) -> None:
    """A guided (or auto) read: the documents' tokens estimated from their characters (no full tokenizing), their
    regions indexed (or the index taken from `index_cache`) and ranked, and the rounds planned. Cheap enough to
    run before asking for a GPU."""
    settings, documents = plan.settings, plan.documents
    # Regions are cut for the longest question the settings allow, so the index does not depend on this one.
    widest_room = settings.max_seq_len - settings.max_question_len - tokenizer.num_special_tokens_to_add(pair=True)
    region_room = max(room // 2, widest_room)
    with plan.stage("tokenize"):
        ratios = [chars_per_token(tokenizer, d.text) for d in documents]
    plan.stats = [DocumentStats(d.name, len(d.text), tokens := round(len(d.text) / ratio),
                                count_windows(tokens, room, settings.doc_stride))
                  for d, ratio in zip(documents, ratios)]
    if plan.tokens > settings.max_total_tokens * _ESTIMATE_SLACK:
        raise InputError(f"The documents have about {plan.tokens:,} tokens (estimated from their characters), "
                         f"over the limit of {settings.max_total_tokens:,}.")
    region_chars = [max(reading.PASSAGE_CHARS,
                        int(region_room * ratio * reading.REGION_FILL) - 2 * reading.REGION_MARGIN_CHARS)
                    for ratio in ratios]
    index = ranking = None
    if plan.requested == "guided" or plan.windows > reading.AUTO_MIN_WINDOWS:
        with plan.stage("rank"):
            index = _cached_index(documents, region_chars, index_cache, should_stop)
            ranking = reading.rank(index, plan.question)
    plan.reading = reading.plan_reading(plan.requested, index, ranking, plan.question, plan.windows)
    plan.regions = index.regions if index is not None else []
    if plan.mode == "guided":
        spans = reading.read_spans(reading.expected_regions(plan.reading, plan.regions), documents)
        plan.expected_chars = sum(end - start for _, start, end in spans)
        per_window = max(widest_room, settings.doc_stride + 1)
        plan.expected_windows = max(len(spans), count_windows(int(plan.expected_chars / min(ratios)), per_window,
                                                              settings.doc_stride))


def _cached_index(documents: list[Document], region_chars: list[int], index_cache: IndexCache | dict | None,
                  should_stop: StopCheck | None = None):
    """The documents' ranking index: from `index_cache` when these documents were indexed with these region sizes,
    else built and kept there. A server's `IndexCache` shares one build per upload between the requests that need
    it and bounds its bytes; a plain dict keeps the most recently used last, CACHED_INDEXES at most."""
    key = reading.content_key(documents, region_chars)
    if isinstance(index_cache, IndexCache):
        return index_cache.get_or_build(key, lambda: reading.build_index(documents, region_chars), should_stop)
    index = index_cache.pop(key, None) if index_cache is not None else None
    if index is None:
        index = reading.build_index(documents, region_chars)
    if index_cache is not None:
        while len(index_cache) >= CACHED_INDEXES:
            index_cache.pop(next(iter(index_cache)))
        index_cache[key] = index
    return index
