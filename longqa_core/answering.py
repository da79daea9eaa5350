"""Answering a planned request: the plan's windows (every one, or the ranked rounds, then the windows left while the
answer stays weak: no window is read twice) through the model, the spans decoded, and one result with what the run
measured (latency by stage, memory, what was read).

It answers a plan (`longqa_core.plan`) and never plans again; it receives a ready runner and tokenizer and never
loads a model (longqa.loader does). Its readouts stay in bytes and seconds: only the UI formats them.
"""

from __future__ import annotations

import heapq
import time
import traceback
from dataclasses import dataclass, field, replace
from typing import Callable, Generator, TypeVar

from longqa_core import no_answer, pdf_pages, reading, telemetry
from longqa_core.batching import (BatchState, ForwardSample, Runner, WindowProgress, drain, iter_windows,
                                  release_memory)
from longqa_core.documents import Document, ReadLimits, locate
from longqa_core.errors import Cancelled, DocumentError, LongQAError
from longqa_core.index_cache import IndexCache
from longqa_core.limits import EngineSettings, StopCheck, check_tokens, no_answer_rule, stop_check
from longqa_core.plan import RequestPlan, plan_request
from longqa_core.spans import Answer, Candidate, Decoded, decode, decode_window, merged_answers
from longqa_core.telemetry import MemoryReadout
from longqa_core.windows import DocumentStats, Window, cut_windows, make_windows, window_span

T = TypeVar("T")


@dataclass
class ReadSpan:
    """The stretch of its document one window read."""

    document_index: int
    start_char: int
    end_char: int


@dataclass
class ReadingReadout:
    """What was read: the mode used (after auto), what was asked, why, and each window read (in document order).
    `windows_read` counts the windows the model ran, each once."""

    mode: str
    requested: str
    windows_read: int
    windows_total: int
    reason: str
    read: list[ReadSpan]
    code: str = field(default="asked_full", repr=False)  # why, for programs (`reading.REASONS`); not in the JSON
    narrowed: int = 0  # windows read sized to their ranked passage (`passage_window_tokens`) and kept
    widened: int = 0  # windows read sized to their passage, then whole because the answer was weak
    expected_s: float | None = None  # the forward seconds the plan expected this read to take (None: no rate yet)
    forward_s: float | None = None  # the forward seconds it took

    def to_json(self) -> dict:
        return {"mode": self.mode, "requested": self.requested, "windows_read": self.windows_read,
                "windows_total": self.windows_total,
                "windows_total_estimated": False,  # kept for the JSON's readers: every plan counts its windows
                "reason": self.reason, "read": [vars(span).copy() for span in self.read],
                "narrowed": self.narrowed, "widened": self.widened, "expected_s": self.expected_s,
                "forward_s": self.forward_s}


@dataclass
class QAResult:
    """What one answer reports: the answers, the documents' sizes, the work done, latency by stage (seconds),
    memory (bytes), notices and what was read."""

    question: str
    answers: list[Answer]
    documents: list[DocumentStats]
    windows: int
    tokens: int
    batch_size: int
    backoffs: int
    latency_s: dict[str, float]  # by stage: total, extract, tokenize, (rank,) forward, decode
    memory: MemoryReadout
    notices: list[str] = field(default_factory=list)
    window_tokens: int = 0  # the longest window, in tokens (what the memory planner needs)
    reading: ReadingReadout | None = None
    forward: ForwardSample = field(default_factory=ForwardSample)  # what the passes measured; not in the JSON
    verdict: no_answer.Verdict | None = None  # whether the documents hold the answer, and by which rule

    @property
    def found(self) -> bool | None:
        return self.verdict.found if self.verdict is not None else None

    @property
    def tokens_per_s(self) -> float | None:
        total = self.latency_s.get("total") or 0.0
        return self.tokens / total if total > 0 else None

    def to_json(self) -> dict:
        """The JSON of the answer itself, in the order the CLI's --json and the web API have always had."""
        return {"question": self.question, "answers": [a.to_json() for a in self.answers],
                "documents": [vars(d).copy() for d in self.documents], "windows": self.windows,
                "tokens": self.tokens, "batch_size": self.batch_size, "backoffs": self.backoffs,
                "latency_s": dict(self.latency_s), "memory": self.memory.to_json(), "notices": list(self.notices),
                "window_tokens": self.window_tokens,
                "reading": self.reading.to_json() if self.reading is not None else {},
                "tokens_per_s": self.tokens_per_s, "found": self.found,
                "no_answer": self.verdict.to_json() if self.verdict is not None else None}


