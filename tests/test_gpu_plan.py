"""Planning for a machine you do not have (`longqa.gpu_plan`, `strategies.gpu_catalog`, `python -m longqa plan`):
a plan for every named GPU, recommendations that fit and are the app's own `auto`, peaks that grow with the work,
weights that shrink with the bits, replicas on several GPUs, CPU hosts, the article's advice, clear errors."""

from __future__ import annotations

import json
import math

import pytest
from transformers import BertConfig

from longqa import cli
from longqa.article_check import largest_batch
from longqa.gpu_plan import (DEFAULT_HOST_GB, candidate_profiles, describe_machine, plan_config, plan_machine,
                             plan_request)
from longqa.models import architecture_config
from longqa.session import Session
from longqa_core.errors import InputError, ProfileError
from strategies import auto as auto_module
from strategies.auto import resolve_auto
from strategies.gpu_catalog import GPU_MODELS, gpu_model, planned_hardware
from strategies.memory_planner import (CPU_PROCESS_BYTES, CUDA_ALLOCATOR_SLACK, CUDA_CONTEXT_BYTES, FIT_MARGIN,
                                       activation_bytes, ModelShape, plan_profile)
from strategies.offload import HOST_RAM_SHARE, Offload
from strategies.profiles import CHOSEN_BY_HAND, PROFILES, SPEED_ORDER, Profile, card_order, speed_order

LARGE = "allenai/longformer-large-4096-finetuned-triviaqa"
GB = 10**9
JSON_KEYS = {"model", "hardware", "tokens", "batch", "recommended", "recommendation_reason", "predicted", "profiles",
             "article"}
PROFILE_KEYS = {"name", "fits", "peak_bytes", "devices", "why", "strategies", "precision", "attention", "tokens",
                "batch", "auto_candidate"}


@pytest.fixture(scope="module")
def plans():
    """The default model planned once on every catalog GPU (each plan takes well under a second)."""
    return {name: plan_request(LARGE, gpu=name) for name in GPU_MODELS}


def test_the_catalog_has_the_cards_the_issue_names_with_their_capabilities():
    expected = {"T4": (16, False), "L4": (24, True), "A10G": (24, True), "RTX 3060": (12, True),
                "RTX 3090": (24, True), "RTX 4090": (24, True), "A100 40GB": (40, True), "A100 80GB": (80, True),
                "H100": (80, True), "H200": (141, True)}
    for name, (memory, bf16) in expected.items():
        assert (GPU_MODELS[name].memory_gb, GPU_MODELS[name].supports_bf16) == (memory, bf16), name
    assert any(gpu.memory_gb == 8 for gpu in GPU_MODELS.values())  # an 8 GB consumer card
    assert gpu_model("rtx3090") is gpu_model("RTX-3090") is GPU_MODELS["RTX 3090"]
    assert gpu_model("a100-80gb") is GPU_MODELS["A100 80GB"]


@pytest.mark.parametrize("name", list(GPU_MODELS))
def test_a_plan_for_each_named_gpu(plans, name):
    plan, gpu = plans[name], GPU_MODELS[name]
    data = plan.to_json()
    assert set(data) == JSON_KEYS and data["predicted"] is True
    assert data["hardware"]["gpu"] == name and data["hardware"]["gpu_memory_bytes"] == gpu.memory_gb * GB
    assert data["hardware"]["bf16"] == gpu.supports_bf16 and data["hardware"]["host_memory_assumed"]
    by_name = {row["name"]: row for row in data["profiles"]}
    assert set(by_name) >= {"datacenter", "rtx-3090-24gb", "t4-16gb", "consumer-gpu", "cpu", "baseline-fp32"}
    assert (by_name["datacenter"]["peak_bytes"] is not None) == gpu.supports_bf16  # bf16 from Ampere on
    for row in data["profiles"]:
        assert set(row) == PROFILE_KEYS and row["why"]
        if row["peak_bytes"] is None:
            assert not row["fits"] and row["why"].startswith("cannot run there")
            continue
        checked = [device for device in row["devices"] if device["device"] != "disk"]
        assert row["peak_bytes"] == max(device["need_bytes"] for device in checked)
        for device in row["devices"]:
            assert sum(device["parts_bytes"].values()) == device["need_bytes"]
        assert row["fits"] == all(device["need_bytes"] <= (1 - FIT_MARGIN) * device["total_bytes"]
                                  for device in checked)


