"""Profiles: the registry, composition order and conflicts, auto-detection on simulated machines, availability."""

from __future__ import annotations

import importlib.util
import json

import pytest

from longqa_core.errors import ProfileError
from strategies.auto import resolve_auto, resolve_profile
from strategies.hardware import Gpu, Hardware, detect_hardware
from strategies.profiles import (PROFILES, Profile, compose, custom_profile, describe_profiles, get_profile,
                                 profile_choices, select_strategies, unavailable_reason)
from strategies.registry import STRATEGIES, strategy_cards
from tests.test_hardware import H100, RTX_3090, T4, simulate

MiB = 1024**2
CPU_BF16 = Hardware(cpu_bf16=True)
CPU_PLAIN = Hardware(cpu_bf16=False)


def gpus(*cards) -> Hardware:
    return Hardware(gpus=tuple(Gpu(i, name, total, cc) for i, (name, total, cc) in enumerate(cards)),
                    cuda_available=True, cpu_bf16=True)


def test_registry_has_every_profile_of_the_issue():
    assert list(PROFILES) == ["auto", "rtx-3090-24gb", "t4-16gb", "consumer-gpu", "multi-gpu", "datacenter", "cpu",
                              "baseline-fp32", "custom"]
    assert PROFILES["baseline-fp32"].strategies == ()
    assert PROFILES["rtx-3090-24gb"].batch_size == 8
    assert {"half_precision", "gradient_checkpointing"} <= set(PROFILES["rtx-3090-24gb"].strategies)
    assert {"dynamic_batching", "mmap_loading"} <= set(PROFILES["t4-16gb"].strategies)
    assert {"bnb_8bit", "offload"} <= set(PROFILES["consumer-gpu"].strategies)
    assert "replicas" in PROFILES["multi-gpu"].strategies
    assert {"half_precision", "fast_attention"} <= set(PROFILES["datacenter"].strategies)
    assert PROFILES["datacenter"].options["half_precision"] == {"dtype": "bf16"}
    assert PROFILES["datacenter"].batch_size > PROFILES["rtx-3090-24gb"].batch_size
    assert PROFILES["cpu"].strategies == ("half_precision|int8_dynamic", "fast_attention", "prepacked_linear")


def test_every_strategy_says_what_it_saves_costs_and_requires():
    for card in strategy_cards():
        assert card["description"] and card["saves"] and card["costs"] and card["requires"], card["name"]
    checkpointing = next(card for card in strategy_cards() if card["name"] == "gradient_checkpointing")
    assert "Nothing at inference" in checkpointing["saves"]


# ------------------------------------------------------------------------------------------ composition
def test_composition_keeps_the_given_order():
    profile = Profile("x", "test", ("half_precision", "mmap_loading", "fast_attention", "dynamic_batching"))
    assert profile.strategies == ("half_precision", "mmap_loading", "fast_attention", "dynamic_batching")


def test_wrong_order_is_refused_naming_both():
    with pytest.raises(ProfileError, match="'dynamic_batching'.*'half_precision'"):
        compose(["dynamic_batching", "half_precision"])


@pytest.mark.parametrize("first, second", [("bnb_8bit", "int8_dynamic"), ("half_precision", "autocast"),
                                           ("bnb_8bit", "bnb_4bit"), ("model_split", "offload"),
                                           ("half_precision", "int8_dynamic"), ("offload", "replicas")])
def test_conflicts_fail_at_construction_naming_both(first, second):
    with pytest.raises(ProfileError) as raised:
        Profile("x", "test", (first, second))
    assert first in str(raised.value) and second in str(raised.value) and "conflict" in str(raised.value)
    with pytest.raises(ProfileError, match="conflict"):
        custom_profile([second, first])


def test_unknown_and_repeated_strategies_are_refused():
    with pytest.raises(ProfileError, match="Unknown strategy 'flash'"):
        compose(["flash"])
    with pytest.raises(ProfileError, match="twice"):
        compose(["half_precision", "half_precision"])
    with pytest.raises(ProfileError, match="not in the profile"):
        Profile("x", "test", ("half_precision",), options={"autocast": {}})


def test_custom_profile_sorts_ticked_strategies_into_canonical_order():
    profile = custom_profile(["dynamic_batching", "fast_attention", "mmap_loading", "bnb_8bit", "bnb_8bit"],
                             batch_size=4)
    assert profile.name == "custom" and profile.batch_size == 4
    assert profile.strategies == ("bnb_8bit", "mmap_loading", "fast_attention", "dynamic_batching")


def test_every_registered_profile_composes():
    for profile in PROFILES.values():
        assert compose(profile.strategies, profile.options) == profile.strategies