@dataclass(frozen=True)
class Provisional:
    """The best answer of the windows read so far, while the read goes on: what a caller may show before the
    result. Never judged found or not found: the not-found rule judges only the final answer."""

    answer: Answer
    windows_read: int
    windows_total: int
    plausible: bool = True  # its score reaches the request's not-found threshold (True where the rule has none)

    def to_json(self) -> dict:
        return {"provisional": True, "answer": self.answer.to_json(), "windows_read": self.windows_read,
                "windows_total": self.windows_total, "plausible": self.plausible}


class BestSoFar:
    """A running best answer over the windows read: each batch's windows decoded as they come (`spans.decode_window`,
    as the final decode would), their candidates merged into those of the windows before (identical answers
    summing, as `spans.merge_candidates` does), so that the windows read before are never decoded again, not even
    at the end: the answer merges what was decoded here (`decoded`). It sees a read's batches (`on_batch`) and,
    after each, its progress (`on_progress`), and keeps the best so far with how many windows were read in
    `latest` (what `answer_steps` yields); `seconds` is what its decoding took. Under a rule that needs evidence
    the best so far is chosen as the final answer will be (`no_answer.evidenced_first` over the best
    EVIDENCE_POOL), so the stream does not show another attribute's value first."""

    def __init__(self, documents: list[Document], settings: EngineSettings,
                 evidence: no_answer.Evidence | None = None):
        self.documents = documents
        self.settings = settings
        self.evidence = evidence
        self.per_window: dict[int, tuple[list[Candidate], float]] = {}  # by id(window): its candidates, null score
        self.merged: dict[str, Candidate] = {}
        self.best: Candidate | None = None
        self.latest: Provisional | None = None
        self.seconds = 0.0

    def on_batch(self, windows: list[Window], logits: list) -> None:
        began = time.perf_counter()
        for window, pair in zip(windows, logits):
            candidates, null_score = decode_window(window, pair, self.documents, self.settings)
            self.per_window[id(window)] = (candidates, null_score)
            for candidate in candidates:
                key = candidate.text.lower()
                kept = self.merged.get(key)
                if kept is None:
                    kept = self.merged[key] = Candidate(candidate.text, 0.0, candidate.document_index,
                                                        candidate.start_char, candidate.end_char)
                kept.score += candidate.score
                if self.best is None or kept.score > self.best.score:
                    self.best = kept
        self.seconds += time.perf_counter() - began

    def on_progress(self, state: WindowProgress) -> None:
        if self.best is None or state.windows_done == 0:
            return
        rule = no_answer_rule(self.settings)
        best = self.best
        if rule.needs_evidence and self.evidence is not None:
            pool = heapq.nlargest(no_answer.EVIDENCE_POOL, self.merged.values(), key=lambda c: c.score)
            best = no_answer.evidenced_first(rule, pool, self.evidence)[0][0]
        document = self.documents[best.document_index]
        plausible = rule.kind != no_answer.THRESHOLD or rule.threshold is None or best.score >= rule.threshold
        self.latest = Provisional(Answer(best.text, best.score, document.name, best.document_index, best.start_char,
                                         best.end_char, location=locate(document, best.start_char, best.end_char)),
                                  state.windows_done, state.windows_total, plausible)

    def decoded(self, windows: list[Window], top_k: int | None = None) -> Decoded | None:
        """The best `top_k` (default the settings') answers of `windows` (in document order) from what was decoded
        here, or None if one was not."""
        if any(id(window) not in self.per_window for window in windows):
            return None
        return merged_answers([self.per_window[id(window)] for window in windows], self.documents,
                              top_k or self.settings.top_k)


