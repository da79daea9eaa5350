"""Memory-mapped loading: make sure weights come from a mapped safetensors file (a `.bin` checkpoint is converted
once into the local cache with `weights_only`), since transformers 5 maps safetensors and ignores low_cpu_mem_usage.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from longqa_core.cache import cache_dir
from strategies.base import PLACEMENT, Strategy

BIN_NAMES = ("pytorch_model.bin", "pytorch_model.bin.index.json")


class MmapLoading(Strategy):
    """Load weights by memory-mapping safetensors; convert a pickled `.bin` checkpoint once.

    Saves: host RAM while loading: a mapped file is paged in as tensors are placed, instead of a full pickled
        copy plus the model (about 2x the weights with a `.bin` checkpoint); later loads start faster from cache.
    Costs: one conversion per `.bin` checkpoint (time, and disk space for the safetensors copy).
    Requires: disk space in the cache folder (LONGQA_CACHE, default ~/.cache/longqa) for converted checkpoints.
    """

    name = "mmap_loading"
    description = "Load memory-mapped safetensors (a .bin checkpoint is converted once into the local cache)."
    phase = PLACEMENT

    def __init__(self, hardware=None, device: str = "cpu", *, cache_folder: str | None = None):
        super().__init__(hardware, device)
        self.cache_folder = Path(cache_folder) if cache_folder else cache_dir() / "converted"

    def prepare_checkpoint(self, folder: Path) -> Path:
        folder = Path(folder)
        if has_safetensors(folder) or not has_bin(folder):
            return folder
        return convert_to_safetensors(folder, self.cache_folder)

    def adjust_load_kwargs(self, kwargs: dict) -> dict:
        return {**kwargs, "use_safetensors": True}


def has_safetensors(folder: Path) -> bool:
    return any(Path(folder).glob("*.safetensors"))


def has_bin(folder: Path) -> bool:
    return any((Path(folder) / name).exists() for name in BIN_NAMES)


def _bin_files(folder: Path) -> list[Path]:
    index = folder / "pytorch_model.bin.index.json"
    if index.exists():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [folder / shard for shard in shards]
    return [folder / "pytorch_model.bin"]


def converted_folder(folder: Path, cache_folder: Path) -> Path:
    """Where `folder`'s conversion lives: named after the checkpoint, keyed by the `.bin` files' size and date."""
    stamp = hashlib.sha256()
    for path in _bin_files(folder):
        stat = path.stat()
        stamp.update(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    name = "--".join(part for part in folder.resolve().parts[-3:] if part not in ("/", "snapshots"))
    return cache_folder / f"{name}-{stamp.hexdigest()[:12]}"


def convert_to_safetensors(folder: Path, cache_folder: Path) -> Path:
    """Convert `folder`'s pickled weights to one `model.safetensors` in the cache (once); returns that folder."""
    target = converted_folder(Path(folder), Path(cache_folder))
    weights = target / "model.safetensors"
    if weights.exists():
        return target
    target.mkdir(parents=True, exist_ok=True)
    state: dict[str, torch.Tensor] = {}
    for path in _bin_files(Path(folder)):
        # weights_only refuses anything but tensors and plain containers: no code in the pickle can run
        state.update(torch.load(path, map_location="cpu", weights_only=True, mmap=True))
    seen: set[int] = set()
    tensors = {}
    for key, tensor in state.items():
        tensor = tensor.contiguous()
        pointer = tensor.untyped_storage().data_ptr()
        # safetensors refuses tensors sharing memory (tied weights): store each shared one as its own copy
        tensors[key] = tensor.clone() if pointer in seen else tensor
        seen.add(pointer)
    partial = target / "model.safetensors.partial"
    save_file(tensors, str(partial), metadata={"format": "pt"})
    os.replace(partial, weights)
    if (Path(folder) / "config.json").exists():
        shutil.copyfile(Path(folder) / "config.json", target / "config.json")
    return target
