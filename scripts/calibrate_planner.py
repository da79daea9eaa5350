"""Fit the memory planner's coefficients to measurements and write `strategies/planner_calibration.json`.

Usage: python scripts/calibrate_planner.py --bench DIR [DIR ...] [--out strategies/planner_calibration.json] [--quick]

Three fits, each printed with its worst error:
1. Activations: the live-tensor peak (`LiveTensorPeak`) of one forward pass of small Longformer architectures
   (hidden 64 to 768, windows 64 to 512, two layers: the peak is one layer's) in fp32 and bf16, at several
   lengths and batches, eager and fast attention (the band on SDPA, and on the band kernels where this CPU runs
   both); non-negative least squares on the relative error over the
   planner's features (`memory_planner.FEATURE_NAMES`).
2. Training step: the bytes a forward + backward allocates (`training_step_readout`, fp32, with and without
   checkpointing) on small architectures of 2 to 4 layers; one factor each for the activations kept per layer
   without checkpointing and for the recomputed layer with it.
3. CPU resident memory (from the --bench folders): peak RSS minus (process before loading + weights) against the fitted
   activation bytes, per precision and attention (`fp32-eager`, `bf16-fast`, ...): a factor and a constant
   (the allocator's and the kernels' memory outside live tensors). Give bench folders measured at lengths and
   batches other than the ones the planner is checked against, so that check stays a held-out test.

Measurements run on this machine's CPU; GPU peaks (torch's allocator) are not part of any fit.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from scipy.optimize import nnls
from transformers import LongformerConfig, LongformerForQuestionAnswering

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from longqa.bench.report import inference_plan, recorded_hardware  # noqa: E402
from strategies import memory_planner as planner  # noqa: E402
from strategies import band_kernel  # noqa: E402
from strategies.fast_attention import SlidingWindowSelfAttention, swap_attention  # noqa: E402
from strategies.gradient_checkpointing import LiveTensorPeak, training_step_readout  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "strategies" / "planner_calibration.json"
QUESTION_TOKENS = 12  # global tokens at the start, as a question gives

# (hidden, heads, ffn, window): from a toy to Longformer-base's sizes; one with ffn 2x hidden (not 4x), so the
# hidden-sized and feed-forward-sized buffers can be told apart
ARCHITECTURES = [(64, 2, 256, 64), (128, 4, 512, 128), (256, 4, 1024, 256), (384, 6, 768, 256),
                 (768, 12, 3072, 512)]
# (window multiples of length, batch); one length that is not a multiple of the window
SHAPES = [(2, 1), (4, 1), (2, 2), (3.5, 1), (8, 1)]
TRAINING_ARCHITECTURES = [(128, 4, 512, 128, 2), (256, 4, 1024, 256, 3), (384, 6, 1536, 256, 4), (768, 12, 3072, 512, 2)]
TRAINING_SHAPES = [(2, 1), (4, 1), (2, 2), (8, 1)]


def config_for(hidden: int, heads: int, ffn: int, window: int, layers: int = 2) -> LongformerConfig:
    return LongformerConfig(vocab_size=500, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                            intermediate_size=ffn, attention_window=window, max_position_embeddings=4098,
                            pad_token_id=1, bos_token_id=0, eos_token_id=2, sep_token_id=2, type_vocab_size=1)


def inputs(tokens: int, batch: int) -> dict:
    ids = torch.randint(5, 500, (batch, tokens))
    global_mask = torch.zeros(batch, tokens, dtype=torch.long)
    global_mask[:, :QUESTION_TOKENS] = 1
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "global_attention_mask": global_mask}


def build(config, dtype, attention: str, train: bool = False):
    """A model with `attention`: "eager", "fast" (the band on SDPA) or "fast-kernel" (the band kernel)."""
    torch.manual_seed(0)
    model = LongformerForQuestionAnswering(config).to(dtype)
    model.train(train)
    if attention == "eager":
        return model
    swap_attention(model)
    if attention == "fast-kernel" and band_kernel.kernel(dtype) is None:
        raise ValueError(f"no band kernel runs here for {dtype}: {band_kernel.status(dtype)}")
    for module in model.modules():
        if isinstance(module, SlidingWindowSelfAttention):
            module.use_band_kernel = attention == "fast-kernel"
    return model


def relative_fit(features: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Non-negative coefficients minimising the sum of squared relative errors."""
    coefficients, _ = nnls(features / targets[:, None], np.ones(len(targets)))
    return coefficients


