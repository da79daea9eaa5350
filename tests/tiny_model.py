"""Builds a tiny random Longformer QA model and a byte-level BPE tokenizer in a folder, offline."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import ByteLevelBPETokenizer
from tokenizers.processors import RobertaProcessing
from transformers import LongformerConfig, LongformerForQuestionAnswering, PreTrainedTokenizerFast

from longqa.demo_task import prose_sentences

SPECIAL_TOKENS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def build_tiny_tokenizer(vocab_size: int = 600) -> PreTrainedTokenizerFast:
    bpe = ByteLevelBPETokenizer(add_prefix_space=True, trim_offsets=True)
    bpe.train_from_iterator(list(prose_sentences()), vocab_size=vocab_size, min_frequency=2,
                            special_tokens=SPECIAL_TOKENS, show_progress=False)
    bpe.post_processor = RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True, add_prefix_space=True)
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>", sep_token="</s>", cls_token="<s>",
        unk_token="<unk>", pad_token="<pad>", mask_token="<mask>", model_max_length=4096)


def tiny_config(vocab_size: int, **overrides) -> LongformerConfig:
    values = dict(vocab_size=vocab_size, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=128, attention_window=[64, 64], max_position_embeddings=4098, pad_token_id=1,
                  bos_token_id=0, eos_token_id=2, sep_token_id=2)
    values.update(overrides)
    return LongformerConfig(**values)


def build_tiny_model_dir(folder: Path, seed: int = 0) -> Path:
    tokenizer = build_tiny_tokenizer()
    torch.manual_seed(seed)
    model = LongformerForQuestionAnswering(tiny_config(len(tokenizer))).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return Path(folder)
