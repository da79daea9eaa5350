"""The loader: (model reference, profile) -> a ready `LoadedModel`; the only caller of `from_pretrained`.
Fetches, validates (Longformer QA only, no remote code), applies strategies, reports costs; never answers questions.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import torch
from huggingface_hub import snapshot_download
from huggingface_hub.errors import LocalEntryNotFoundError
from transformers import AutoConfig, AutoTokenizer, LongformerForQuestionAnswering
from transformers.utils import logging as hf_logging

from longqa import models
from longqa.backend import Selection
from longqa.models import ModelSource, architecture_config, resolve_model
from longqa.readout import LoadReadout
from longqa_core.cache import cache_dir
from longqa_core.batching import BatchState, ModelRunner, release_memory
from longqa_core.limits import PASSAGE_WINDOW_TOKENS, EngineSettings
from longqa_core.errors import ModelLoadError
from longqa_core.telemetry import HostPeak, keep_large_buffers, timed
from strategies.auto import resolve_profile
from strategies.base import from_pretrained_kwargs, runtime_contexts
from strategies.device_map import device_name, mapped_device
from strategies.hardware import Hardware, detect_hardware
from strategies.mmap_loading import has_bin, has_safetensors
from strategies.profiles import Profile, build_strategies, device_for, select_strategies

Progress = Callable[[float, str], None]
QA_ARCHITECTURE = "LongformerForQuestionAnswering"
HUB_PATTERNS = ["*.json", "*.txt", "*.model", "*.safetensors"]  # config, tokenizer files, safe weights
HUB_BIN_PATTERNS = ["pytorch_model*.bin*"]  # only when a repository has no safetensors
LOAD_STEPS = {"download": (0.0, 0.3), "load": (0.3, 0.8), "strategies": (0.8, 1.0)}  # share of the progress bar
# Loggers whose warnings are about a library's own supply, not about this machine or this load: importing
# bitsandbytes (the strategies probe it) on a CPU with AVX-512 BF16 asks the Hub for an optional 4-bit kernel and,
# offline or without it, warns "Failed to load CPU gemm_4bit_forward … pip install kernels" and uses its own kernel;
# `kernels` warns that it skipped a trust check offline. Errors still show.
QUIET_LOGGERS = ("bitsandbytes", "kernels")


def quiet_library_loggers() -> None:
    """QUIET_LOGGERS at ERROR: set when this module is imported, before any strategy imports bitsandbytes (a page,
    the command line and a Ray replica all import the loader first)."""
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


quiet_library_loggers()


@dataclass
class LoadedModel:
    model: torch.nn.Module | None
    tokenizer: object
    profile: Profile
    model_ref: str
    source: ModelSource
    settings: EngineSettings
    batch_state: BatchState
    runner: Callable | None
    readout: LoadReadout
    hardware: Hardware | None = None  # what the profile was resolved for (the memory planner predicts for it)
    # Set by the session that loaded it: what was asked for (the model, the profile's name, custom strategies) and
    # which load of that session this is. With the fields above, the one record of what is loaded.
    selection: Selection | None = None
    generation: int = 0

    def unload(self) -> None:
        """Drop every reference this object holds to the model, collect, hand the freed heap back to the system
        (`release_memory`: the next model's baseline then starts from what is in use), and return cached CUDA
        memory."""
        self.runner = None
        self.model = None
        release_memory()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


class _FetchError(Exception):
    """A Hub model could not be fetched (offline, unknown id, network): the only case that may fall back."""


def load_model(model_ref: str, profile: Profile | str, *, hardware: Hardware | None = None,
               on_progress: Progress | None = None, fallback_to_demo: bool = False) -> LoadedModel:
    """Load `model_ref` ("demo", a Hub id, a local folder, "arch:base"/"arch:large") with `profile`.

    Raises ProfileError when a strategy cannot run here (before anything is loaded) and ModelLoadError when the
    model cannot be fetched or is not a Longformer QA checkpoint. With `fallback_to_demo`, a Hub model that
    cannot be fetched is replaced by the bundled demo model and the readout says why.
    """
    began = time.perf_counter()
    hardware = hardware or detect_hardware()
    requested = resolve_profile(profile, hardware)  # `auto` for now by the GPU's size: checked before fetching
    build_strategies(requested, hardware)
    progress = on_progress or (lambda fraction, message: None)
    source = resolve_model(model_ref)
    fallback_reason = None
    step_time_s: dict[str, float] = {}
    try:
        with timed(step_time_s, "download"):
            folder, tokenizer_folder = _fetch(source, progress)
    except _FetchError as exc:
        if not fallback_to_demo:
            raise ModelLoadError(str(exc)) from None
        fallback_reason = f"{exc} Using the bundled demo model instead."
        source = resolve_model("demo")
        with timed(step_time_s, "download"):
            folder, tokenizer_folder = _fetch(source, progress)

    config = _read_config(folder, source.ref)
    if getattr(profile, "name", profile) == "auto":  # now that the config is known: the fastest that fits
        requested = resolve_profile("auto", hardware, config)
    profile = requested
    strategies = build_strategies(profile, hardware)
    names = list(select_strategies(profile, hardware))
    tokenizer = _read_tokenizer(tokenizer_folder, source.ref)
    device = device_for(profile, hardware)
    if device == "cpu":
        keep_large_buffers()  # the forward's 16-64 MiB tensors reuse freed heap, not fresh pages (process-wide)
    with timed(step_time_s, "load"):
        _report(progress, "load", 0.0, f"Loading {source.ref} ({profile.name})")
        for strategy in strategies:
            folder = strategy.prepare_checkpoint(folder)
        kwargs = from_pretrained_kwargs(config, strategies, device, use_safetensors=has_safetensors(folder))
        with HostPeak() as host:
            model = _from_pretrained(folder, kwargs, source.ref, profile.name)
        _report(progress, "load", 1.0, f"Loaded {source.ref}")

    with timed(step_time_s, "strategies"):
        for index, strategy in enumerate(strategies):
            _report(progress, "strategies", index / max(len(strategies), 1), f"Applying {strategy.name}")
            model = strategy.transform(model)
        model.eval()
        context_factory = runtime_contexts(tuple(strategies))
        runner = next((r for r in (s.make_runner(model, context_factory) for s in strategies) if r is not None),
                      None) or ModelRunner(model, context_factory)
        settings = replace(engine_settings(profile, strategies), no_answer=source.no_answer_rule)
        # transformers' loading leaves reference cycles that keep the memory-mapped checkpoint alive: without a
        # collection here int8 quantization's model kept the fp32 file pages it no longer reads resident
        gc.collect()
        _report(progress, "strategies", 1.0, "Ready")

    models = getattr(runner, "models", None) or [model]
    readout = LoadReadout(
        load_time_s=time.perf_counter() - began, weight_bytes_per_device=weight_bytes_per_device(models),
        device_map=_plain_device_map(getattr(model, "hf_device_map", None)),
        host_peak_rss_bytes=host.peak_rss_bytes, fallback_reason=fallback_reason, strategies=names,
        dtype=weight_dtype_name(model), host_rss_before_bytes=host.baseline_rss_bytes, step_time_s=step_time_s,
        profile=profile.name, model_ref=source.ref,
        notes=[note for strategy in strategies for note in strategy.load_notes()])
    window_tokens = settings.resolved(tokenizer).max_seq_len  # a whole window's tokens: what a window's seconds are
    return LoadedModel(model=model, tokenizer=tokenizer, profile=profile, model_ref=source.ref, source=source,
                       settings=settings, batch_state=BatchState(size=settings.batch_size, window_tokens=window_tokens),
                       runner=runner, readout=readout, hardware=hardware)


def _report(progress: Progress, step: str, within: float, message: str) -> None:
    low, high = LOAD_STEPS[step]
    progress(low + (high - low) * within, message)


@contextlib.contextmanager
def training_context(loaded: LoadedModel):
    """Every strategy's context around a training step on `loaded`'s model: an inference-only transform (prepacked
    Linear layers) is undone for the step and redone after."""
    with contextlib.ExitStack() as stack:
        for strategy in build_strategies(loaded.profile, loaded.hardware or detect_hardware()):
            stack.enter_context(strategy.training_context(loaded.model))
        yield loaded.model


def engine_settings(profile: Profile, strategies) -> EngineSettings:
    settings = EngineSettings(max_seq_len=profile.max_seq_len, doc_stride=profile.doc_stride,
                              batch_size=profile.batch_size, passage_window_tokens=PASSAGE_WINDOW_TOKENS)
    for strategy in strategies:
        settings = strategy.adjust_settings(settings)
    return settings


# ---------------------------------------------------------------------------------------------- fetching
def _fetch(source: ModelSource, progress: Progress) -> tuple[Path, Path]:
    """(weights folder, tokenizer folder) on local disk for `source`."""
    _report(progress, "download", 0.0, f"Fetching {source.ref}")
    if source.kind == "architecture":
        folder = materialize_architecture(source.ref)
        tokenizer_folder = Path(models.DEMO_MODEL_DIR)  # random weights: any tokenizer with ids below 50,265 will do
        if not (tokenizer_folder / "tokenizer.json").exists():
            raise ModelLoadError("The demo tokenizer (used for arch: models) is missing from longqa/demo_model.")
    elif source.kind == "hub":
        folder = tokenizer_folder = download(source.location)
    else:
        folder = tokenizer_folder = Path(source.location)
        if source.kind == "demo" and not (has_safetensors(folder) or has_bin(folder)):
            raise ModelLoadError("The bundled demo model has no weights yet (scripts/train_demo_model.py builds "
                                 "it into longqa/demo_model).")
    _report(progress, "download", 1.0, f"Fetched {source.ref}")
    return folder, tokenizer_folder


def download(repo_id: str) -> Path:
    """A local snapshot of a Hub repository: config, tokenizer, and safetensors (else `.bin`) weights."""
    try:
        folder = Path(snapshot_download(repo_id, allow_patterns=HUB_PATTERNS))
        if not has_safetensors(folder):
            folder = Path(snapshot_download(repo_id, allow_patterns=HUB_PATTERNS + HUB_BIN_PATTERNS))
    except (OSError, ValueError) as exc:  # offline, unknown repository, gated, network: all OSError subclasses
        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
        if offline and isinstance(exc, LocalEntryNotFoundError):  # the library's own message only repeats this
            raise _FetchError(f"Could not fetch {repo_id!r} from the Hugging Face Hub: it is not in the local cache "
                              "and downloads are off (HF_HUB_OFFLINE is set).") from None
        raise _FetchError(f"Could not fetch {repo_id!r} from the Hugging Face Hub: not all of it is in the local "
                          "cache, and the Hub could not be reached or does not serve it. Details: "
                          f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
    if not (has_safetensors(folder) or has_bin(folder)):
        raise _FetchError(f"{repo_id!r} has no PyTorch weights (model.safetensors or pytorch_model.bin).")
    return folder


def materialize_architecture(name: str) -> Path:
    """A cached checkpoint of random weights (seed 0) for `arch:base`/`arch:large`, so every strategy's load path
    (dtype, quantization, device maps, mmap) applies to benchmarks exactly as to real checkpoints."""
    folder = cache_dir() / "architectures" / name.replace(":", "-")
    if (folder / "model.safetensors").exists() and (folder / "config.json").exists():
        return folder
    config = architecture_config(name)
    config.architectures = [QA_ARCHITECTURE]
    torch.manual_seed(0)
    model = LongformerForQuestionAnswering(config)
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    shutil.rmtree(folder, ignore_errors=True)  # an incomplete earlier attempt
    partial.replace(folder)
    return folder


# ---------------------------------------------------------------------------------------------- validation
def _read_config(folder: Path, ref: str):
    try:
        config = AutoConfig.from_pretrained(folder, trust_remote_code=False)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelLoadError(f"{ref!r} has no readable config.json: {exc}") from None
    check_qa_config(config, ref)
    return config


def check_qa_config(config, ref: str) -> None:
    """ModelLoadError unless `config` describes a Longformer question-answering model."""
    model_type = getattr(config, "model_type", None)
    if model_type != "longformer":
        raise ModelLoadError(f"{ref!r} is a {model_type or 'unknown'} model; this demo needs a Longformer "
                             "question-answering checkpoint.")
    architectures = getattr(config, "architectures", None) or []
    if architectures and QA_ARCHITECTURE not in architectures:
        raise ModelLoadError(f"{ref!r} is not a question-answering checkpoint (its architecture is "
                             f"{', '.join(architectures)}, not {QA_ARCHITECTURE}).")


def _read_tokenizer(folder: Path, ref: str):
    try:
        return AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelLoadError(f"{ref!r} has no usable tokenizer: {exc}") from None


@contextlib.contextmanager
def no_progress_bar():
    """transformers' own progress bar ("Loading weights 0/73") off for the block: a load reports its progress
    through `on_progress` (the page's bar), and a console gets our one line per fact."""
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def _from_pretrained(folder: Path, kwargs: dict, ref: str, profile_name: str):
    try:
        with no_progress_bar():
            model, info = LongformerForQuestionAnswering.from_pretrained(folder, output_loading_info=True, **kwargs)
    except (OSError, ValueError, RuntimeError, ImportError, KeyError, TypeError) as exc:
        raise ModelLoadError(f"Could not load {ref!r} with profile {profile_name!r}: "
                             f"{type(exc).__name__}: {exc}") from None
    missing_head = [key for key in info.get("missing_keys", ()) if key.startswith("qa_outputs")]
    if missing_head:
        raise ModelLoadError(f"{ref!r} has no trained question-answering head ({', '.join(missing_head)} missing).")
    return model


# ---------------------------------------------------------------------------------------------- readouts
def _plain_device_map(device_map) -> dict | None:
    return {name: device_name(device) for name, device in device_map.items()} if device_map else None


def _quantized_linears(model):
    """torch.ao dynamic-quantized Linear modules keep their weights packed, outside `parameters()`."""
    for name, module in model.named_modules():
        if hasattr(module, "_packed_params") and callable(getattr(module, "weight", None)):
            yield name, module


def weight_bytes_per_device(models) -> dict[str, int]:
    """Bytes of parameters and buffers per device over `models` (replicas count once per copy)."""
    totals: dict[str, int] = {}
    for model in models:
        device_map = getattr(model, "hf_device_map", None)
        seen: set[int] = set()
        tensors = list(model.named_parameters(remove_duplicate=True)) + list(model.named_buffers())
        for name, tensor in tensors:
            if id(tensor) in seen:
                continue
            seen.add(id(tensor))
            device = str(tensor.device)
            if tensor.device.type == "meta":  # offloaded by accelerate: the map says to CPU RAM or disk
                device = mapped_device(name, device_map) or "meta"
            totals[device_name(device)] = totals.get(device_name(device), 0) + tensor.numel() * tensor.element_size()
        for _, module in _quantized_linears(model):
            weight = module.weight()
            totals["cpu"] = totals.get("cpu", 0) + weight.numel() * weight.element_size()
            bias = module.bias()
            if bias is not None:
                totals["cpu"] = totals.get("cpu", 0) + bias.numel() * bias.element_size()
    return totals


def weight_dtype_name(model) -> str:
    """The float dtype holding most weight bytes, plus how Linear layers are quantized if they are:
    "bfloat16", "float32", "float32 + int8 Linear (dynamic)", "float16 + nf4 Linear (bitsandbytes)"."""
    by_dtype: dict[str, int] = {}
    for tensor in model.parameters():
        if tensor.is_floating_point():
            key = str(tensor.dtype).removeprefix("torch.")
            by_dtype[key] = by_dtype.get(key, 0) + tensor.numel() * tensor.element_size()
    name = max(by_dtype, key=by_dtype.get) if by_dtype else "unknown"
    kinds = {type(module).__name__ for module in model.modules()}
    if "Linear4bit" in kinds:
        return f"{name} + nf4 Linear (bitsandbytes)"
    if "Linear8bitLt" in kinds:
        return f"{name} + int8 Linear (bitsandbytes)"
    if any(True for _ in _quantized_linears(model)):
        return f"{name} + int8 Linear (dynamic)"
    return name
