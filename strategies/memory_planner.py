"""Memory planner: a request's peak memory per device, predicted from a model config, a profile, a window length
and a batch before anything is loaded. Reads configs and profiles; never loads weights, never allocates.

Weights are counted exactly from the architecture (dtype, quantization bits, device map); activations come from a
formula over Longformer's attention and feed-forward buffers with coefficients fitted to measured live-tensor
peaks; the runtime (the process itself, the CUDA context) is measured where it runs, or a stated constant. The
hardware is an argument: this machine's as detected, or one described to plan for (`strategies.gpu_catalog`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from longqa_core.telemetry import current_rss_bytes
from strategies import band_kernel
from strategies.base import from_pretrained_kwargs
from strategies.device_map import mapped_device
from strategies.hardware import Hardware
from strategies.profiles import build_strategies, device_for, select_strategies

FIT_MARGIN = 0.10  # a prediction "fits" a device when it stays under 90 % of the device's memory
CUDA_CONTEXT_BYTES = 600 * 10**6  # CUDA context + cuBLAS workspace outside torch's allocator (not yet measured
#                                   on our GPUs; torch 2.x typically shows 0.4-0.6 GB in NVML before any tensor)
CUDA_ALLOCATOR_SLACK = 0.10  # reserved over allocated in torch's caching allocator, for the "fits" decision
# A fresh process's memory before it loads a model (python, torch, transformers and this package imported), for a
# CPU plan of another machine: the bench workers' `runtime_rss_bytes` in docs/results/bench-cpu-calibration (0.433 GB,
# 16 rows within 1.3 MB; AMD EPYC with avx512_bf16, kind A). The page's own process also holds gradio.
CPU_PROCESS_BYTES = 433 * 10**6
DTYPE_BYTES = {torch.float32: 4, torch.float16: 2, torch.bfloat16: 2}

# Activation peak of one forward pass, bytes = sum(coefficient * feature), features per padded window of L tokens
# and B windows (w: the attention window, H heads, D hidden, F feed-forward, s: bytes of the compute dtype):
#   B·L·H·(w+1)·4   attention-score buffers eager Longformer keeps in fp32 (its softmax runs in fp32)
#   B·L·H·(w+1)·s   attention-score buffers in the compute dtype (chunked scores, padded/diagonalized copies)
#   B·L·D·s         hidden-state sized buffers (q, k, v, residuals, layer outputs)
#   B·L·F·s         feed-forward buffers
#   B·L²·s          the (B, 1, L, L) extended attention mask transformers 5 builds once per forward (eager only:
#                   the fast attention has it build the one row Longformer keeps)
#   B·L²            its boolean intermediates
#   [B>1]·B·L·H·(w+1)·s   copies eager makes only for batched inputs (a transposed view stops being contiguous)
# The coefficients, the training factors and the CPU resident-memory overhead are fitted by
# `python scripts/calibrate_planner.py` and read from planner_calibration.json next to this module (the fits'
# worst errors are recorded there).
FEATURE_NAMES = ("scores_fp32", "scores", "hidden", "ffn", "mask", "mask_bool", "batched_copies")
CALIBRATION_PATH = Path(__file__).with_name("planner_calibration.json")


def load_calibration(path: Path = CALIBRATION_PATH) -> dict:
    calibration = json.loads(path.read_text())
    if tuple(calibration["feature_names"]) != FEATURE_NAMES:
        raise ValueError(f"{path} was fitted for other features; rerun scripts/calibrate_planner.py")
    return calibration


CALIBRATION = load_calibration()
ACTIVATION_COEFFICIENTS = {attention: tuple(fit["coefficients"])
                           for attention, fit in CALIBRATION["activations"].items()}
# Training step (forward + backward of the QA loss) in fp32: without checkpointing each layer keeps
# TRAIN_SAVED_PER_LAYER x its inference activation peak (less the mask, built once) for backward; with
# checkpointing only each layer's input (B·L·D·4) is kept, plus TRAIN_RECOMPUTE x one layer's peak while a layer
# is recomputed.
TRAIN_SAVED_PER_LAYER = CALIBRATION["training"]["saved_per_layer"]["factor"]
TRAIN_RECOMPUTE = CALIBRATION["training"]["recompute"]["factor"]
# CPU peak RSS beyond live tensors (allocator caching, kernels' scratch memory), per "precision-attention"
CPU_RSS_OVERHEAD = CALIBRATION.get("cpu_rss", {})


def attention_kind(names, precision: "Precision", device: str, hardware: Hardware) -> str:
    """Which attention's activation formula applies: "eager", "fast" (the fast attention on SDPA), or
    "fast-kernel" (its band on a band kernel: on CPU with fp32 activations, as fp32 and int8 dynamic run them, or in
    bf16 on the CPU with bf16 instructions `hardware` describes, where the kernel is built or can be)."""
    if "fast_attention" not in names:
        return "eager"
    if device != "cpu":
        return "fast"
    dtype = torch.float32 if precision.compute_bytes == 4 else torch.bfloat16 if precision.kind == "bf16" else None
    on_kernel = dtype is not None and (dtype != torch.bfloat16 or hardware.cpu_bf16) and band_kernel.is_buildable(dtype)
    return "fast-kernel" if on_kernel else "fast"


def cpu_group(precision: str, attention: str) -> str:
    return f"{precision}-{attention}"


def cpu_overhead_bytes(precision: str, attention: str, activations: int) -> int:
    """Resident memory a CPU request needs beyond its live tensors: fitted factor x activations + constant."""
    fit = CPU_RSS_OVERHEAD.get(cpu_group(precision, attention)) or CPU_RSS_OVERHEAD.get("default")
    if not fit:
        return 0
    return int((fit["activation_factor"] - 1) * activations + fit["constant_bytes"])


# ------------------------------------------------------------------------------------------------ architecture
@dataclass(frozen=True)
class ModelShape:
    """The sizes of a Longformer QA model that memory depends on."""

    layers: int
    hidden: int
    heads: int
    ffn: int
    window: int  # the largest attention window (both sides), as in config.attention_window
    vocab: int
    positions: int
    type_vocab: int

    @classmethod
    def from_config(cls, config) -> "ModelShape":
        window = config.attention_window
        window = max(window) if isinstance(window, (list, tuple)) else int(window)
        return cls(layers=config.num_hidden_layers, hidden=config.hidden_size, heads=config.num_attention_heads,
                   ffn=config.intermediate_size, window=window, vocab=config.vocab_size,
                   positions=config.max_position_embeddings, type_vocab=config.type_vocab_size)

    def padded_length(self, tokens: int) -> int:
        """The model pads inputs to a multiple of the attention window."""
        return math.ceil(tokens / self.window) * self.window


def module_parameters(shape: ModelShape) -> dict[str, dict[str, int]]:
    """Parameter counts per top-level module (the device map's units), split into the parts precision acts on:
    {module: {"linear": encoder Linear weight matrices, "other": biases, norms, embeddings, the QA head}}."""
    d, f = shape.hidden, shape.ffn
    embeddings = (shape.vocab + shape.positions + shape.type_vocab) * d + 2 * d  # + LayerNorm
    linear = 7 * d * d + 2 * d * f  # query/key/value (+ their global twins), attention output, FFN in and out
    layer_other = 6 * d + d + f + d + 4 * d  # biases of those, two LayerNorms
    modules = {"longformer.embeddings": {"linear": 0, "other": embeddings}}
    for index in range(shape.layers):
        modules[f"longformer.encoder.layer.{index}"] = {"linear": linear, "other": layer_other}
    modules["qa_outputs"] = {"linear": 0, "other": 2 * d + 2}  # never quantized (2 outputs)
    return modules


def child_parameters(shape: ModelShape, module: str) -> dict[str, dict[str, int]]:
    """Parameter counts of a module's children, as `module_parameters` splits them, for a device map that splits a
    module (accelerate splits a layer that straddles a budget at its children); {} for a module not split here."""
    d, f = shape.hidden, shape.ffn
    leaf = module.rsplit(".", 1)[-1]
    if module == "longformer.embeddings":
        return {"word_embeddings": {"linear": 0, "other": shape.vocab * d},
                "position_embeddings": {"linear": 0, "other": shape.positions * d},
                "token_type_embeddings": {"linear": 0, "other": shape.type_vocab * d},
                "LayerNorm": {"linear": 0, "other": 2 * d}}
    if module.startswith("longformer.encoder.layer.") and leaf.isdigit():
        return {"attention": {"linear": 7 * d * d, "other": 9 * d}, "intermediate": {"linear": d * f, "other": f},
                "output": {"linear": f * d, "other": 3 * d}}
    if leaf == "attention":
        return {"self": {"linear": 6 * d * d, "other": 6 * d}, "output": {"linear": d * d, "other": 3 * d}}
    if leaf == "output":
        inner = d if module.endswith("attention.output") else f
        return {"dense": {"linear": inner * d, "other": d}, "LayerNorm": {"linear": 0, "other": 2 * d}}
    return {}


def parameter_count(shape: ModelShape) -> int:
    return sum(part for parts in module_parameters(shape).values() for part in parts.values())


# ------------------------------------------------------------------------------------------------ precision
@dataclass(frozen=True)
class Precision:
    """Bytes per parameter and per activation element, from the strategies' load keyword arguments."""

    linear_bytes: float  # per encoder Linear weight
    other_bytes: float  # per other parameter
    compute_bytes: int  # per activation element
    kind: str  # "fp32" | "bf16" | "fp16" | "int8" | "nf4": what the readouts call it


def precision_of(kwargs: dict, names: tuple[str, ...]) -> Precision:
    dtype = kwargs.get("dtype", torch.float32)
    load_bytes = DTYPE_BYTES.get(dtype, 4)
    quantization = kwargs.get("quantization_config")
    if getattr(quantization, "load_in_4bit", False):
        compute = getattr(quantization, "bnb_4bit_compute_dtype", None) or dtype
        compute = getattr(torch, compute) if isinstance(compute, str) else compute
        return Precision(0.5 + 4 / 64, load_bytes, DTYPE_BYTES.get(compute, 2), "nf4")  # + one fp32 absmax / 64
    if getattr(quantization, "load_in_8bit", False):
        return Precision(1.0, load_bytes, 2, "int8")  # LLM.int8 computes in fp16
    if "int8_dynamic" in names:
        return Precision(1.0, load_bytes, 4, "int8")  # int8 weights, fp32 activations between the layers
    if "autocast" in names:
        return Precision(load_bytes, load_bytes, 2, "fp32")  # fp32 weights, 16-bit activations
    return Precision(load_bytes, load_bytes, load_bytes, {4: "fp32"}.get(load_bytes, _half_name(dtype)))


def _half_name(dtype) -> str:
    return "bf16" if dtype == torch.bfloat16 else "fp16"


def predicted_weight_bytes_per_device(shape: ModelShape, precision: Precision, device_map: dict | None,
                                      default_device: str) -> dict[str, int]:
    """Weight bytes each device ("cpu", "cuda:0", ..., "disk") will hold under `device_map` (None: all on one),
    counted from the architecture; the loader's readout measures the same on the loaded model."""
    totals: dict[str, int] = {}

    def place(module: str, parts: dict[str, int]) -> None:
        device = mapped_device(module, device_map) if device_map else default_device
        if device is None:  # the map splits this module: place its children
            children = child_parameters(shape, module)
            if not children:
                raise ValueError(f"The device map places no part of {module!r}.")
            for child, child_parts in children.items():
                place(f"{module}.{child}", child_parts)
            return
        size = parts["linear"] * precision.linear_bytes + parts["other"] * precision.other_bytes
        totals[device] = totals.get(device, 0) + int(size)

    for module, parts in module_parameters(shape).items():
        place(module, parts)
    return totals


# ------------------------------------------------------------------------------------------------ activations
def activation_features(shape: ModelShape, *, tokens: int, batch: int, compute_bytes: int) -> tuple[float, ...]:
    length, w, heads = shape.padded_length(tokens), shape.window, shape.heads
    rows = batch * length
    scores = rows * heads * (w + 1)
    return (scores * 4, scores * compute_bytes, rows * shape.hidden * compute_bytes, rows * shape.ffn * compute_bytes,
            rows * length * compute_bytes, rows * length, scores * compute_bytes if batch > 1 else 0)


def activation_bytes(shape: ModelShape, *, tokens: int, batch: int, compute_bytes: int,
                     attention: str = "eager") -> int:
    """Peak bytes of tensors alive during one forward pass over `batch` windows of `tokens` tokens."""
    return int(sum(layer_and_mask_bytes(shape, tokens=tokens, batch=batch, compute_bytes=compute_bytes,
                                        attention=attention)))


MASK_FEATURES = ("mask", "mask_bool")  # built once per forward, not per layer


def layer_and_mask_bytes(shape: ModelShape, *, tokens: int, batch: int, compute_bytes: int,
                         attention: str = "eager") -> tuple[float, float]:
    """The activation peak split into one layer's buffers and the attention mask built once per forward."""
    features = activation_features(shape, tokens=tokens, batch=batch, compute_bytes=compute_bytes)
    layer = mask = 0.0
    for name, coefficient, feature in zip(FEATURE_NAMES, ACTIVATION_COEFFICIENTS[attention], features):
        if name in MASK_FEATURES:
            # The fast attention has transformers build only the mask row it keeps (B·L, not B·L²:
            # fast_attention.first_row_bidirectional_mask); its coefficients were fitted with the full mask.
            mask += coefficient * feature if attention == "eager" else 0.0
        else:
            layer += coefficient * feature
    return layer, mask


def training_step_bytes(shape: ModelShape, *, tokens: int, batch: int, checkpointing: bool,
                        compute_bytes: int = 4) -> int:
    """Bytes a forward + backward step allocates on top of the weights: gradients, the activations kept for
    backward (every layer's without checkpointing; each layer's input and one recomputed layer with it) and the
    attention mask, which is built once."""
    gradients = parameter_count(shape) * compute_bytes
    layer, mask = layer_and_mask_bytes(shape, tokens=tokens, batch=batch, compute_bytes=compute_bytes)
    if not checkpointing:
        return int(gradients + mask + shape.layers * TRAIN_SAVED_PER_LAYER * layer)
    return int(gradients + mask + checkpoint_inputs_bytes(shape, tokens=tokens, batch=batch,
                                                          compute_bytes=compute_bytes) + TRAIN_RECOMPUTE * layer)


def checkpoint_inputs_bytes(shape: ModelShape, *, tokens: int, batch: int, compute_bytes: int = 4) -> int:
    """What checkpointing keeps: each layer's input hidden states."""
    return shape.layers * batch * shape.padded_length(tokens) * shape.hidden * compute_bytes


# ------------------------------------------------------------------------------------------------ plans
@dataclass
class MemoryPlan:
    """Predicted bytes per device for one profile. `peak_bytes` is what the bench measures as a row's peak:
    torch's peak allocated bytes on the first GPU, or the process's peak RSS on CPU."""

    profile: str
    device: str  # "cuda:0" or "cpu": where the model answers
    strategies: tuple[str, ...]
    precision: str
    attention: str
    tokens: int
    batch: int
    predicted_weight_bytes_per_device: dict[str, int]
    activation_bytes: int
    runtime_bytes: int  # CPU: the process before loading; GPU: the CUDA context (outside torch's allocator)
    peak_bytes: int
    overhead_bytes: int = 0  # CPU: resident memory beyond live tensors (see cpu_overhead_bytes)
    device_need_bytes: dict[str, int] = field(default_factory=dict)  # what each device must have free
    # What each device's need is made of, in bytes: {device: {part: bytes}}, parts summing to its need. GPU:
    # weights, activations, offload_stream (an offloaded layer copied in per forward), allocator_slack,
    # cuda_context; CPU: process (before loading), weights, activations, overhead; a host holding offloaded
    # weights: weights.
    device_parts: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def predicted_weight_bytes(self) -> int:
        return sum(self.predicted_weight_bytes_per_device.values())

    def fits(self, hardware: Hardware, margin: float = FIT_MARGIN, host_bytes: int | None = None) -> bool:
        """Whether every device's need stays under (1 - margin) of its memory (the host's when `host_bytes` or
        the hardware's `host_memory_bytes` says it; unchecked otherwise)."""
        return not self.devices_over(hardware, margin, host_bytes)

    def devices_over(self, hardware: Hardware, margin: float = FIT_MARGIN,
                     host_bytes: int | None = None) -> dict[str, tuple[int, int]]:
        """{device: (need, total)} for each device whose need passes (1 - margin) of its memory."""
        totals = device_totals(hardware, host_bytes)
        return {device: (need, totals[device]) for device, need in self.device_need_bytes.items()
                if device in totals and need > (1 - margin) * totals[device]}


def device_totals(hardware: Hardware, host_bytes: int | None = None) -> dict[str, int]:
    """Each device's memory by the planner's device names; "cpu" only where the host's size is known."""
    totals = {f"cuda:{gpu.index}": gpu.total_bytes for gpu in hardware.usable_gpus}
    host_bytes = hardware.host_memory_bytes if host_bytes is None else host_bytes
    if host_bytes is not None:
        totals["cpu"] = host_bytes
    return totals


def windows_needed(document_tokens: int, window_tokens: int, doc_stride: int, question_tokens: int = 20) -> int:
    """How many windows the engine cuts a document of `document_tokens` into."""
    room = window_tokens - question_tokens - 4  # <s> question </s></s> ... </s>
    if document_tokens <= room:
        return 1
    return 1 + math.ceil((document_tokens - room) / max(room - doc_stride, 1))


def plan_profile(config, profile, hardware: Hardware, *, tokens: int | None = None, batch: int | None = None,
                 document_tokens: int | None = None, runtime_bytes: int | None = None) -> MemoryPlan:
    """The predicted memory of answering with `profile` (a concrete one, not `auto`) on `hardware`.

    `tokens`: window length (default: the profile's, else the model's 4,096 limit); `batch`: windows per forward
    (default: the profile's batch size, or fewer when `document_tokens` needs fewer windows); `runtime_bytes`: the
    process's memory before loading (CPU; default: this process's RSS now). ProfileError if it cannot run here.
    """
    shape = ModelShape.from_config(config)
    strategies = build_strategies(profile, hardware)
    names = tuple(select_strategies(profile, hardware))
    device = device_for(profile, hardware)
    kwargs = from_pretrained_kwargs(config, strategies, device)
    precision = precision_of(kwargs, names)
    tokens = tokens or profile.max_seq_len or min(shape.positions - 2, 4096)
    batch = batch or profile.batch_size
    if document_tokens is not None:
        stride = profile.doc_stride if profile.doc_stride is not None else min(tokens // 2, 128)
        batch = min(batch, windows_needed(document_tokens, tokens, stride))
    attention = attention_kind(names, precision, device, hardware)
    main = "cuda:0" if device == "cuda" else "cpu"
    replicas = hardware.gpu_count if "replicas" in names and device == "cuda" else 1
    per_replica_batch = math.ceil(batch / replicas)
    activations = activation_bytes(shape, tokens=tokens, batch=per_replica_batch,
                                   compute_bytes=precision.compute_bytes, attention=attention)
    device_map = kwargs.get("device_map")
    weights = predicted_weight_bytes_per_device(shape, precision, device_map if device_map != {"": 0} else None, main)
    if replicas > 1:
        weights = {f"cuda:{gpu.index}": weights.get(main, 0) for gpu in hardware.usable_gpus}
    if device == "cuda":
        runtime = CUDA_CONTEXT_BYTES
        gpu_devices = [d for d in weights if d.startswith("cuda")] or [main]
        offloaded = any(d in ("cpu", "disk") for d in weights)
        largest_layer = max(weights.values()) // max(shape.layers, 1) if offloaded else 0  # moved in per forward
        parts = {d: gpu_parts(weights.get(d, 0), activations, largest_layer) for d in gpu_devices}
        if "cpu" in weights:
            parts["cpu"] = {"weights": weights["cpu"]}
        peak = weights.get(main, 0) + activations + largest_layer
        overhead = 0
    else:
        runtime = current_rss_bytes() if runtime_bytes is None else runtime_bytes
        overhead = cpu_overhead_bytes(precision.kind, attention, activations)
        parts = {"cpu": {"process": int(runtime), "weights": sum(weights.values()), "activations": activations,
                         "overhead": overhead}}
        peak = runtime + sum(weights.values()) + activations + overhead
    need = {d: sum(device_parts.values()) for d, device_parts in parts.items()}
    return MemoryPlan(profile=profile.name, device=main, strategies=names, precision=precision.kind,
                      attention=attention, tokens=tokens, batch=batch, predicted_weight_bytes_per_device=weights,
                      activation_bytes=activations, runtime_bytes=runtime, peak_bytes=peak, overhead_bytes=overhead,
                      device_need_bytes=need, device_parts=parts)


def gpu_parts(weights: int, activations: int, offload_stream: int) -> dict[str, int]:
    """One GPU's need: its weights, one forward's activations and an offloaded layer in transit, the caching
    allocator's slack over them, and the CUDA context outside the allocator."""
    allocated = weights + activations + offload_stream
    return {"weights": weights, "activations": activations, "offload_stream": offload_stream,
            "allocator_slack": int(allocated * (1 + CUDA_ALLOCATOR_SLACK)) - allocated,
            "cuda_context": CUDA_CONTEXT_BYTES}


def error_pct(predicted: int | None, measured: int | None) -> float | None:
    """Signed prediction error in percent of the measurement."""
    if predicted is None or not measured:
        return None
    return 100.0 * (predicted - measured) / measured