@pytest.mark.parametrize("name", list(GPU_MODELS))
def test_the_recommended_profile_fits_and_is_the_apps_own_auto(plans, name):
    plan = plans[name]
    chosen = plan.profile(plan.recommended)
    assert chosen.fits and chosen.auto_candidate
    gpu = next(device for device in chosen.devices if device.device == "cuda:0")
    assert gpu.need_bytes <= (1 - FIT_MARGIN) * GPU_MODELS[name].total_bytes
    # the page and the loader resolve `auto` through the session: the same rule gives the same profile
    hardware = describe_machine(gpu=name).hardware
    assert Session(hardware=hardware).auto_profile(LARGE).name == plan.recommended
    # the card's own profile where it fits, else the next smaller one: nothing before it in that order fits
    order = card_order(hardware)
    assert not any(plan.profile(name).fits for name in order[:order.index(plan.recommended)])
    assert plan.recommendation_reason.count("\n") == 0 and "named for this card" in plan.recommendation_reason


@pytest.mark.parametrize("gpu, named", [("T4", "t4-16gb"), ("RTX 3090", "rtx-3090-24gb"), ("RTX 4090", "rtx-3090-24gb"),
                                        ("A100 80GB", "datacenter"), ("H100", "datacenter"),
                                        ("RTX 3060", "consumer-gpu")])
def test_each_card_is_told_the_profile_named_for_it_when_faster_ones_tie(gpu, named):
    """Issue 49: a T4 was told rtx-3090-24gb and an RTX 3090 datacenter, because ties went by list order."""
    plan = plan_request(LARGE, gpu=gpu)
    assert plan.recommended == named
    assert plan.recommendation_reason.startswith("the profile named for this card")


@pytest.mark.slow
def test_every_profile_reaches_auto_and_the_planner(monkeypatch):
    """A profile with no speed rank would silently never be offered: the registry refuses it, and every ranked
    profile is a row of the plan and what `auto` picks on some machine (baseline-fp32, the reference, where not even
    the cpu profile can run)."""
    concrete = [name for name in PROFILES if name not in CHOSEN_BY_HAND]
    assert sorted(SPEED_ORDER) == sorted(concrete)
    rows = [name for name, _, candidate in candidate_profiles() if candidate]
    assert rows == list(SPEED_ORDER)
    machines = {"multi-gpu": describe_machine(gpu="T4", gpus=2), "datacenter": describe_machine(gpu="H100"),
                "rtx-3090-24gb": describe_machine(gpu="RTX 3090"), "t4-16gb": describe_machine(gpu="T4"),
                "consumer-gpu": describe_machine(gpu="RTX 3060"),
                "cpu": describe_machine(cpu_memory_gb=16, cpu_bf16=True)}
    for name, machine in machines.items():
        assert plan_machine(LARGE, machine).recommended == name
    assert set(machines) | {"baseline-fp32"} == set(SPEED_ORDER)
    host = describe_machine(cpu_memory_gb=16)
    monkeypatch.setattr(auto_module, "is_available", lambda profile, hardware: profile.name == "baseline-fp32")
    assert resolve_auto(host.hardware, architecture_config("arch:large")).name == "baseline-fp32"
    unranked = dict(PROFILES, extra=Profile("extra", "a new card"))
    with pytest.raises(ProfileError, match="'extra' has no speed rank"):
        speed_order(unranked)


def test_a_gpu_parts_are_weights_activations_slack_and_context(plans):
    row = plans["T4"].profile("t4-16gb")
    parts = row.devices[0].parts_bytes
    assert parts["cuda_context"] == CUDA_CONTEXT_BYTES
    allocated = parts["weights"] + parts["activations"] + parts["offload_stream"]
    assert parts["allocator_slack"] == pytest.approx(CUDA_ALLOCATOR_SLACK * allocated, abs=1)
    shape = ModelShape.from_config(architecture_config("arch:large"))
    assert parts["activations"] == activation_bytes(shape, tokens=4096, batch=4, compute_bytes=2)
    assert parts["weights"] == pytest.approx(433.6e6 * 2, rel=0.01)  # Longformer-large in fp16