def answer(runner: Runner, tokenizer, documents: list[Document], question: str, settings: EngineSettings, *,
           batch_state: BatchState | None = None, extract_s: float = 0.0, should_stop: StopCheck | None = None,
           on_window_progress: Callable[[WindowProgress], None] | None = None, reading_mode: str = "full",
           index_cache: IndexCache | None = None, weak_answer_score: float | None = None,
           on_candidate: Callable[[Provisional], None] | None = None) -> QAResult:
    """Plan the request (`plan_request`) and answer it (`answer_plan`): for callers with no lane between the two
    (the CLI, the bench, tests). `reading_mode` "full" reads every window; "guided" reads the windows the ranking
    picks, round by round while the answer is weak, falling back to the full read where ranking cannot serve;
    "auto" is guided past a few windows. A refused request hands its memory back before raising."""
    batch_state = batch_state or BatchState(settings.batch_size)
    plan = plan_request(tokenizer, documents, question, settings, reading_mode, batch_state=batch_state,
                        index_cache=index_cache, should_stop=should_stop, weak_answer_score=weak_answer_score)
    return answer_plan(runner, tokenizer, plan, batch_state=batch_state, extract_s=extract_s,
                       should_stop=should_stop, on_window_progress=on_window_progress, on_candidate=on_candidate)


def answer_plan(runner: Runner, tokenizer, plan: RequestPlan, *, batch_state: BatchState | None = None,
                extract_s: float = 0.0, should_stop: StopCheck | None = None,
                on_window_progress: Callable[[WindowProgress], None] | None = None,
                before_wider_read: Callable[[int], None] | None = None,
                on_candidate: Callable[[Provisional], None] | None = None) -> QAResult:
    """`answer_steps` read to its end, each best answer so far told to `on_candidate` (none decoded without
    one)."""
    return drain(answer_steps(runner, tokenizer, plan, batch_state=batch_state, extract_s=extract_s,
                              should_stop=should_stop, on_window_progress=on_window_progress,
                              before_wider_read=before_wider_read, best_so_far=on_candidate is not None),
                 on_candidate)


