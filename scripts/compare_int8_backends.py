"""int8 dynamic quantization on CPU, torch.ao against torchao, forward passes interleaved in one process so that a
shared machine's noise hits every variant alike:

    pip install torchao   # only for this comparison: the project itself does not use it
    python scripts/compare_int8_backends.py --tokens 1024,4096 --rounds 6

Loads arch:base (the real base architecture, random weights) in fp32 once and makes four int8 copies: torch.ao (the
int8_dynamic strategy) and torchao (`quantize_` with int8 dynamic activations and int8 weights on the encoder's
Linear layers, qa_outputs float), each with and without fast attention. Round by round, in an order that rotates,
it times one forward of one window per variant. Prints one JSON line per length: seconds (min, median) per variant
and the per-round ratios torchao / torch.ao. Peak memory and agreement with fp32 need a process per row: the bench
measures those (docs/int8-torchao-vs-torch-ao.md).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from longqa.arguments import positive_int, positive_int_list  # noqa: E402
from longqa.bench.worker import window_batch  # noqa: E402
from longqa.loader import load_model  # noqa: E402
from longqa_core import batching  # noqa: E402
from strategies.fast_attention import swap_attention  # noqa: E402
from strategies.hardware import Hardware  # noqa: E402
from strategies.int8_dynamic import Int8Dynamic  # noqa: E402


def quantize_with_torchao(model: nn.Module) -> nn.Module:
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_  # deferred: optional, only this comparison

    with torch.no_grad():
        quantize_(model.longformer, Int8DynamicActivationInt8WeightConfig(set_inductor_config=False),
                  filter_fn=lambda module, _: isinstance(module, nn.Linear))
    return model


def variants(fp32: nn.Module) -> dict[str, nn.Module]:
    torch_ao = Int8Dynamic(Hardware(cpu_bf16=False), "cpu").transform(copy.deepcopy(fp32))
    torchao = quantize_with_torchao(copy.deepcopy(fp32))
    return {"fp32": fp32, "torch.ao": torch_ao, "torchao": torchao,
            "torch.ao+fast": swap_attention(copy.deepcopy(torch_ao)),
            "torchao+fast": swap_attention(copy.deepcopy(torchao))}


def time_forward(model: nn.Module, batch: dict) -> float:
    began = time.perf_counter()
    batching.ModelRunner(model)(batch)
    return time.perf_counter() - began


def compare(models: dict[str, nn.Module], tokenizer, tokens: int, rounds: int) -> dict:
    batch = window_batch(tokenizer, tokens)  # (1, L) each
    names = list(models)
    for name in names:  # warm-up
        time_forward(models[name], batch)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for index in range(rounds):
        for name in names[index % len(names):] + names[:index % len(names)]:
            seconds[name].append(time_forward(models[name], batch))
    def ratios(a, b):
        return [x / y for x, y in zip(seconds[a], seconds[b])]
    return {
        "tokens": int(batch["input_ids"].shape[1]), "rounds": rounds,
        "seconds": {name: {"min": min(s), "median": statistics.median(s), "runs": s} for name, s in seconds.items()},
        "torchao_over_torch_ao": {"int8": statistics.median(ratios("torchao", "torch.ao")),
                                  "int8+fast": statistics.median(ratios("torchao+fast", "torch.ao+fast"))},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=positive_int_list, default=[1024, 4096])
    parser.add_argument("--rounds", type=positive_int, default=6)
    args = parser.parse_args(argv)
    loaded = load_model("arch:base", "baseline-fp32", hardware=Hardware(cpu_bf16=False))
    models = variants(loaded.model)
    for tokens in args.tokens:
        print(json.dumps(compare(models, loaded.tokenizer, tokens, args.rounds)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