@pytest.mark.parametrize("profile", ["rtx-3090-24gb", "t4-16gb", "consumer-gpu", "baseline-fp32", "cpu",
                                     "custom: fp16 + 4-bit"])
def test_peaks_grow_with_batch_and_with_tokens(profile):
    peak = lambda **work: plan_request(LARGE, gpu="A100 80GB", **work).profile(profile).peak_bytes  # noqa: E731
    assert peak(tokens=1024, batch=1) < peak(tokens=1024, batch=4) < peak(tokens=1024, batch=16)
    assert peak(tokens=1024, batch=2) < peak(tokens=2048, batch=2) < peak(tokens=4096, batch=2)


def test_weights_order_fp32_fp16_8bit_4bit(plans):
    plan = plans["T4"]
    weights = [plan.profile(name).devices[0].parts_bytes["weights"]
               for name in ("baseline-fp32", "t4-16gb", "consumer-gpu", "custom: fp16 + 4-bit")]
    assert weights == sorted(weights, reverse=True) and len(set(weights)) == 4
    assert weights[0] == pytest.approx(2 * weights[1], rel=0.01)


@pytest.mark.slow
def test_a_4_gb_card_at_batch_1_gets_a_stack_that_fits():
    plan = plan_request(LARGE, gpu_memory_gb=4, batch=1)
    chosen = plan.profile(plan.recommended)
    assert chosen.fits and chosen.devices[0].device == "cuda:0" and chosen.peak_bytes <= 0.9 * 4 * GB
    # Longformer-large in fp16 (0.87 GB) fits 4 GB at batch 1; a 2 GB card needs the 8-bit, offload-ready stack
    small = plan_request(LARGE, gpu_memory_gb=2, batch=1)
    assert small.recommended == "consumer-gpu"
    assert {"bnb_8bit", "offload"} <= set(small.profile("consumer-gpu").strategies)
    assert not small.profile("t4-16gb").fits and small.profile("custom: fp16 + 4-bit").fits


@pytest.mark.parametrize("gpu", ["A100 80GB", "H100", 80.0])
def test_an_80_gb_card_gets_a_stack_without_offload(gpu):
    plan = plan_request(LARGE, **({"gpu_memory_gb": gpu} if isinstance(gpu, float) else {"gpu": gpu}))
    chosen = plan.profile(plan.recommended)
    assert chosen.fits and "offload" not in chosen.strategies
    assert {device.device for device in chosen.devices} == {"cuda:0"}
    if not isinstance(gpu, float):
        assert plan.recommended == "datacenter"  # bf16 + fast attention, batch 32


def test_two_gpus_replicate_the_weights_and_split_the_batch_as_multi_gpu_does():
    plan = plan_request(LARGE, gpu="T4", gpus=2, batch=16)
    assert plan.recommended == "multi-gpu"
    replicas = plan.profile("multi-gpu")
    assert [device.device for device in replicas.devices] == ["cuda:0", "cuda:1"]
    single = plan_request(LARGE, gpu="T4", batch=8).profile("t4-16gb").devices[0].parts_bytes  # fp16 eager
    for device in replicas.devices:
        assert device.parts_bytes["weights"] == single["weights"]  # a whole copy on each card
        assert device.parts_bytes["activations"] == single["activations"]  # half of the 16 windows each
    one_card = plan_request(LARGE, gpu="T4", gpus=1, batch=16)
    assert not one_card.profile("multi-gpu").fits and "2+ CUDA GPUs" in one_card.profile("multi-gpu").why
    odd = plan_request(LARGE, gpu="T4", gpus=3, batch=16).profile("multi-gpu")
    shape = ModelShape.from_config(architecture_config("arch:large"))
    assert odd.devices[2].parts_bytes["activations"] == activation_bytes(shape, tokens=4096, batch=math.ceil(16 / 3),
                                                                         compute_bytes=2)