# ------------------------------------------------------------------------------------------ auto
@pytest.mark.parametrize("cards, expected", [
    ([], "cpu"),
    ([T4], "t4-16gb"),
    ([RTX_3090], "rtx-3090-24gb"),
    ([T4, T4], "multi-gpu"),
    ([H100], "datacenter"),
    ([("NVIDIA GeForce RTX 3060", 12288 * MiB, (8, 6))], "consumer-gpu"),
])
def test_auto_detection_with_nvml_simulated(monkeypatch, cards, expected):
    simulate(monkeypatch, cards, cuda=bool(cards))
    found = detect_hardware()
    assert resolve_auto(found).name == expected
    assert resolve_profile("auto", found).name == expected


def test_auto_ignores_gpus_torch_cannot_use(monkeypatch):
    simulate(monkeypatch, [H100], cuda=False)
    assert resolve_auto(detect_hardware()).name == "cpu"


def test_auto_steps_down_when_the_first_choice_cannot_run():
    turing_48gb = gpus(("Quadro RTX 8000", 49152 * MiB, (7, 5)))  # big, but no bf16 for the datacenter profile
    assert "bf16" in unavailable_reason(PROFILES["datacenter"], turing_48gb)
    assert resolve_auto(turing_48gb).name == "rtx-3090-24gb"


# ------------------------------------------------------------------------------------------ availability
def test_gpu_profiles_explain_why_not_on_a_cpu_machine():
    for name in ("rtx-3090-24gb", "t4-16gb", "consumer-gpu", "multi-gpu", "datacenter"):
        assert "needs a CUDA GPU" in unavailable_reason(PROFILES[name], CPU_BF16)
    for name in ("auto", "cpu", "baseline-fp32", "custom"):
        assert unavailable_reason(PROFILES[name], CPU_BF16) is None


def test_multi_gpu_needs_two_gpus():
    assert unavailable_reason(PROFILES["multi-gpu"], gpus(T4)) == "replicas: needs 2+ CUDA GPUs, found 1"
    assert unavailable_reason(PROFILES["multi-gpu"], gpus(T4, T4)) is None
    assert "2+ CUDA GPUs" in unavailable_reason(custom_profile(["model_split"]), gpus(T4))


def test_bitsandbytes_missing_is_explained(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "bitsandbytes" else real(name, *a))
    assert unavailable_reason(PROFILES["consumer-gpu"], gpus(T4)) == "bnb_8bit: bitsandbytes is not installed"


def test_cpu_profile_picks_bf16_or_int8():
    assert select_strategies(PROFILES["cpu"], CPU_BF16) == ("half_precision", "fast_attention", "prepacked_linear")
    assert select_strategies(PROFILES["cpu"], CPU_PLAIN) == ("int8_dynamic", "fast_attention", "prepacked_linear")
    assert unavailable_reason(custom_profile(["half_precision"], device="cpu"), CPU_PLAIN).startswith(
        "half_precision: this CPU has no native bf16")


def test_int8_dynamic_is_cpu_only():
    assert "CPU only" in unavailable_reason(custom_profile(["int8_dynamic"], device="cuda"), gpus(T4))
    assert unavailable_reason(custom_profile(["int8_dynamic"], device="cpu"), gpus(T4)) is None


def test_unknown_profile_name():
    with pytest.raises(ProfileError, match="Unknown profile 'tpu'"):
        get_profile("tpu")


# ------------------------------------------------------------------------------------------ listings
def test_describe_profiles_rows_for_the_cli():
    rows = describe_profiles(CPU_BF16)
    json.dumps(rows)  # the CLI prints them with --json
    by_name = {row["name"]: row for row in rows}
    assert set(by_name) == set(PROFILES)
    assert set(by_name["cpu"]) >= {"name", "targets", "strategies", "batch_size", "available", "reason"}
    assert by_name["auto"]["resolves_to"] == "cpu"
    assert by_name["auto"]["strategies_here"] == ["half_precision", "fast_attention", "prepacked_linear"]
    assert not by_name["t4-16gb"]["available"] and "CUDA" in by_name["t4-16gb"]["reason"]
    assert by_name["consumer-gpu"]["strategies"] == ["half_precision", "bnb_8bit", "offload", "dynamic_batching"]


def test_profile_choices_label_unavailable_profiles_with_the_reason():
    choices = dict((value, label) for label, value in profile_choices(CPU_BF16))
    assert list(choices) == list(PROFILES)
    assert choices["auto"] == "auto: no GPU → cpu"
    assert "unavailable: needs a CUDA GPU" in choices["datacenter"]
    assert "unavailable" not in choices["cpu"]
    on_t4 = dict((value, label) for label, value in profile_choices(gpus(T4)))
    assert on_t4["auto"].startswith("auto: 1× ") and on_t4["auto"].endswith("GB → t4-16gb") and "unavailable" not in on_t4["t4-16gb"]


def test_strategy_names_are_unique_and_in_phase_order():
    assert len(STRATEGIES) == 13
    phases = [cls.phase for cls in STRATEGIES.values()]
    assert phases == sorted(phases)