def worst_error_pct(predicted: np.ndarray, measured: np.ndarray) -> float:
    return float(np.max(np.abs(predicted - measured) / measured) * 100)


def fit_activations(quick: bool) -> dict:
    architectures = ARCHITECTURES[:3] if quick else ARCHITECTURES
    result = {}
    kinds = {"eager": (torch.float32, torch.bfloat16), "fast": (torch.float32, torch.bfloat16)}
    if all(band_kernel.kernel(dtype) is not None for dtype in (torch.float32, torch.bfloat16)):
        kinds["fast-kernel"] = (torch.float32, torch.bfloat16)
    elif "fast-kernel" in planner.CALIBRATION["activations"]:
        result["fast-kernel"] = planner.CALIBRATION["activations"]["fast-kernel"]
        print(f"activations fast-kernel: not fitted here ({band_kernel.status(torch.float32)}; "
              f"{band_kernel.status(torch.bfloat16)}); kept from the last fit", flush=True)
    for attention, dtypes in kinds.items():
        rows, peaks = [], []
        for hidden, heads, ffn, window in architectures:
            config = config_for(hidden, heads, ffn, window)
            shape = planner.ModelShape.from_config(config)
            for dtype in dtypes:
                model = build(config, dtype, attention)
                for multiple, batch in SHAPES:
                    tokens = int(multiple * window)
                    tracker = LiveTensorPeak()
                    with torch.inference_mode(), tracker:
                        model(**inputs(tokens, batch))
                    rows.append(planner.activation_features(shape, tokens=tokens, batch=batch,
                                                            compute_bytes=dtype.itemsize))
                    peaks.append(tracker.peak_bytes)
            print(f"  activations {attention}: hidden {hidden} measured", flush=True)
        features, measured = np.array(rows, dtype=float), np.array(peaks, dtype=float)
        coefficients = relative_fit(features, measured)
        result[attention] = {"coefficients": [round(float(c), 4) for c in coefficients], "samples": len(peaks),
                             "max_abs_error_pct": round(worst_error_pct(features @ coefficients, measured), 1)}
        print(f"activations {attention}: {result[attention]}", flush=True)
    return result


def fit_training(quick: bool) -> dict:
    saved_x, saved_y, recompute_x, recompute_y, saved_fixed, recompute_fixed = [], [], [], [], [], []
    architectures = TRAINING_ARCHITECTURES[:2] if quick else TRAINING_ARCHITECTURES
    for hidden, heads, ffn, window, layers in architectures:
        config = config_for(hidden, heads, ffn, window, layers)
        shape = planner.ModelShape.from_config(config)
        model = build(config, torch.float32, "eager", train=True)
        gradients = planner.parameter_count(shape) * 4
        for multiple, batch in TRAINING_SHAPES:
            tokens = int(multiple * window)
            readout = training_step_readout(model, inputs(tokens, batch), warmup=False)
            layer_peak, mask = planner.layer_and_mask_bytes(shape, tokens=tokens, batch=batch, compute_bytes=4)
            kept_inputs = planner.checkpoint_inputs_bytes(shape, tokens=tokens, batch=batch)
            saved_x.append(shape.layers * layer_peak)
            saved_y.append(readout.peak_bytes_without - gradients - mask)
            saved_fixed.append(gradients + mask)
            recompute_x.append(layer_peak)
            recompute_y.append(readout.peak_bytes_with - gradients - mask - kept_inputs)
            recompute_fixed.append(gradients + mask + kept_inputs)
        print(f"  training: hidden {hidden}, {layers} layers measured", flush=True)
    result = {}
    for name, x, y, fixed in (("saved_per_layer", saved_x, saved_y, saved_fixed),
                              ("recompute", recompute_x, recompute_y, recompute_fixed)):
        x, y, fixed = np.array(x), np.array(y), np.array(fixed, dtype=float)
        factor = float(relative_fit(x[:, None], y)[0])
        result[name] = {"factor": round(factor, 4), "samples": len(y),
                        "max_abs_error_pct": round(worst_error_pct(factor * x, y), 1),  # of this term alone
                        "step_max_abs_error_pct": round(worst_error_pct(fixed + factor * x, fixed + y), 1)}
    print(f"training: {result}", flush=True)
    return result