def answer_steps(runner: Runner, tokenizer, plan: RequestPlan, *, batch_state: BatchState | None = None,
                 extract_s: float = 0.0, should_stop: StopCheck | None = None,
                 on_window_progress: Callable[[WindowProgress], None] | None = None,
                 before_wider_read: Callable[[int], None] | None = None,
                 best_so_far: bool = True) -> Generator[Provisional, None, QAResult]:
    """Answer a planned request; the result carries its latency (planning and `extract_s` included) and memory
    readouts, and in `reading` what was read. `should_stop` (a callable or a threading.Event) ends the request
    between batches with Cancelled; progress goes to `on_window_progress(WindowProgress)`;
    `before_wider_read(windows)` hears, before any of it is tokenized, that a guided read falls back to reading
    `windows` more (a shared deployment's admission may wait there, or raise). It yields, after each batch, the best
    answer of the windows read so far (`BestSoFar`; with `best_so_far` false none is decoded and nothing yielded),
    and the seconds until the next step is asked for count in none of its stages. Closed at a yield, it reads no
    further and hands its memory back. A refused or cancelled request hands its memory back before raising; a
    cancelled one carries the best answer read before it stopped (`Cancelled.best`). Once the windows are read, the
    answer is decoded and returned whatever `should_stop` says: a Stop that comes after the last window gets the
    answer."""
    settings = plan.settings
    batch_state = batch_state or BatchState(settings.batch_size)
    backoffs_before = batch_state.backoffs
    read = None
    evidence = no_answer.Evidence(plan.question, [d.text for d in plan.documents])  # one per request
    best_so_far = BestSoFar(plan.documents, settings, evidence) if best_so_far else None
    away_s = [0.0]  # held by whoever asks for the steps, at its yields
    if best_so_far is not None:
        on_window_progress = both(on_window_progress, best_so_far.on_progress)
    try:
        plan.check_time()  # the budget may have narrowed since planning (ZeroGPU grants what it was asked for)
        with telemetry.measure(runner.devices) as measurement:
            measurement.latency_s["extract"] = extract_s
            for stage, seconds in plan.latency_s.items():
                measurement.latency_s[stage] = measurement.latency_s.get(stage, 0.0) + seconds
            on_batch = best_so_far.on_batch if best_so_far is not None else None
            if plan.mode == "full":
                read = yield from told(_read_full(runner, tokenizer, plan, batch_state, measurement, should_stop,
                                                  on_window_progress, on_batch), best_so_far, away_s)
            else:
                read = yield from told(_read_guided(runner, tokenizer, plan, batch_state, measurement, should_stop,
                                                    on_window_progress, before_wider_read, evidence, on_batch),
                                       best_so_far, away_s)
            measurement.latency_s["forward"] -= away_s[0]
            with measurement.stage("decode"):
                pool = no_answer.answer_pool(no_answer_rule(settings), settings.top_k)  # judge_answers picks top_k
                decoded = best_so_far.decoded(read.windows, pool) if best_so_far is not None else None
                if decoded is None:
                    decoded = decode(read.windows, read.logits, plan.documents, settings, top_k=pool)
            if best_so_far is not None:  # decoded between batches: decode time, not forward time
                measurement.latency_s["decode"] += best_so_far.seconds
                measurement.latency_s["forward"] -= best_so_far.seconds
            answers, verdict = judge_answers(decoded, settings,
                                             read.readout.windows_read == read.readout.windows_total, evidence)
            if verdict.found is not False and any(d.places is not None for d in plan.documents):
                with measurement.stage("mark"):  # a not-found answer's closest spans are no answer to point at
                    read.notices += mark_on_pages(answers, plan.documents, should_stop)
    except LongQAError as exc:
        # The traceback keeps every frame it passed through, and with them the windows and logits: drop them.
        read = None
        if isinstance(exc, Cancelled) and best_so_far is not None and best_so_far.latest is not None:
            exc.best = best_so_far.latest
            exc.windows_done, exc.windows_total = exc.best.windows_read, exc.best.windows_total
        traceback.clear_frames(exc.__traceback__)
        release_memory()
        raise
    except GeneratorExit:  # closed at a yield: nobody wants the answer
        read = None
        release_memory()
        raise
    measurement.latency_s["total"] += extract_s + sum(plan.latency_s.values()) - away_s[0]
    read.readout.expected_s = plan.guided_read_s if plan.mode == "guided" else plan.full_read_s
    read.readout.forward_s = measurement.latency_s.get("forward", 0.0)
    return QAResult(plan.question, answers, read.stats, len(read.windows), read.tokens, read.batch_size,
                    batch_state.backoffs - backoffs_before, measurement.latency_s, measurement.memory,
                    read.notices + verdict.notices,
                    window_tokens=max(len(w.input_ids) for w in read.windows), reading=read.readout,
                    forward=ForwardSample(read.forward_tokens, read.forward_windows, read.forward_s),
                    verdict=verdict)


def told(steps: Generator[None, None, T], best_so_far: BestSoFar | None,
         away_s: list[float]) -> Generator[Provisional, None, T]:
    """A read's steps (one after each batch) as the best answers so far it found: each new one yielded (none
    without `best_so_far`), the seconds away at each yield added to `away_s[0]`; what the read returns. Closed at a
    yield, it closes the read."""
    heard = None
    try:
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value
            latest = best_so_far.latest if best_so_far is not None else None
            if latest is not None and latest is not heard:
                heard, away_from = latest, time.perf_counter()
                yield latest
                away_s[0] += time.perf_counter() - away_from
    finally:
        steps.close()


