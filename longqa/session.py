"""The embedded backend (`longqa.backend.Backend`): the model loaded in this process, how to switch it, how a request
is planned before its turn and answered after, and reading a request's documents. Shared by the CLI and the web app
so both behave the same.

It holds state (the loaded model) but does no formatting and knows nothing of gradio.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import threading
import time
import weakref
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Callable, Generator, NamedTuple

from longqa import loader
from longqa.backend import Gate, Progress, Selection
from longqa.models import KNOWN_MODELS, model_config, resolve_model
from longqa.readout import MemoryPrediction, Readout, predict_full_read_s
from longqa_core.answering import Provisional, QAResult, answer_steps
from longqa_core.batching import WindowProgress, collate, drain
from longqa_core.documents import (DEFAULT_MAX_FILE_BYTES, DEFAULT_MAX_PAGES, DEFAULT_MAX_READ_S, Document, ReadLimits,
                                   from_text)
from longqa_core.files import read_document
from longqa_core.errors import CharLimitError, DocumentError, InputError, LongQAError, ModelLoadError, ProfileError
from longqa_core.telemetry import trim_heap
from longqa_core.index_cache import IndexCache
from longqa_core.limits import (DEFAULT_MAX_TOTAL_TOKENS, NO_DOCUMENT, EngineSettings, Question, StopCheck,
                                max_chars_for, validate_request)
from longqa_core.pdf_pages import MARK_SECONDS, render_page
from longqa_core.plan import RequestPlan, plan_request
from longqa_core.reading import DEFAULT_READING
from longqa_core.windows import make_windows
from strategies.auto import resolve_auto
from strategies.gradient_checkpointing import TrainingStepReadout, training_step_readout
from strategies.hardware import Hardware, detect_hardware
from strategies.memory_planner import error_pct, plan_profile
from strategies.profiles import Profile, check_runnable, custom_profile, get_profile

SAMPLES_DIR = Path(__file__).resolve().parent / "samples"  # written by scripts/make_samples.py


def read_documents(files: list, pasted_text: str | None = None, max_bytes: int = DEFAULT_MAX_FILE_BYTES, *,
                   max_chars: int | None = max_chars_for(DEFAULT_MAX_TOTAL_TOKENS),
                   max_pages: int = DEFAULT_MAX_PAGES,
                   max_read_s: float | None = DEFAULT_MAX_READ_S, should_stop: Callable[[], bool] | None = None,
                   on_wait: Callable[[int], None] | None = None,
                   left_out: list[tuple[str, str]] | None = None) -> tuple[list[Document], float]:
    """Documents from file paths (or `(name, bytes)` pairs) and pasted text, and the seconds it took; a reader that
    waits or runs a child stops when `should_stop` says so and tells `on_wait` how many reads are ahead. Given a
    `left_out` list, a file that cannot be read (empty, unsupported, corrupt, too large) costs only itself: its name
    and why go to the list and the others are read (DocumentError still when none can be).

    Each file and the pasted text obey `max_bytes`; `max_chars` is one budget for the whole request: each document
    may have what the ones before it left (reading stops at the one that passes it), and all share one
    `max_read_s` budget.
    """
    began = time.perf_counter()
    limits = dict(max_bytes=max_bytes, max_pages=max_pages, max_read_s=max_read_s, read_began=began,
                  should_stop=should_stop, on_wait=on_wait)
    documents = []

    def add(read: Callable[[int | None], Document], name: str) -> None:
        """Read the next document with what the ones before it left of `max_chars`."""
        used = sum(d.n_chars for d in documents)
        left = None if max_chars is None else max_chars - used
        if left is not None and left <= 0:
            raise DocumentError(f"The first {len(documents)} documents already have {used:,} characters, the limit "
                                f"for one request: ask about fewer documents.")
        try:
            documents.append(read(left))
        except CharLimitError as exc:
            if not documents:
                raise
            raise DocumentError(f"The {len(documents) + 1} documents have {'more than ' if exc.partial else ''}"
                                f"{used + exc.n_chars:,} characters together, over the limit of {max_chars:,} "
                                f"characters.") from None
        except DocumentError as exc:
            if left_out is None:
                raise
            left_out.append((name, str(exc)))

    for item in files or []:
        if isinstance(item, tuple):
            name, data = item
            add(lambda left: read_document(data, name, max_chars=left, **limits), name)
        else:
            add(lambda left: read_document(item, Path(item).name, max_chars=left, **limits), Path(item).name)
    if pasted_text and pasted_text.strip():
        add(lambda left: from_text(pasted_text, max_bytes=max_bytes, max_chars=left), "pasted text")
    if not documents and left_out:
        raise DocumentError(" ".join(why for _, why in left_out))
    if not documents:
        raise InputError(NO_DOCUMENT)
    return documents, time.perf_counter() - began


def page_image(source: str, name: str, mark, should_stop: Callable[[], bool] | None = None) -> bytes:
    """The PNG of an answer's PDF page with its mark drawn (`location.marks`' `PageMark`), from the file `source` its
    document was read from (shown as `name`), in a reading child within MARK_SECONDS and `should_stop`: what the
    page shows when a visitor opens it (DocumentError in words where it cannot be drawn)."""
    return render_page(source, name, mark, ReadLimits(max_read_s=MARK_SECONDS, should_stop=should_stop))


class ReadRequest(NamedTuple):
    """What `read_request` read: the documents, the question as checked (None where none was given), the seconds
    reading took, and the files left out because they cannot be read (name, why)."""

    documents: list[Document]
    question: Question | None
    extract_s: float
    left_out: tuple[tuple[str, str], ...] = ()


def read_request(files: list, pasted_text: str | None, question: str | None, *, max_bytes: int,
                 max_total_tokens: int, should_stop: Callable[[], bool] | None = None,
                 on_wait: Callable[[int], None] | None = None) -> ReadRequest:
    """A request's documents read under its limits (characters capped for `max_total_tokens`, as the engine caps
    them), the question checked once (InputError when `question` is given and nothing is left of it; planning takes
    the `Question` as it is), and the seconds it took. Needs no model, so a page can read and check a request before
    its turn on the model (`should_stop` and `on_wait`: as in `read_documents`). A file that cannot be read is left
    out while another can be (`ReadRequest.left_out`)."""
    left_out: list[tuple[str, str]] = []
    documents, extract_s = read_documents(files, pasted_text, max_bytes,
                                          max_chars=max_chars_for(max_total_tokens), should_stop=should_stop,
                                          on_wait=on_wait, left_out=left_out)
    checked = validate_request(documents, question) if question is not None else None
    return ReadRequest(documents, checked, extract_s, tuple(left_out))


def sample_examples() -> list[dict]:
    """The bundled sample questions (file, question, answer) about the documents in SAMPLES_DIR."""
    path = SAMPLES_DIR / "examples.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else []


def sample_files() -> list[Path]:
    """The bundled documents the sample questions are about."""
    return sorted({SAMPLES_DIR / example["file"] for example in sample_examples()})


def training_batch(tokenizer, window_tokens: int) -> dict:
    """The first window of the longest bundled sample, `window_tokens` long, encoded as the engine encodes it."""
    example = max(sample_examples(), key=lambda e: (SAMPLES_DIR / e["file"]).stat().st_size)
    document = read_document(SAMPLES_DIR / example["file"])
    # doc_stride 0: only the first window is used, and short windows (128) leave no room for the default stride
    settings = EngineSettings(max_seq_len=window_tokens, doc_stride=0).resolved(tokenizer)
    windows, _ = make_windows(tokenizer, example["question"], [document], settings)
    return collate(windows[:1], tokenizer.pad_token_id)


class Session:
    """The model loaded in this process (one at a time) and the requests made against it.

    Loads and answers never overlap: a load waits for the answers in progress, and answers wait for the load.
    Answers run side by side (a shared deployment orders their batches through a `Gate`). A failed switch brings
    back the model that was in use before.
    """

    def __init__(self, load_model: Callable | None = None, hardware=None):
        self._load_model = load_model or loader.load_model
        self.hardware = hardware  # what profiles resolve for; None: detected at each load
        self.loaded = None  # the one record of what is loaded (loader.LoadedModel)
        self.loads = 0  # counts successful loads, so a visitor can tell that someone else switched
        self.lock = threading.RLock()
        self._asks_done = threading.Condition(self.lock)
        self._asks_in_progress = 0
        self._spare_tokenizers: dict[int, list] = {}  # tokenizer copies for requests, by id of the loaded model
        # the uploads' ranking indexes, bounded in bytes, one build per upload: a next question pays only the query
        self.index_cache = IndexCache()
        # A forked child (ZeroGPU's GPU worker) must not inherit a lock held by a thread that did not come along.
        os.register_at_fork(after_in_child=partial(_renew_lock, weakref.ref(self)))

    @property
    def model_ref(self) -> str | None:
        return self.loaded.model_ref if self.loaded is not None else None

    @property
    def profile_name(self) -> str | None:
        return self.loaded.profile.name if self.loaded is not None else None

    @property
    def selection(self) -> Selection | None:
        """What the loaded model was asked for: the model, the profile's name, and the ticked strategies of
        `custom`."""
        return self.loaded.selection if self.loaded is not None else None

    @property
    def generation(self) -> int:
        return self.loaded.generation if self.loaded is not None else self.loads

    @property
    def capacity(self) -> int:
        """How many requests this session answers side by side: one, on the one model it holds."""
        return 1

    def load(self, model_ref: str, profile, *, on_progress: Progress | None = None, fallback_to_demo: bool = False,
             force: bool = False, strategies=()):
        """Switch to (model, profile), freeing the old model first; on failure restore the old one and raise."""
        with self.lock:
            self._wait_for_asks()
            previous = None
            selection = Selection.of(model_ref, getattr(profile, "name", profile), strategies)
            if self.loaded is not None:
                # `auto` resolves to a concrete profile: compare what was asked for, not what it became.
                if not force and selection == self.loaded.selection:
                    return self.loaded.readout
                previous = self.loaded
                self.unload()
            try:
                loaded = self._load_model(model_ref, profile, on_progress=on_progress,
                                          fallback_to_demo=fallback_to_demo, **self._hardware_kwargs())
            except LongQAError:
                self._restore(previous)
                raise
            except Exception as exc:  # anything unexpected from a checkpoint is still a failed load
                self._restore(previous)
                raise ModelLoadError(f"Could not load {model_ref!r}: {exc}") from exc
            self.loads += 1
            loaded.selection, loaded.generation = selection, self.loads
            self.loaded = loaded
            return loaded.readout

    def _restore(self, previous) -> None:
        if previous is not None:
            self.loaded = self._load_model(previous.model_ref, previous.profile, **self._hardware_kwargs())
            self.loaded.selection, self.loaded.generation = previous.selection, previous.generation

    def _hardware_kwargs(self) -> dict:
        return {"hardware": self.hardware} if self.hardware is not None else {}

    def unload(self) -> None:
        with self.lock:
            self._wait_for_asks()
            self._spare_tokenizers.clear()
            if self.loaded is not None:
                loaded, self.loaded = self.loaded, None
                loaded.unload()

    def plan(self, documents: list[Document], question: str, reading: str = DEFAULT_READING, *,
             should_stop: StopCheck | None = None, visitor: str | None = None, **overrides) -> RequestPlan:
        """Read and plan a request once, before its turn on the model and without its lock: every limit checked,
        the reading ranked (`longqa_core.plan.plan_request`), the time predicted from the loaded model's measured
        throughput. `overrides` replace engine settings (top_k, max_total_tokens, max_request_s, ...). `visitor`
        names whose ranking indexes the request may reuse and keep (one visitor's are never another's:
        docs/serving.md, "No timing oracle"); a request that names none keeps none."""
        loaded = self._loaded()
        tokenizer = self._borrow_tokenizer(loaded)
        try:
            plan = self._plan(tokenizer, documents, question, with_overrides(loaded.settings, overrides), reading,
                              loaded, visitor, should_stop)
        finally:
            self._return_tokenizer(loaded, tokenizer)
        plan.generation, plan.overrides = loaded.generation, {k: v for k, v in overrides.items() if v is not None}
        plan.visitor = visitor
        return plan

    def _plan(self, tokenizer, documents, question, settings, reading, loaded, visitor, should_stop=None):
        """`plan_request` with the loaded model's throughput, and `visitor`'s share of the index cache (if any)."""
        return plan_request(tokenizer, documents, question, settings, reading, batch_state=loaded.batch_state,
                            index_cache=self.index_cache if visitor is not None else None, should_stop=should_stop,
                            visitor=visitor or "")

    def ask(self, plan: RequestPlan, *, extract_s: float = 0.0, gate: Gate | None = None,
            should_stop: StopCheck | None = None,
            on_window_progress: Callable[[WindowProgress], None] | None = None,
            on_candidate: Callable[[Provisional], None] | None = None) -> Readout:
        """`ask_steps` read to its end, each best answer so far told to `on_candidate` (none decoded without
        one)."""
        return drain(self.ask_steps(plan, extract_s=extract_s, gate=gate, should_stop=should_stop,
                                    on_window_progress=on_window_progress, best_so_far=on_candidate is not None),
                     on_candidate)

    def ask_steps(self, plan: RequestPlan, *, extract_s: float = 0.0, gate: Gate | None = None,
                  should_stop: StopCheck | None = None,
                  on_window_progress: Callable[[WindowProgress], None] | None = None,
                  best_so_far: bool = True) -> Generator[Provisional, None, Readout]:
        """Answer a plan with the loaded model (a plan made for a model since replaced is made again for this one),
        yielding the best answer so far after each batch (`answering.answer_steps`) and returning the readout:
        `gate` gives the request its turn per batch on a shared model (and admits it again before a guided read
        falls back to every window, waiting for a full read's place), `should_stop` ends it between batches, and
        `on_window_progress` hears after each batch. Requests run side by side, each tokenizing on its own copy of
        the tokenizer; a load or a training step waits for the requests in progress, and requests wait for it. The
        freed heap goes back to the system after every request, answered, stopped or closed (`trim_heap`)."""
        with self.asking() as loaded:
            tokenizer = self._borrow_tokenizer(loaded)
            try:
                plan = self.current(plan, loaded)
                runner = gate.runner(loaded.runner) if gate is not None else loaded.runner
                result = yield from answer_steps(runner, tokenizer, plan, batch_state=loaded.batch_state,
                                                 extract_s=extract_s, should_stop=should_stop,
                                                 on_window_progress=on_window_progress,
                                                 before_wider_read=gate.widen if gate is not None else None,
                                                 best_so_far=best_so_far)
            finally:
                self._return_tokenizer(loaded, tokenizer)
                trim_heap()  # the request's windows and logits are gone: their pages go back to the system (issue 40)
        return self.readout(result, loaded)

    def current(self, plan: RequestPlan, loaded) -> RequestPlan:
        """`plan`, or where another visitor switched the model since it was made, the same request planned for the
        model loaded now (its windows and limits are that model's)."""
        if plan.generation == loaded.generation:
            return plan
        tokenizer = self._borrow_tokenizer(loaded)
        try:
            replanned = self._plan(tokenizer, plan.documents, plan.question, with_overrides(loaded.settings,
                                   plan.overrides), plan.requested, loaded, plan.visitor)
        finally:
            self._return_tokenizer(loaded, tokenizer)
        replanned.generation, replanned.overrides, replanned.visitor = loaded.generation, plan.overrides, plan.visitor
        return replanned

    def learn(self, readout: Readout) -> None:
        """A readout answered in another process (a ZeroGPU worker) teaches the loaded model's throughput estimate
        what its forward passes measured (answers here record it as they run)."""
        if self.loaded is not None:
            self.loaded.batch_state.record(readout.result.forward)

    def _loaded(self):
        loaded = self.loaded
        if loaded is None:
            raise ModelLoadError(NO_MODEL)
        return loaded

    @contextlib.contextmanager
    def asking(self):
        """The loaded model for one request, counted in progress while it runs so that loads wait for it (wherever
        the request runs: here, or in Ray's replicas)."""
        with self.lock:
            loaded = self._loaded()
            self._asks_in_progress += 1
        try:
            yield loaded
        finally:
            with self.lock:
                self._asks_in_progress -= 1
                self._asks_done.notify_all()

    def _borrow_tokenizer(self, loaded):
        """A copy of `loaded`'s tokenizer for one request or plan alone: a fast tokenizer must not serve two threads
        at once (and counting changes its truncation)."""
        with self.lock:
            spare = self._spare_tokenizers.get(id(loaded))
            tokenizer = spare.pop() if spare else None
        return tokenizer if tokenizer is not None else copy.deepcopy(loaded.tokenizer)

    def _return_tokenizer(self, loaded, tokenizer) -> None:
        with self.lock:
            if loaded is self.loaded:
                self._spare_tokenizers.setdefault(id(loaded), []).append(tokenizer)

    def _wait_for_asks(self) -> None:
        """Under the lock: until no request is in progress (new ones wait for the lock)."""
        while self._asks_in_progress:
            self._asks_done.wait()

    def close(self) -> None:
        """Free what the session holds (the model); a session that runs elsewhere also stops that there."""
        self.unload()

    def training_step(self, window_tokens: int) -> tuple[TrainingStepReadout, int]:
        """One forward+backward step of the loaded model, without and then with gradient checkpointing, on the
        first window of the longest bundled sample: the readout and the window's length in tokens. ProfileError
        when the model as its profile loaded it cannot take a training step."""
        with self.lock:
            self._wait_for_asks()
            loaded = self._loaded()
            batch = training_batch(loaded.tokenizer, window_tokens)
            try:
                with loader.training_context(loaded) as model:
                    readout = training_step_readout(model, batch)
            except Exception as exc:  # e.g. int8 or 8-bit weights have no gradients
                raise ProfileError(f"A training step cannot run on the model as profile {loaded.profile.name!r} "
                                   f"loaded it ({type(exc).__name__}: {exc}). Try baseline-fp32.") from exc
        return readout, int(batch["input_ids"].shape[1])  # (B, L): L is the window's length

    def runnable_profile(self, name: str, strategies=()) -> Profile:
        """The profile `name` (`custom`: the ticked `strategies`, in canonical order) once checked to run on this
        session's machine; ProfileError naming why when it cannot. `auto` stays `auto`: the loader resolves it with
        the model's config."""
        profile = custom_profile(strategies or []) if name == "custom" else get_profile(name)
        check_runnable(profile, self._machine())
        return profile

    def auto_profile(self, model_ref: str) -> Profile | None:
        """The profile `auto` stands for with `model_ref` on this machine, by the loader's rule (`resolve_auto` with
        the model's config: the fastest profile predicted to fit): the one the loader picked when `model_ref` is
        loaded under `auto`, else the rule applied to its config read without fetching anything (registry,
        bundled, local and random-weight models). None for another Hub model: only its load fetches the config."""
        loaded = self.loaded
        if loaded is not None and loaded.model_ref == model_ref and loaded.selection.profile == "auto":
            return loaded.profile
        try:
            if resolve_model(model_ref).kind == "hub" and model_ref not in KNOWN_MODELS:
                return None
            return resolve_auto(self._machine(), model_config(model_ref))
        except (LongQAError, KeyError, AttributeError, TypeError):  # a config the planner cannot read
            return None

    def _machine(self) -> Hardware:
        return self.hardware or detect_hardware()

    def readout(self, result: QAResult, loaded=None) -> Readout:
        """A result with the model and profile that answered, the memory planner's prediction beside it, and a guided
        read's prediction of the full read at the model's measured seconds a window."""
        loaded = loaded or self.loaded
        if loaded is None:
            return Readout(result, None, None)
        return Readout(result, loaded.model_ref, loaded.profile.name, memory_prediction(loaded, result),
                       full_read_s=predict_full_read_s(result, loaded.batch_state),
                       strategies=list(loaded.readout.strategies))


NO_MODEL = "No model is loaded."


def memory_prediction(loaded, result: QAResult) -> MemoryPrediction | None:
    """What the memory planner predicts for this request from the model's config, the profile, the window length
    and the batch alone (as it would before loading), beside the peak that was measured: torch's peak allocated
    bytes on the GPU that answered, or the process's peak RSS on CPU. None without a model."""
    config = getattr(loaded.model, "config", None) if loaded is not None else None
    if config is None:
        return None
    try:
        plan = plan_profile(config, loaded.profile, loaded.hardware or detect_hardware(),
                            tokens=result.window_tokens or None,
                            batch=max(1, min(result.batch_size, result.windows)),
                            runtime_bytes=loaded.readout.host_rss_before_bytes)
    except (LongQAError, KeyError, AttributeError, TypeError):  # a config the planner cannot read
        return None
    measured = result.memory.peak_on(plan.device)
    return MemoryPrediction(plan.device, plan.peak_bytes, measured, error_pct(plan.peak_bytes, measured),
                            "peak RSS" if plan.device == "cpu" else "torch peak allocated")


def with_overrides(settings: EngineSettings, overrides: dict) -> EngineSettings:
    """A request's engine settings: the loaded model's, with each override that was given (not None)."""
    return replace(settings, **{k: v for k, v in overrides.items() if v is not None})


def _renew_lock(session_ref) -> None:
    session = session_ref()
    if session is not None:
        session.lock = threading.RLock()
        session._asks_done = threading.Condition(session.lock)
        session._asks_in_progress = 0