def fit_cpu_rss(bench_dirs: list[Path]) -> dict:
    """Peak RSS - (runtime + weights) = factor * activations + constant, per group, from bench inference rows."""
    groups: dict[str, list[tuple[float, float, float]]] = {}
    for folder in bench_dirs:
        results = json.loads((folder / "results.json").read_text())
        hardware = recorded_hardware(results.get("machine"))  # the rows' machine, not the one fitting them
        for row in results["rows"]:
            if row.get("kind") != "inference" or row.get("error") or row.get("devices") != ["cpu"]:
                continue
            plan = inference_plan(row, hardware)
            base = plan.runtime_bytes + plan.predicted_weight_bytes
            groups.setdefault(planner.cpu_group(plan.precision, plan.attention), []).append(
                (plan.activation_bytes, row["peak_bytes"] - base, row["peak_bytes"]))
    groups["default"] = [sample for samples in groups.values() for sample in samples]  # for other CPU stacks
    result = {}
    for group, samples in sorted(groups.items()):
        activations, extra, peaks = (np.array(column, dtype=float) for column in zip(*samples))
        design = np.stack([activations, np.ones_like(activations)], axis=1) / peaks[:, None]
        (factor, constant), *_ = np.linalg.lstsq(design, extra / peaks, rcond=None)
        predicted = peaks - extra + factor * activations + constant
        result[group] = {"activation_factor": round(float(factor), 4), "constant_bytes": int(constant),
                         "samples": len(samples), "max_abs_error_pct": round(worst_error_pct(predicted, peaks), 1)}
        print(f"cpu rss {group}: {result[group]}", flush=True)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", type=Path, nargs="+", required=True,
                        help="bench output folders whose CPU rows calibrate the resident-memory overhead")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--quick", action="store_true", help="the three smallest architectures only (a smoke run)")
    args = parser.parse_args(argv)
    began = time.time()
    torch.set_grad_enabled(True)
    activations = fit_activations(args.quick)
    # the training factors and the CPU overhead sit on top of these activation bytes, not the imported ones
    planner.ACTIVATION_COEFFICIENTS = {name: tuple(fit["coefficients"]) for name, fit in activations.items()}
    training = fit_training(args.quick)
    cpu_rss = fit_cpu_rss(args.bench)
    out = {
        "command": " ".join(["python", "scripts/calibrate_planner.py", *(argv if argv is not None else sys.argv[1:])]),
        "fitted": time.strftime("%Y-%m-%dT%H:%M:%S"), "torch": torch.__version__,
        "feature_names": list(planner.FEATURE_NAMES), "activations": activations, "training": training,
        "cpu_rss": cpu_rss, "cpu_rss_from": [str(d) for d in args.bench],
    }
    partial = args.out.with_suffix(".partial")
    partial.write_text(json.dumps(out, indent=1) + "\n")
    partial.replace(args.out)  # at once: a process importing the planner meanwhile reads the old or the new file
    print(f"wrote {args.out} in {time.time() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
