"""One serving session: the model that is loaded now, how to switch it, and how a request reaches the engine.

Shared by the CLI and the web app so both behave the same. It holds state (the loaded model) but does no
formatting and knows nothing of gradio.
"""

from __future__ import annotations

import copy
import json
import os
import threading
import time
import weakref
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Callable

from longqa import loader
from longqa.models import KNOWN_MODELS, model_config, resolve_model
# The page's one door to the core is this module: the core's limits, checks, readouts and errors it shows
# (SUPPORTED_EXTENSIONS, DEFAULT_MAX_TOTAL_TOKENS, whole_number, gpu_snapshot, the errors) it takes from here.
from longqa_core import engine
from longqa_core.documents import (DEFAULT_MAX_FILE_BYTES, DEFAULT_MAX_PAGES, DEFAULT_MAX_READ_S,  # noqa: F401
                                   SUPPORTED_EXTENSIONS, Document, from_text, read_document)
from longqa_core.engine import DEFAULT_MAX_TOTAL_TOKENS, whole_number  # noqa: F401
from longqa_core.errors import (CharLimitError, DocumentError, InputError, LongQAError, ModelLoadError,
                                 ProfileError)
from longqa_core.reading import DEFAULT_READING, READING_MODES  # noqa: F401
from longqa_core.telemetry import gpu_snapshot  # noqa: F401
from strategies.auto import resolve_auto
from strategies.gradient_checkpointing import TrainingStepReadout, training_step_readout
from strategies.hardware import Hardware, detect_hardware
from strategies.memory_planner import error_pct, plan_profile
from strategies.profiles import Profile, check_runnable, custom_profile, get_profile

Progress = Callable[[float, str], None]
SAMPLES_DIR = Path(__file__).resolve().parent / "samples"  # written by scripts/make_samples.py


def read_documents(files: list, pasted_text: str | None = None, max_bytes: int = DEFAULT_MAX_FILE_BYTES, *,
                   max_chars: int | None = engine.max_chars_for(engine.DEFAULT_MAX_TOTAL_TOKENS),
                   max_pages: int = DEFAULT_MAX_PAGES,
                   max_read_s: float | None = DEFAULT_MAX_READ_S) -> tuple[list[Document], float]:
    """Documents from file paths (or `(name, bytes)` pairs) and pasted text, and the seconds it took.

    Each file and the pasted text obey `max_bytes`; `max_chars` is one budget for the whole request: each document
    may have what the ones before it left (reading stops at the one that passes it), and all share one
    `max_read_s` budget.
    """
    began = time.perf_counter()
    limits = dict(max_bytes=max_bytes, max_pages=max_pages, max_read_s=max_read_s, read_began=began)
    documents = []

    def add(read: Callable[[int | None], Document]) -> None:
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

    for item in files or []:
        if isinstance(item, tuple):
            name, data = item
            add(lambda left: read_document(data, name, max_chars=left, **limits))
        else:
            add(lambda left: read_document(item, Path(item).name, max_chars=left, **limits))
    if pasted_text and pasted_text.strip():
        add(lambda left: from_text(pasted_text, max_bytes=max_bytes, max_chars=left))
    if not documents:
        raise InputError("No document given: upload a file or paste some text.")
    return documents, time.perf_counter() - began


def read_request(files: list, pasted_text: str | None, question: str | None, *, max_bytes: int,
                 max_total_tokens: int) -> tuple[list[Document], float]:
    """A request's documents read under its limits (characters capped for `max_total_tokens`, as the engine caps
    them), and the seconds it took; InputError when `question` is given and nothing is left of it. Needs no model,
    so a page can read and check a request before its turn on the model."""
    documents, extract_s = read_documents(files, pasted_text, max_bytes,
                                          max_chars=engine.max_chars_for(max_total_tokens))
    if question is not None:
        engine.validate_request(documents, question)
    return documents, extract_s


def sample_examples() -> list[dict]:
    """The bundled sample questions (file, question, answer) about the documents in SAMPLES_DIR."""
    path = SAMPLES_DIR / "examples.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else []