def test_a_cpu_only_machine_is_planned_for_its_host_memory():
    plan = plan_request(LARGE, cpu_memory_gb=16)
    assert plan.recommended == "cpu" and plan.article is None
    cpu = plan.profile("cpu")
    assert [device.device for device in cpu.devices] == ["cpu"]
    parts = cpu.devices[0].parts_bytes
    assert parts["process"] == CPU_PROCESS_BYTES and cpu.devices[0].total_bytes == 16 * GB
    assert plan.profile("t4-16gb").why == "cannot run there: needs a CUDA GPU; this machine has none"
    bf16 = plan_request(LARGE, cpu_memory_gb=16, cpu_bf16=True).profile("cpu")
    assert bf16.precision == "bf16" and cpu.precision == "int8"
    tiny_host = plan_request(LARGE, cpu_memory_gb=1)
    assert tiny_host.recommended is None and tiny_host.recommendation_reason.startswith("nothing fits")
    assert tiny_host.to_json()["recommended"] is None


def test_the_host_memory_checks_offloaded_weights_and_sets_the_offload_budget():
    hardware = planned_hardware(GPU_MODELS["T4"], host_memory_gb=10)
    assert Offload(hardware, "cuda").budgets()["cpu"] == int(10 * GB * HOST_RAM_SHARE)
    assert describe_machine(gpu="T4").hardware.host_memory_bytes == DEFAULT_HOST_GB * GB
    # the fp32 model on a 2 GB host: over 90 % of it; the int8 `cpu` stack under
    small_host = plan_request(LARGE, cpu_memory_gb=2)
    assert not small_host.profile("baseline-fp32").fits and small_host.profile("cpu").fits
    assert small_host.profile("baseline-fp32").why.startswith("cpu needs")


def test_a_tiny_card_offloads_weights_to_the_host():
    config = architecture_config("arch:large")
    hardware = planned_hardware(None, gpu_memory_gb=0.5, host_memory_gb=32)
    plan = plan_profile(config, PROFILES["consumer-gpu"], hardware, batch=1)
    assert plan.predicted_weight_bytes_per_device.get("cpu", 0) > 0  # 80 % of 0.5 GB holds less than 0.49 GB
    assert plan.device_parts["cuda:0"]["offload_stream"] > 0 and plan.device_parts["cpu"] == {
        "weights": plan.predicted_weight_bytes_per_device["cpu"]}


def test_the_articles_advice_and_where_it_is_wrong(plans):
    t4 = plans["T4"].article
    assert t4.profile == "t4-16gb" and "memory-mapped" in t4.advice
    assert any("not GPU memory" in line and "the same" in line for line in t4.corrections)
    rtx = plans["RTX 3090"].article
    assert rtx.profile == "rtx-3090-24gb"
    assert any(line.startswith("Gradient checkpointing saves nothing at inference") for line in rtx.corrections)
    assert any("bf16 with the fast attention" in line for line in rtx.corrections)  # Ampere has bf16
    assert plans["H200"].article.profile == "rtx-3090-24gb"  # the article stops at 24 GB cards
    consumer = plans["RTX 3060"].article
    assert consumer.profile == "consumer-gpu"
    assert any(line.startswith("Offload moves nothing here") for line in consumer.corrections)
    assert plans["RTX 3090"].recommended == rtx.profile  # the card's own profile (the article's corrections stand)


def test_the_largest_batch_that_fits_is_the_boundary():
    config = architecture_config("arch:large")
    hardware = describe_machine(gpu="T4").hardware
    most = largest_batch(config, PROFILES["t4-16gb"], hardware, 4096)
    fits = lambda batch: plan_profile(config, PROFILES["t4-16gb"], hardware, batch=batch).fits(hardware)  # noqa
    assert most > 4 and fits(most) and not fits(most + 1)


@pytest.mark.parametrize("kwargs, message", [
    ({"gpu": "Voodoo 3"}, "known: GTX 1650, RTX 3070"),
    ({"gpu": "A100"}, "ambiguous"),
    ({"gpu_memory_gb": 0}, "more than 0 GB"),
    ({"gpu_memory_gb": -8}, "more than 0 GB"),
    ({"gpu_memory_gb": 16000}, "not MB"),
    ({"cpu_memory_gb": 0}, "more than 0 GB"),
    ({"gpu": "T4", "gpus": 0}, "from 1 to"),
    ({"gpu": "T4", "tokens": 5000}, "limit of 4,096"),
    ({"gpu": "T4", "tokens": 0}, "limit of 4,096"),
    ({"gpu": "T4", "batch": 0}, "Batch"),
    ({"gpu_memory_gb": 16, "compute_capability": "eight"}, "MAJOR.MINOR"),
    ({"gpu": "T4", "compute_capability": "8.6"}, "not both"),
    ({}, "Describe the machine"),
    ({"cpu_memory_gb": 16, "gpus": 2}, "name the GPU or give its memory"),
])
def test_bad_input_gets_a_clear_error(kwargs, message):
    with pytest.raises(InputError, match=message):
        plan_request(LARGE, **kwargs)


