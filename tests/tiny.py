"""Test helpers for the strategy tests: a tiny Longformer QA checkpoint built offline, and the CUDA gate.

Plain functions, cached so each process builds one checkpoint; conftest.py wraps them as fixtures.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

LICENSES = Path("/usr/share/common-licenses")
SPECIAL_TOKENS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def requires_cuda(test):
    """Marks a test `requires_cuda` and skips it where torch has no CUDA device."""
    skip = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
    return pytest.mark.requires_cuda(skip(test))


def _temporary_folder(prefix: str) -> Path:
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def _corpus() -> list[str]:
    lines = []
    for path in sorted(LICENSES.glob("*")):
        if path.is_file():
            lines.extend(path.read_text(errors="ignore").splitlines())
    return [line for line in lines if line.strip()] or ["the quick brown fox jumps over the lazy dog"]


def build_tokenizer(out: Path, vocab_size: int = 600):
    from tokenizers import ByteLevelBPETokenizer
    from tokenizers.processors import RobertaProcessing
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer(add_prefix_space=True, trim_offsets=True)
    bpe.train_from_iterator(_corpus(), vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIAL_TOKENS)
    bpe.post_processor = RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True, add_prefix_space=True)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>", sep_token="</s>", cls_token="<s>",
        unk_token="<unk>", pad_token="<pad>", mask_token="<mask>", model_max_length=4096)
    tokenizer.save_pretrained(out)
    return tokenizer


def tiny_config(vocab_size: int, hidden: int = 64, layers: int = 2, heads: int = 4, ffn: int = 128, window: int = 64):
    from transformers import LongformerConfig

    return LongformerConfig(
        vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=ffn, attention_window=[window] * layers, max_position_embeddings=4098, pad_token_id=1,
        bos_token_id=0, eos_token_id=2, sep_token_id=2, type_vocab_size=1,
        architectures=["LongformerForQuestionAnswering"])


@functools.lru_cache(maxsize=None)
def tiny_checkpoint(safetensors: bool = True) -> Path:
    """A folder with a random tiny LongformerForQuestionAnswering and its tokenizer, loadable offline."""
    from transformers import LongformerForQuestionAnswering

    out = _temporary_folder("longqa-tiny-")
    tokenizer = build_tokenizer(out)
    torch.manual_seed(0)
    model = LongformerForQuestionAnswering(tiny_config(len(tokenizer))).eval()
    model.save_pretrained(out, safe_serialization=safetensors)
    if not safetensors:
        for extra in out.glob("*.safetensors"):
            extra.unlink()
        torch.save(model.state_dict(), out / "pytorch_model.bin")
    return out


@functools.lru_cache(maxsize=None)
def tiny_encoder_checkpoint() -> Path:
    """A Longformer checkpoint that is NOT a QA model (a bare LongformerModel): the loader must reject it."""
    from transformers import LongformerModel

    out = _temporary_folder("longqa-encoder-")
    tokenizer = build_tokenizer(out)
    config = tiny_config(len(tokenizer))
    config.architectures = ["LongformerModel"]
    LongformerModel(config).save_pretrained(out)
    return out


def qa_batch(tokenizer, question: str = "What is granted?", context: str | None = None, length: int = 128):
    """One encoded window with an explicit global attention mask on the question, like the engine builds."""
    context = context or " ".join(_corpus()[:40])
    enc = tokenizer(question, context, truncation="only_second", max_length=length, padding="max_length",
                    return_tensors="pt")
    first_sep = (enc["input_ids"] == tokenizer.sep_token_id).int().argmax(dim=1)  # (B,)
    positions = torch.arange(enc["input_ids"].shape[1])[None]  # (1, L)
    global_mask = (positions < first_sep[:, None]).long()  # (B, L): `<s>` and the question, as the engine sets it
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"],
            "global_attention_mask": global_mask}


class CountingRunner:
    """A loaded model's runner, counting the batches it is given (to check that a request did, or did not, reach
    the model, and how far)."""

    def __init__(self, runner):
        self.runner, self.devices, self.calls = runner, runner.devices, 0

    def __call__(self, batch):
        self.calls += 1
        return self.runner(batch)