def training_batch(tokenizer, window_tokens: int) -> dict:
    """The first window of the longest bundled sample, `window_tokens` long, encoded as the engine encodes it."""
    example = max(sample_examples(), key=lambda e: (SAMPLES_DIR / e["file"]).stat().st_size)
    document = read_document(SAMPLES_DIR / example["file"])
    # doc_stride 0: only the first window is used, and short windows (128) leave no room for the default stride
    settings = engine.EngineSettings(max_seq_len=window_tokens, doc_stride=0).resolved(tokenizer)
    windows, _ = engine.make_windows(tokenizer, example["question"], [document], settings)
    return engine.collate(windows[:1], tokenizer.pad_token_id)


class Session:
    """The currently loaded model (one at a time) and the requests made against it.

    Loads and answers never overlap: a load waits for the answers in progress, and answers wait for the load.
    Answers run side by side (a shared deployment orders their batches through `gate`). A failed switch brings back
    the model that was in use before.
    """

    def __init__(self, load_model: Callable | None = None, hardware=None):
        self._load_model = load_model or loader.load_model
        self.hardware = hardware  # what profiles resolve for; None: detected at each load
        self.loaded = None
        self.requested: tuple[str, str] | None = None
        self.generation = 0  # counts successful loads, so a visitor can tell that someone else switched
        self.lock = threading.RLock()
        self._asks_done = threading.Condition(self.lock)
        self._asks_in_progress = 0
        self._spare_tokenizers: dict[int, list] = {}  # tokenizer copies for requests, by id of the loaded model
        self._preview_lock = threading.Lock()
        self._preview_tokenizer = None  # (the loaded model it was copied for, its own copy of the tokenizer)
        self.index_cache: dict = {}  # the last upload's ranking index: its next question pays only the query
        # A forked child (ZeroGPU's GPU worker) must not inherit a lock held by a thread that did not come along.
        os.register_at_fork(after_in_child=partial(_renew_lock, weakref.ref(self)))

    @property
    def model_ref(self) -> str | None:
        return self.loaded.model_ref if self.loaded is not None else None

    @property
    def profile_name(self) -> str | None:
        return self.loaded.profile.name if self.loaded is not None else None

    def load(self, model_ref: str, profile, *, on_progress: Progress | None = None, fallback_to_demo: bool = False,
             force: bool = False):
        """Switch to (model, profile), freeing the old model first; on failure restore the old one and raise."""
        with self.lock:
            self._wait_for_asks()
            previous = None
            requested = (model_ref, getattr(profile, "name", profile))
            if self.loaded is not None:
                # `auto` resolves to a concrete profile: compare what was asked for, not what it became.
                if not force and requested == self.requested:
                    return self.loaded.readout
                previous = (self.loaded.model_ref, self.loaded.profile, self.requested)
                self.unload()
            try:
                self.loaded = self._load_model(model_ref, profile, on_progress=on_progress,
                                               fallback_to_demo=fallback_to_demo, **self._hardware_kwargs())
            except LongQAError:
                self._restore(previous)
                raise
            except Exception as exc:  # anything unexpected from a checkpoint is still a failed load
                self._restore(previous)
                raise ModelLoadError(f"Could not load {model_ref!r}: {exc}") from exc
            self.requested = requested
            self.generation += 1
            return self.loaded.readout

    def _restore(self, previous) -> None:
        if previous is not None:
            self.loaded = self._load_model(previous[0], previous[1], **self._hardware_kwargs())
            self.requested = previous[2]

    def _hardware_kwargs(self) -> dict:
        return {"hardware": self.hardware} if self.hardware is not None else {}

    def unload(self) -> None:
        with self.lock:
            self._wait_for_asks()
            self._spare_tokenizers.clear()
            if self.loaded is not None:
                loaded, self.loaded = self.loaded, None
                self.requested = None
                loaded.unload()

    def ask(self, documents: list[Document], question: str, *, extract_s: float = 0.0,
            on_progress: Callable[[int, int], None] | None = None, should_stop: engine.StopCheck | None = None,
            on_window_progress: Callable[[engine.WindowProgress], None] | None = None,
            reading: str = DEFAULT_READING, gate: Callable | None = None, **overrides) -> engine.QAResult:
        """Answer over documents with the loaded model; `overrides` replace engine settings (top_k,
        max_total_tokens, max_request_s, ...). `should_stop`, `on_window_progress` and the `reading` mode
        ("auto", "full", "guided") go to `engine.answer`. `gate` wraps the model's runner (a shared deployment's
        turn per batch). Requests run side by side, each tokenizing on its own copy of the tokenizer; a load or a
        training step waits for the requests in progress, and requests wait for it."""
        loaded, tokenizer = self._begin_ask()
        try:
            settings = with_overrides(loaded.settings, overrides)
            runner = gate(loaded.runner) if gate is not None else loaded.runner
            return engine.answer(runner, tokenizer, documents, question, settings,
                                 batch_state=loaded.batch_state, on_progress=on_progress, extract_s=extract_s,
                                 should_stop=should_stop, on_window_progress=on_window_progress,
                                 reading_mode=reading, index_cache=self.index_cache)
        finally:
            self._end_ask(loaded, tokenizer)

    def _begin_ask(self):
        """The loaded model and a tokenizer copy of its own for one request (a fast tokenizer must not serve two
        threads at once), counted in progress so that loads wait for it."""
        with self.lock:
            if self.loaded is None:
                raise ModelLoadError("No model is loaded.")
            loaded = self.loaded
            self._asks_in_progress += 1
            spare = self._spare_tokenizers.get(id(loaded))
            tokenizer = spare.pop() if spare else None
        if tokenizer is None:
            tokenizer = copy.deepcopy(loaded.tokenizer)
        return loaded, tokenizer

    def _end_ask(self, loaded, tokenizer) -> None:
        with self.lock:
            if loaded is self.loaded:
                self._spare_tokenizers.setdefault(id(loaded), []).append(tokenizer)
            self._asks_in_progress -= 1
            self._asks_done.notify_all()

    def _wait_for_asks(self) -> None:
        """Under the lock: until no request is in progress (new ones wait for the lock)."""
        while self._asks_in_progress:
            self._asks_done.wait()

    def ask_readout(self, documents: list[Document], question: str, **kwargs) -> dict:
        """`ask`, then the result's full readout (`readout`): what the page and its API return."""
        return self.readout(self.ask(documents, question, **kwargs))

    @property
    def capacity(self) -> int:
        """How many requests this session answers side by side: one, on the one model it holds."""
        return 1

    def close(self) -> None:
        """Free what the session holds (the model); a session that runs elsewhere also stops that there."""
        self.unload()

    def preview(self, documents: list[Document], question: str, **overrides) -> engine.RequestPlan:
        """What a request would cost (tokens and windows per document, predicted seconds) and whether it passes
        every limit, without the model or its lock: counted on this session's own copy of the tokenizer (a fast
        tokenizer must not serve two threads at once)."""
        loaded = self.loaded
        if loaded is None:
            raise ModelLoadError("No model is loaded.")
        with self._preview_lock:
            settings = with_overrides(loaded.settings, overrides)
            return engine.plan_request(self._preview_copy(loaded), documents, question, settings,
                                       batch_state=loaded.batch_state)

    def _preview_copy(self, loaded):
        """This session's own copy of `loaded`'s tokenizer for previews and plans (a fast tokenizer must not serve
        two threads at once); call with `_preview_lock` held."""
        if self._preview_tokenizer is None or self._preview_tokenizer[0] is not loaded:
            self._preview_tokenizer = (loaded, copy.deepcopy(loaded.tokenizer))
        return self._preview_tokenizer[1]

    def reading_plan(self, documents: list[Document], question: str, reading: str = DEFAULT_READING,
                     **overrides) -> dict:
        """How a request would be read, before its turn on the model: the mode (after auto), why, the characters
        it is expected to read (the ranking's first rounds; all of them for a full read) and about how many windows
        that is (`expected_windows`, from a sample of the text's characters per token). Ranks on this session's own
        tokenizer copy, outside the model's lock, and leaves the index in the cache for the answer to reuse."""
        loaded = self.loaded
        if loaded is None:
            raise ModelLoadError("No model is loaded.")
        n_chars = sum(d.n_chars for d in documents)
        with self._preview_lock:
            tokenizer = self._preview_copy(loaded)
            settings = with_overrides(loaded.settings, overrides).resolved(tokenizer)
            per_token = [engine.chars_per_token(tokenizer, d.text) if d.text else 1.0 for d in documents]
            room = settings.max_seq_len - settings.max_question_len - tokenizer.num_special_tokens_to_add(pair=True)

            def windows_for(n: int, ratio: float) -> int:
                return engine.count_windows(int(n / ratio), max(room, settings.doc_stride + 1), settings.doc_stride)

            every_window = sum(windows_for(d.n_chars, r) for d, r in zip(documents, per_token))
            if reading == "full":
                return {"mode": "full", "reason": "the full read was asked for", "expected_chars": n_chars,
                        "expected_windows": every_window}
            guide = engine.plan_guided(tokenizer, documents, question, settings, reading,
                                       index_cache=self.index_cache)
            plan = guide.plan
            if plan.mode == "full":
                return {"mode": "full", "reason": plan.reason, "expected_chars": n_chars,
                        "expected_windows": every_window}
            spans = guide.expected_spans(documents)
            chars = sum(end - start for _, start, end in spans)
            return {"mode": "guided", "reason": plan.reason, "expected_chars": chars,
                    "expected_windows": max(len(spans), windows_for(chars, min(per_token)))}

    def training_step(self, window_tokens: int) -> tuple[TrainingStepReadout, int]:
        """One forward+backward step of the loaded model, without and then with gradient checkpointing, on the
        first window of the longest bundled sample: the readout and the window's length in tokens. ProfileError
        when the model as its profile loaded it cannot take a training step."""
        with self.lock:
            self._wait_for_asks()
            loaded = self.loaded
            if loaded is None:
                raise ModelLoadError("No model is loaded.")
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
        if loaded is not None and loaded.model_ref == model_ref and self.requested and self.requested[1] == "auto":
            return loaded.profile
        try:
            if resolve_model(model_ref).kind == "hub" and model_ref not in KNOWN_MODELS:
                return None
            return resolve_auto(self._machine(), model_config(model_ref))
        except (LongQAError, KeyError, AttributeError, TypeError):  # a config the planner cannot read
            return None

    def _machine(self) -> Hardware:
        return self.hardware or detect_hardware()

    def readout(self, result: engine.QAResult) -> dict:
        """The full JSON readout of a result (the same fields as `python -m longqa ask --json`)."""
        return result.to_dict(model=self.model_ref, profile=self.profile_name,
                              memory_prediction=self.memory_prediction(result))

    def memory_prediction(self, result: engine.QAResult) -> dict | None:
        """What the memory planner predicts for this request from the model's config, the profile, the window
        length and the batch alone (as it would before loading), beside the peak that was measured: torch's peak
        allocated bytes on the GPU that answered, or the process's peak RSS on CPU. None without a model."""
        loaded = self.loaded
        config = getattr(loaded.model, "config", None) if loaded is not None else None
        if config is None:
            return None
        try:
            plan = plan_profile(config, loaded.profile, loaded.hardware or detect_hardware(),
                                tokens=result.window_tokens or None, batch=max(1, min(result.batch_size,
                                                                                       result.windows)),
                                runtime_bytes=loaded.readout.host_rss_before_bytes)
        except (LongQAError, KeyError, AttributeError, TypeError):  # a config the planner cannot read
            return None
        measured = measured_peak(result.memory, plan.device)
        return {"device": plan.device, "predicted_peak_bytes": plan.peak_bytes, "measured_peak_bytes": measured,
                "error_pct": error_pct(plan.peak_bytes, measured),
                "measured_as": "peak RSS" if plan.device == "cpu" else "torch peak allocated"}


def with_overrides(settings: engine.EngineSettings, overrides: dict) -> engine.EngineSettings:
    """A request's engine settings: the loaded model's, with each override that was given (not None)."""
    return replace(settings, **{k: v for k, v in overrides.items() if v is not None})


def _renew_lock(session_ref) -> None:
    session = session_ref()
    if session is not None:
        session.lock = threading.RLock()
        session._asks_done = threading.Condition(session.lock)
        session._asks_in_progress = 0
        session._preview_lock = threading.Lock()


def measured_peak(memory: dict, device: str) -> int | None:
    """The request's measured peak on `device` ("cpu" or "cuda:N"), the quantity the planner predicts."""
    if device == "cpu":
        return memory.get("host_peak_rss_bytes")
    index = int(device.split(":")[1])
    return next((d["peak_allocated_bytes"] for d in memory.get("devices", []) if d.get("index") == index), None)
