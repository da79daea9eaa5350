"""A request read and planned once, before any model work and before it joins a lane: the question as cut, the
documents' sizes, the reading (every window, or the ranked rounds of the full read's windows), the limits and the
time budget, and the windows it is expected to read. Admission, ZeroGPU's duration, the preview and the engine all
read this one plan.

It checks, tokenizes and ranks; it runs no model (`longqa_core.answering` reads a plan).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from longqa_core import reading
from longqa_core.batching import BatchState
from longqa_core.documents import Document
from longqa_core.errors import InputError
from longqa_core.index_cache import IndexCache
from longqa_core.limits import (EngineSettings, StopCheck, check_chars, check_predicted_time, check_tokens,
                                document_room, read_as_notice, truncate_question, validate_request,
                                written_as_documents)
from longqa_core.no_answer import NULL_SCORE
from longqa_core.telemetry import timed, trim_heap
from longqa_core.windows import (DocumentStats, DocumentTokens, WindowCut, chars_per_token, count_tokens,
                                 count_windows, narrowed_cut, tokenize_document, window_cuts)

# A ranked request is refused on its estimated tokens, before tokenizing, only past this margin over the limit (the
# estimate from samples may be off by a few percent); its tokens are then counted and checked exactly.
_ESTIMATE_SLACK = 1.05
# A full read estimated under this share of the token limit is tokenized once, with offsets, and its windows cut
# from those tokens; nearer the limit its tokens are counted first (no offsets, stopping at the limit: a text of about
# a token a character is refused after the limit's worth of tokens), and tokenized again to cut its windows.
_TOKENIZE_ONCE_SHARE = 0.5


@dataclass
class RequestPlan:
    """One request, read and planned: everything the engine needs besides the model, and what the page and the
    lane ask of it before the model is free. Picklable: a ZeroGPU worker and a Ray replica receive it whole."""

    documents: list[Document]
    question: str  # cleaned and cut to `max_question_len` tokens
    settings: EngineSettings  # resolved for the tokenizer: windows, limits, and the time budget (`max_request_s`)
    requested: str  # the reading mode asked for: "auto", "full" or "guided"
    reading: reading.ReadingPlan  # the mode as resolved, why, and for a guided read its rounds of `cuts` indices
    stats: list[DocumentStats]  # tokens and windows per document, counted (the full read's)
    notices: list[str] = field(default_factory=list)
    # A ranked request (guided, or auto past a few windows): the documents' tokens and the full read's windows cut
    # from them, in document order; the rounds name these windows, and a weak answer reads the ones left.
    document_tokens: list[DocumentTokens] = field(default_factory=list)
    cuts: list[WindowCut] = field(default_factory=list)
    question_tokens: int = 0
    room: int = 0  # document tokens in each window after the question
    window_tokens: int = 0  # the full read's windows' tokens together (its forward passes' work)
    expected_chars: int = 0  # the characters it is expected to read: all, or the ranking's first rounds
    expected_windows: int = 0  # how many windows that is: the lane's admission and ZeroGPU's duration
    expected_window_tokens: int = 0  # their tokens together (what a forward-time prediction multiplies)
    tokens_per_s: float | None = None  # the loaded model's measured forward throughput the prediction used
    # Before a read starts, what it is expected to take (forward seconds at `tokens_per_s`; None before any was
    # measured): reading every window, and a guided read's expected windows (None where the plan reads whole).
    full_read_s: float | None = None
    guided_read_s: float | None = None
    latency_s: dict[str, float] = field(default_factory=dict)  # seconds planning took, by stage (tokenize, rank)
    generation: int = 0  # the caller's count of the model loads: which model this plan was made for
    overrides: dict = field(default_factory=dict)  # the settings the request set itself (the rest: the model's)
    visitor: str | None = None  # whose cached index it may use (None: no cache; see plan_request's `visitor`)

    @property
    def mode(self) -> str:
        return self.reading.mode

    @property
    def tokens(self) -> int:
        return sum(d.tokens for d in self.stats)

    @property
    def windows(self) -> int:
        return sum(d.windows for d in self.stats)

    def cut_tokens(self, indices: list[int]) -> int:
        """The tokens of the full read's windows at `indices` (into `cuts`), question and special tokens included."""
        overhead = self.settings.max_seq_len - self.room
        return sum(self.cuts[i].end_token - self.cuts[i].first_token + overhead for i in indices)

    def narrowed_cuts(self, indices: list[int]) -> list[WindowCut] | None:
        """The full read's windows at `indices` sized to their best passage (`settings.passage_window_tokens`
        tokens, question included, around the ranked passage's centre), or None where windows are read whole: no
        sizing asked for, or none of them longer."""
        sized = self.settings.passage_window_tokens
        if sized is None or not self.reading.centres:
            return None
        room = max(1, self.room - (self.settings.max_seq_len - sized))
        cuts = [narrowed_cut(self.cuts[i], self.documents[self.cuts[i].document_index].text,
                             self.document_tokens[self.cuts[i].document_index],
                             self.reading.centres.get(i, (self.cuts[i].start_char + self.cuts[i].end_char) // 2),
                             room) for i in indices]
        return cuts if any(cut != self.cuts[i] for cut, i in zip(cuts, indices)) else None

    def read_tokens(self, indices: list[int]) -> int:
        """The tokens a read of the windows at `indices` runs first: sized to their passage where asked."""
        narrowed = self.narrowed_cuts(indices)
        if narrowed is None:
            return self.cut_tokens(indices)
        return sum(cut.end_token - cut.first_token for cut in narrowed) + len(indices) * (
            self.settings.max_seq_len - self.room)

    def with_budget(self, max_request_s: float | None) -> "RequestPlan":
        """The same plan with another time budget (ZeroGPU grants a request only the seconds it asked for)."""
        return replace(self, settings=replace(self.settings, max_request_s=max_request_s))

    def stage(self, name: str):
        """Time a stage of planning: the answer's latency counts it under `name`."""
        return timed(self.latency_s, name)

    @property
    def predicted_s(self) -> float | None:
        """What the time budget checks before a read: a full read's forward seconds (`full_read_s`); None for a
        guided read, whose rounds are checked each as it comes, and before any throughput was measured."""
        return self.full_read_s if self.mode == "full" else None

    def check_time(self) -> None:
        """RequestTooLongError when a full read is predicted to take longer than the budget."""
        check_predicted_time(self.predicted_s, self.settings, self.windows, self.window_tokens, self.tokens_per_s)


def plan_request(tokenizer, documents: list[Document], question: str, settings: EngineSettings,
                 mode: str = "full", *, batch_state: BatchState | None = None,
                 index_cache: IndexCache | None = None, should_stop: StopCheck | None = None,
                 weak_answer_score: float | None = None, visitor: str = "") -> RequestPlan:
    """Check a request against every limit, cheapest check first, and plan its read; no model work.

    InputError for an empty question or no document, characters over `max_chars_for(max_total_tokens)` (refused
    without tokenizing), or tokens over `max_total_tokens` (a full read counts them and stops there; a ranked read
    estimates them from samples of its characters first, then counts them as it tokenizes); RequestTooLongError when `settings.max_request_s` is set and
    the throughput measured in `batch_state` predicts more; Cancelled when `should_stop` says so between chunks.
    `mode` "guided" (and "auto" past a few windows) tokenizes the documents, cuts the full read's windows and ranks
    them for the question, with the index and tokens from `index_cache` when the same documents were ranked before
    for the same `visitor`: one visitor's cached index is never another's, so that its cost (in the readout and in
    the wait) does not tell whether someone else asked about the same documents (docs/serving.md).
    `weak_answer_score` replaces the score under which guided reading goes on. Use it from one thread at a time per
    tokenizer. A refused plan hands the heap it freed back to the system before raising (`trim_heap`).
    """
    try:
        check_mode(mode)
        question = validate_request(documents, question)
        settings = settings.resolved(tokenizer)
        check_chars(documents, settings.max_total_tokens)
        asked_full = reading.ReadingPlan("full", "asked_full", reading.FULL_ASKED)  # until a ranking says otherwise
        plan = RequestPlan(documents, question, settings, mode, asked_full, [])
        with plan.stage("tokenize"):
            question, cut_notice = truncate_question(tokenizer, question, settings.max_question_len)
            question, case_notice = written_as_documents(question, [d.text for d in documents])
            if case_notice:  # a word's other case may take more tokens: cut again, and say how it was read
                question, recut_notice = truncate_question(tokenizer, question, settings.max_question_len)
                cut_notice, case_notice = cut_notice or recut_notice, read_as_notice(question)
            plan.question = question
            plan.notices = [n for n in (cut_notice, case_notice) if n]
            plan.question_tokens = len(tokenizer(plan.question, add_special_tokens=False)["input_ids"])
            plan.room = room = document_room(tokenizer, settings, plan.question_tokens)
        form = settings.no_answer.question_form  # a user's threshold keeps the model's form (`effective_rule`)
        null_score = settings.no_answer.kind == NULL_SCORE and settings.no_answer_below is None
        if settings.passage_window_tokens is not None and (null_score or form is not None and
                                                           not form.fits(plan.question)):
            # A guess (a question outside the model's form) is read in whole windows: in a window sized to its
            # passage a weak span scores higher (fewer places compete), so the read would stop on another guess
            # than whole windows give (docs/reading.md, issue 60). So is a request judged by the lowest null score
            # of the windows read: a sized window's own null score, in a smaller context, was never measured.
            plan.settings = settings = replace(settings, passage_window_tokens=None)
        if mode != "full":
            _rank(plan, tokenizer, index_cache, should_stop, visitor)
            if weak_answer_score is not None:
                plan.reading.weak_answer_score = weak_answer_score
        if plan.mode == "full" and not plan.cuts:
            with plan.stage("tokenize"):
                if _tokenize_once(plan, tokenizer):
                    _cut(plan, _tokenize_within_limit(plan, tokenizer, should_stop))
                else:
                    _count(plan, tokenizer, room, should_stop)
        if batch_state is not None:
            plan.tokens_per_s = batch_state.tokens_per_s
            plan.full_read_s = batch_state.seconds_for_tokens(plan.window_tokens)
            if plan.mode == "guided":
                plan.guided_read_s = batch_state.seconds_for_tokens(
                    plan.read_tokens(reading.expected_windows(plan.reading)))
        if plan.mode == "full":
            plan.check_time()
        return plan
    except BaseException:
        trim_heap()  # a refused plan may have counted millions of tokens
        raise


def check_mode(mode) -> str:
    """`mode` if it is one of READING_MODES, else InputError naming them: the one check of a request's reading mode
    (the page and the command line hand it on as it came)."""
    if mode not in reading.READING_MODES:
        raise InputError(f"The reading mode must be one of {', '.join(reading.READING_MODES)}, "
                         f"got {repr(mode)[:100]}.")
    return mode


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
    plan.expected_chars = sum(len(d.text) for d in plan.documents)
    plan.expected_windows, plan.expected_window_tokens = plan.windows, window_tokens


def _tokenize_once(plan: RequestPlan, tokenizer) -> bool:
    """Whether a full read is tokenized once (estimated under `_TOKENIZE_ONCE_SHARE` of the token limit). An
    estimate is never over the characters (at least a character a token), so documents with fewer characters than
    that are not sampled: a short text is tokenized once, not once to estimate and once to read."""
    bar = _TOKENIZE_ONCE_SHARE * plan.settings.max_total_tokens
    return sum(len(d.text) for d in plan.documents) < bar or _estimated_tokens(plan, tokenizer) < bar


def _estimated_tokens(plan: RequestPlan, tokenizer) -> int:
    """The documents' tokens: as estimated from their characters where the plan has (auto), else from samples."""
    if plan.stats:
        return plan.tokens
    return sum(round(len(d.text) / chars_per_token(tokenizer, d.text)) for d in plan.documents if d.text)


def _tokenize_within_limit(plan: RequestPlan, tokenizer, should_stop: StopCheck | None) -> list[DocumentTokens]:
    """A full read: every document's tokens, which the engine cuts its windows from (tokenized once per request),
    stopping soon past the limit: InputError naming where."""
    limit = plan.settings.max_total_tokens
    tokens: list[DocumentTokens] = []
    for document in plan.documents:
        used = sum(len(t) for t in tokens)
        doc_tokens = tokenize_document(tokenizer, document.text, should_stop=should_stop, limit=limit - used)
        if used + len(doc_tokens) > limit:
            reached = int(doc_tokens.offsets[-1, 1])
            raise InputError(f"The documents have more than {limit:,} tokens (counting stopped {reached:,} of "
                             f"{len(document.text):,} characters into '{document.name}', at "
                             f"{used + len(doc_tokens):,} tokens), over the limit of {limit:,}.")
        tokens.append(doc_tokens)
    return tokens


def _rank(plan: RequestPlan, tokenizer, index_cache: IndexCache | None,
          should_stop: StopCheck | None, visitor: str = "") -> None:
    """A guided (or auto) read: the documents' tokens estimated from their characters first (auto reads a few
    windows whole without more), else tokenized (or taken from `index_cache`), the full read's windows cut from them
    and ranked on the documents' passages (indexed once per upload), and the rounds planned. No model work: cheap
    enough to run before asking for a GPU."""
    settings, documents = plan.settings, plan.documents
    with plan.stage("tokenize"):
        ratios = [chars_per_token(tokenizer, d.text) for d in documents]
    plan.stats = [DocumentStats(d.name, len(d.text), tokens := round(len(d.text) / ratio),
                                count_windows(tokens, plan.room, settings.doc_stride))
                  for d, ratio in zip(documents, ratios)]
    if plan.tokens > settings.max_total_tokens * _ESTIMATE_SLACK:
        raise InputError(f"The documents have about {plan.tokens:,} tokens (estimated from their characters), "
                         f"over the limit of {settings.max_total_tokens:,}.")
    if plan.requested == "auto" and plan.windows <= reading.AUTO_MIN_WINDOWS:
        plan.reading = reading.plan_reading("auto", None, None, plan.question, plan.windows, estimated=True)
        return  # read whole: counted like any full read
    index, tokens = _cached_upload(plan, tokenizer, index_cache, should_stop, visitor)
    _cut(plan, tokens)
    with plan.stage("rank"):
        ranking = reading.rank(index, plan.question, plan.cuts)
    plan.reading = reading.plan_reading(plan.requested, index, ranking, plan.question, len(plan.cuts))
    if plan.mode == "guided":
        expected = reading.expected_windows(plan.reading)
        plan.expected_chars = sum(plan.cuts[i].end_char - plan.cuts[i].start_char for i in expected)
        plan.expected_windows, plan.expected_window_tokens = len(expected), plan.cut_tokens(expected)


def _cut(plan: RequestPlan, tokens: list[DocumentTokens]) -> None:
    """The full read's windows cut from the documents' tokens: the plan's counts are then exact."""
    settings = plan.settings
    check_tokens(sum(len(t) for t in tokens), settings.max_total_tokens)
    plan.document_tokens = tokens
    plan.cuts = [cut for index, (document, doc_tokens) in enumerate(zip(plan.documents, tokens))
                 for cut in window_cuts(index, document.text, doc_tokens, plan.room, settings.doc_stride)]
    plan.stats = [DocumentStats(d.name, len(d.text), len(t), count_windows(len(t), plan.room, settings.doc_stride))
                  for d, t in zip(plan.documents, tokens)]
    plan.window_tokens = plan.cut_tokens(range(len(plan.cuts)))
    plan.expected_chars = sum(len(d.text) for d in plan.documents)
    plan.expected_windows, plan.expected_window_tokens = plan.windows, plan.window_tokens


def _cached_upload(plan: RequestPlan, tokenizer, index_cache: IndexCache | None, should_stop: StopCheck | None,
                   visitor: str = "") -> tuple[reading.DocumentIndex, list[DocumentTokens]]:
    """The documents' ranking index and tokens: from `index_cache` when these documents were prepared for this
    visitor and tokenizer, else built and kept there (one build per visitor and upload however many of its requests
    need it, bounded in bytes); built and not kept without a cache."""
    documents = plan.documents

    def build() -> tuple[reading.DocumentIndex, list[DocumentTokens]]:
        with plan.stage("tokenize"):
            tokens = [tokenize_document(tokenizer, d.text, should_stop=should_stop) for d in documents]
        with plan.stage("rank"):
            return reading.build_index(documents, should_stop=should_stop), tokens

    if index_cache is None:
        return build()
    key = reading.content_key(documents, f"{len(visitor)}:{visitor}:{_tokenizer_key(tokenizer)}")
    return index_cache.get_or_build(key, build, should_stop)


def _tokenizer_key(tokenizer) -> str:
    """What tells tokenizers apart in the cache: a session may load another model between two questions."""
    return f"{type(tokenizer).__name__}:{getattr(tokenizer, 'name_or_path', '')}:{len(tokenizer)}"