def both(first: Callable | None, second: Callable) -> Callable:
    """A callback that calls `first` (where there is one), then `second`."""
    if first is None:
        return second

    def call(*args) -> None:
        first(*args)
        second(*args)
    return call


def judge_answers(decoded, settings: EngineSettings, read_whole: bool,
                  evidence: no_answer.Evidence | None = None) -> tuple[list[Answer], no_answer.Verdict]:
    """The best `top_k` answers with their confidence in words (never rising down the list; all "low" where the asked
    attribute is absent from the documents or the question is outside the rule's form), and the verdict on the
    first under the request's rule (the model's, or the threshold the request gave); a rule that needs evidence asks
    `evidence` of each answer and puts those whose sentence names the question's words first
    (`no_answer.evidenced_first`), and every rule asks it whether the documents name the asked attribute."""
    rule = no_answer_rule(settings)
    answers, missing, passing = no_answer.evidenced_first(rule, decoded.answers, evidence, decoded.null_score)
    answers, missing = answers[:settings.top_k], missing[:settings.top_k]
    absent = evidence.absent() if evidence is not None else []
    best = answers[0].score if answers else None
    verdict = no_answer.judge(rule, best, decoded.null_score, read_whole, missing[0] if missing else None, absent,
                              evidence.question if evidence is not None else None)
    words = ["low" if absent or verdict.outside_form else
             no_answer.confidence(rule, answer.score, decoded.null_score, lacking)
             for answer, lacking in zip(answers, missing)]
    first = min(passing, len(answers))  # in score order, before those that do not pass ("low")
    words = no_answer.in_score_order(words[:first], [a.score for a in answers[:first]]) + ["low"] * (len(words) - first)
    rank = no_answer.CONFIDENCE_WORDS.index
    for i in range(1, len(words)):  # a part of an answer above it ("90337" under "GGJ90337") is no surer than it
        words[i] = min(words[i], words[i - 1], key=rank)
    for answer, word in zip(answers, words):
        answer.confidence = word
    return answers, verdict


def mark_on_pages(answers: list[Answer], documents: list[Document], should_stop: StopCheck | None = None,
                  max_s: float = pdf_pages.MARK_SECONDS) -> list[str]:
    """Each answer from a PDF read from a file marked where it stands on its page(s) (`pdf_pages.answer_marks`: one
    reading child per document, within `max_s`), its `location.marks` set; what could not be marked said in
    notices, the answers kept."""
    notices = []
    by_document: dict[int, list[Answer]] = {}
    for answer in answers:
        document = documents[answer.document_index] if answer.document_index >= 0 else None
        if document is not None and document.places is not None and document.source is not None and \
                answer.location is not None:
            by_document.setdefault(answer.document_index, []).append(answer)
    for index, marked in by_document.items():
        limits = ReadLimits(max_read_s=max_s, should_stop=stop_check(should_stop))
        try:
            marks = pdf_pages.answer_marks(documents[index], [(a.start_char, a.end_char) for a in marked], limits)
        except Cancelled:  # a Stop once every window is read keeps the answer, unmarked
            break
        except DocumentError as exc:
            notices.append(f"The answer is not marked on its page: {exc}")
            continue
        except RuntimeError:  # the child failed in a way no limit explains: the answer stands without its mark
            notices.append(f"The answer is not marked on its page: the PDF reader failed on '{documents[index].name}'.")
            continue
        for answer, found in zip(marked, marks):
            answer.location = replace(answer.location, marks=found)
    return notices


@dataclass
class _Read:
    """A read's windows and logits, and what the result says of it."""

    windows: list
    logits: list
    stats: list[DocumentStats]
    tokens: int
    batch_size: int
    notices: list[str]
    readout: ReadingReadout
    forward_tokens: int = 0
    forward_windows: int = 0
    forward_s: float = 0.0