def test_a_model_that_is_not_a_longformer_is_refused(tmp_path):
    BertConfig().save_pretrained(tmp_path)
    with pytest.raises(InputError, match="Longformer's memory only"):
        plan_config(str(tmp_path))


def test_a_local_folders_config_is_planned(tmp_path):
    architecture_config("arch:base").save_pretrained(tmp_path)
    local = plan_machine(str(tmp_path), describe_machine(gpu="T4"))
    registry = plan_machine("valhalla/longformer-base-4096-finetuned-squadv1", describe_machine(gpu="T4"))
    assert [row.peak_bytes for row in local.profiles] == [row.peak_bytes for row in registry.profiles]


def test_the_command_prints_json_in_the_issues_shape(capsys):
    assert cli.main(["plan", "--model", LARGE, "--gpu", "T4", "--tokens", "2048", "--batch", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == JSON_KEYS and data["tokens"] == 2048 and data["batch"] == 2
    assert data["recommended"] == "t4-16gb"
    assert all(row["batch"] == 2 for row in data["profiles"] if row["peak_bytes"])
    assert data == plan_request(LARGE, gpu="T4", tokens=2048, batch=2).to_json()


def test_the_command_prints_a_table_with_predicted_labels(capsys):
    assert cli.main(["plan", "--model", LARGE, "--gpu", "rtx 3090"]) == 0
    out = capsys.readouterr().out
    assert "predicted" in out.splitlines()[1] and "Recommended: rtx-3090-24gb" in out
    assert "cuda:0: 5.42 GB of 24 = weights 0.87 + activations 3.51" in out  # rtx-3090-24gb, batch 8
    assert "CUDA context 0.60" in out and "Gradient checkpointing saves nothing at inference" in out


@pytest.mark.parametrize("argv, message", [
    (["--gpu", "Voodoo 3"], "is not in the catalog; known: GTX 1650"),
    (["--gpu-memory", "0"], "more than 0 GB"),
    (["--gpu-memory", "100000"], "not MB"),
    (["--gpu", "T4", "--tokens", "8192"], "limit of 4,096"),
    (["--gpu", "T4", "--batch", "0"], "Batch (windows per forward) must be"),
    ([], "Describe the machine"),
])
def test_the_command_refuses_bad_input_in_one_line(capsys, argv, message):
    assert cli.main(["plan", "--model", LARGE, *argv]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1


def test_gpu_by_name_and_by_memory_exclude_each_other(capsys):
    with pytest.raises(SystemExit):
        cli.main(["plan", "--gpu", "T4", "--gpu-memory", "16"])
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("name", ["arch:base", "arch:large"])
def test_a_modules_children_add_up_to_the_module_on_meta_models(name):
    """A device map that splits a layer at its children is counted by them: each split's counts are exact."""
    from strategies.device_map import empty_model
    from strategies.memory_planner import child_parameters, module_parameters

    config = architecture_config(name)
    model, shape = empty_model(config), ModelShape.from_config(config)
    modules = dict(model.named_modules())
    for module in ["longformer.embeddings", "longformer.encoder.layer.3", "longformer.encoder.layer.3.attention",
                   "longformer.encoder.layer.3.attention.output", "longformer.encoder.layer.3.output"]:
        counted = child_parameters(shape, module)
        for child, parts in counted.items():
            assert sum(parts.values()) == sum(p.numel() for p in modules[f"{module}.{child}"].parameters()), child
        assert sum(sum(parts.values()) for parts in counted.values()) == sum(
            p.numel() for p in modules[module].parameters())
    assert module_parameters(shape)["longformer.encoder.layer.3"]["linear"] == sum(
        parts["linear"] for parts in child_parameters(shape, "longformer.encoder.layer.3").values())
