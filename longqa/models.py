"""The registry of known checkpoints and how a model reference resolves to something loadable.

Says where a model comes from (Hub id, local folder, the bundled demo, or a random-weight architecture);
it does not load weights: `longqa.loader` is the only caller of `from_pretrained`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import huggingface_hub.constants
from huggingface_hub import try_to_load_from_cache
from transformers import AutoConfig, LongformerConfig

from longqa.demo_model.fact import FORM_NOTICE, QUESTION_FORM
from longqa_core.errors import ModelLoadError
from longqa_core.no_answer import NO_RULE, NULL_SCORE, THRESHOLD, NoAnswerRule, QuestionForm

DEMO_MODEL_DIR = Path(__file__).resolve().parent / "demo_model"
DEFAULT_MODEL = "allenai/longformer-large-4096-finetuned-triviaqa"

KNOWN_MODELS = {  # alias or Hub id -> what it is
    "allenai/longformer-large-4096-finetuned-triviaqa": "Longformer-large, TriviaQA (433.6 M params, default)",
    "valhalla/longformer-base-4096-finetuned-squadv1": "Longformer-base, SQuAD v1 (148.1 M params)",
    "mrm8488/longformer-base-4096-finetuned-squadv2": "Longformer-base, SQuAD v2, can answer 'no answer' (148.1 M)",
    "demo": "Bundled demo model: a tiny Longformer that only knows the fact-finding task (offline)",
}

# How each model says "not found" (issue 38): SQuAD 2.0 checkpoints by their null score, the demo model by a
# threshold measured on data its training never saw; every other model claims nothing unless the user gives a
# threshold (`--no-answer-below`).
NO_ANSWER_RULES = {
    "mrm8488/longformer-base-4096-finetuned-squadv2": NoAnswerRule(
        NULL_SCORE, source="a SQuAD 2.0 checkpoint: the best span against the lowest '<s>' score of the windows "
                           "read, as transformers' pipeline did with handle_impossible_answer"),
    "demo": NoAnswerRule(
        THRESHOLD, 4.2e-8, needs_evidence=True, question_form=QuestionForm(QUESTION_FORM, FORM_NOTICE),
        source="docs/no-answer.md: python -m evals no-answer --n 40 (the independent generator's "
               "documents, the hand-written template and prose notes; best score at least 4.2e-8 and every word of "
               "the question the document uses in the answer's sentence, the best of the top five spans that has "
               "them: 93.4 % of unanswerable questions not found, on held-out documents too, 75 of 93 questions of "
               "the form answered right and found)"),
}

ARCHITECTURES = {  # random-weight architectures for benchmarks: memory and latency do not depend on weights
    "arch:base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),  # 148.1 M
    "arch:large": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096),  # 433.6 M
}


@dataclass(frozen=True)
class ModelSource:
    """Where a model reference points. `location` is a local folder, a Hub id, or an `arch:` name."""

    ref: str
    location: str
    kind: str  # "demo" | "local" | "hub" | "architecture"

    @property
    def no_answer_rule(self) -> NoAnswerRule:
        """How this model says "not found" (NO_ANSWER_RULES), or no rule at all."""
        return NO_ANSWER_RULES.get(self.ref, NO_RULE)


def resolve_model(ref: str) -> ModelSource:
    """Turn a user's model reference into a `ModelSource`; raises ModelLoadError for what cannot exist."""
    ref = (ref or "").strip()
    if not ref:
        raise ModelLoadError("No model given.")
    if ref == "demo":
        return ModelSource(ref, str(DEMO_MODEL_DIR), "demo")
    if ref in ARCHITECTURES:
        return ModelSource(ref, ref, "architecture")
    if ref.startswith("arch:"):
        raise ModelLoadError(f"Unknown architecture {ref!r}; choose one of {', '.join(ARCHITECTURES)}.")
    path = Path(ref).expanduser()
    if path.is_dir():
        return ModelSource(ref, str(path.resolve()), "local")
    if path.suffix or ref.startswith((".", "/", "~")) or ref.count("/") != 1:
        raise ModelLoadError(f"Model {ref!r} is neither a local folder nor a Hub id of the form 'owner/name'.")
    return ModelSource(ref, ref, "hub")


def is_offline() -> bool:
    """Whether downloads from the Hub are off (HF_HUB_OFFLINE, as huggingface_hub read it)."""
    return bool(huggingface_hub.constants.HF_HUB_OFFLINE)


def needs_download(ref: str) -> bool:
    """Whether `ref` is a Hub model whose files are not in this machine's Hugging Face cache, so that loading it
    needs the network. Reads the cache on disk only (its config file); never the network."""
    try:
        source = resolve_model(ref)
    except ModelLoadError:
        return False  # not loadable at all: the load says why
    if source.kind != "hub":
        return False
    return not isinstance(try_to_load_from_cache(source.location, "config.json"), str)


def architecture_config(name: str) -> LongformerConfig:
    """The real Longformer base/large configuration (window 512, 4,096 positions) for random-weight runs."""
    if name not in ARCHITECTURES:
        raise ModelLoadError(f"Unknown architecture {name!r}; choose one of {', '.join(ARCHITECTURES)}.")
    return LongformerConfig(
        vocab_size=50265, max_position_embeddings=4098, attention_window=512, pad_token_id=1, bos_token_id=0,
        eos_token_id=2, sep_token_id=2, type_vocab_size=1, **ARCHITECTURES[name])


SAME_ARCHITECTURE = {  # registry checkpoints whose config.json on the Hub has exactly these shapes
    "allenai/longformer-large-4096-finetuned-triviaqa": "arch:large",
    "valhalla/longformer-base-4096-finetuned-squadv1": "arch:base",
    "mrm8488/longformer-base-4096-finetuned-squadv2": "arch:base",
}


def model_config(ref: str):
    """The config of `ref` without loading weights (for memory planning); offline for the registry models."""
    source = resolve_model(ref)
    if source.kind == "architecture":
        return architecture_config(source.ref)
    if source.kind == "hub" and source.ref in SAME_ARCHITECTURE:
        return architecture_config(SAME_ARCHITECTURE[source.ref])
    try:
        return AutoConfig.from_pretrained(source.location, trust_remote_code=False)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelLoadError(f"Cannot read the config of {ref!r}: {exc}") from None