def _read_full(runner, tokenizer, plan: RequestPlan, batch_state, measurement, should_stop,
               on_window_progress, on_batch=None) -> Generator[None, None, _Read]:
    """Every window of every document, in the plan's settings: cut from the plan's tokens where it tokenized the
    documents (a ranked request that resolved to the full read), else tokenized here."""
    settings = plan.settings
    with measurement.stage("tokenize"):
        if plan.cuts:
            windows, stats = cut_windows(tokenizer, plan.question, plan.documents, plan.document_tokens,
                                         plan.cuts, should_stop=should_stop), plan.stats
        else:
            windows, stats = make_windows(tokenizer, plan.question, plan.documents, settings,
                                          should_stop=should_stop)
        tokens = sum(s.tokens for s in stats)
        check_tokens(tokens, settings.max_total_tokens)
    with measurement.stage("forward"):
        logits, used_size, sample = yield from iter_windows(runner, windows, tokenizer.pad_token_id, settings,
                                                            batch_state, should_stop=should_stop,
                                                            on_window_progress=on_window_progress, on_batch=on_batch)
    readout = ReadingReadout("full", plan.requested, len(windows), len(windows), plan.reading.reason,
                             [ReadSpan(**window_span(w)) for w in windows], plan.reading.code)
    return _Read(windows, logits, stats, tokens, used_size, list(plan.notices), readout, sample.tokens,
                 sample.windows, sample.seconds)


def _read_guided(runner, tokenizer, plan: RequestPlan, batch_state, measurement, should_stop,
                 on_window_progress, before_wider_read, evidence: no_answer.Evidence,
                 on_batch=None) -> Generator[None, None, _Read]:
    """The plan's rounds (`reading.read_rounds`) of the full read's windows; still weak after every window the
    ranking could point to, the windows not read yet, so that guided reading never ends on less than the full read
    would find and never reads a window twice (the answer is then the full read's) -- unless that would pass the
    time budget, where the answer read so far is kept and says so. `before_wider_read(windows)` hears how many
    windows are left before they are read."""
    guided = yield from reading.read_rounds(runner, tokenizer, plan, batch_state, measurement, evidence,
                                            should_stop=should_stop, on_window_progress=on_window_progress,
                                            on_batch=on_batch)
    notices = plan.notices + guided.notices
    why, went_on = plan.reading, False
    read = set(guided.indices) - guided.narrowed  # a window read sized to its passage is not the full read's
    left = [i for i in range(len(plan.cuts)) if i not in read]
    if left and why.is_weak(guided.best_score) and not guided.cut_short:
        spent_s = measurement.latency_s.get("forward", 0.0)
        too_long = reading.rest_passes_limit(plan.settings, batch_state, spent_s, len(left), plan.cut_tokens(left))
        if too_long:
            notices.append(too_long)
        else:
            why, went_on = reading.weak_after_guided(plan.reading, len(read), len(left)), True
            if before_wider_read is not None:
                before_wider_read(len(left))
            guided.drop(sorted(guided.narrowed))
            yield from reading.read_windows(runner, tokenizer, plan, left, guided, batch_state, measurement,
                                            should_stop=should_stop, on_window_progress=on_window_progress,
                                            on_batch=on_batch)
    _, windows, logits = guided.in_document_order()  # went on: the full read's windows, so its answers
    readout = ReadingReadout("full" if went_on else "guided", plan.requested, len(windows), len(plan.cuts),
                             why.reason, [ReadSpan(**window_span(w)) for w in windows], why.code,
                             len(guided.narrowed), guided.widened)
    tokens = plan.tokens if went_on else sum(int(w.context.sum()) for w in windows)
    return _Read(windows, logits, plan.stats, tokens, guided.batch_size, notices, readout, guided.forward_tokens,
                 guided.forward_windows, guided.forward_s)
