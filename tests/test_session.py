"""The serving session: switching models and profiles, keeping the old model when a load fails."""

from __future__ import annotations

import weakref

import pytest

from longqa.documents import Document
from longqa.errors import InputError, ModelLoadError, ProfileError
from longqa.session import Session, read_documents


def test_load_ask_and_the_readout_has_every_field(tiny_model_dir):
    session = Session()
    readout = session.load(str(tiny_model_dir), "baseline-fp32")
    assert readout.load_time_s > 0 and readout.weight_bytes > 0
    result = session.ask([Document("d", "The harbor of Velka is 42. " * 300)], "What is the harbor of Velka?",
                         max_seq_len=256, doc_stride=64, top_k=3)
    data = session.readout(result)
    for key in ("answers", "model", "profile", "windows", "tokens", "batch_size", "latency_s", "memory"):
        assert key in data
    assert data["model"] == str(tiny_model_dir) and data["profile"] == "baseline-fp32"
    assert set(data["latency_s"]) >= {"total", "extract", "tokenize", "forward", "decode"}
    assert set(data["memory"]) >= {"peak_allocated_bytes", "reserved_bytes", "nvml_used_bytes", "nvml_total_bytes",
                                   "host_rss_bytes", "host_peak_rss_bytes"}
    assert data["windows"] > 1 and len(data["answers"]) == 3


def test_same_request_does_not_reload_but_auto_stays_auto(tiny_model_dir):
    session = Session()
    session.load(str(tiny_model_dir), "auto")
    first = session.loaded
    session.load(str(tiny_model_dir), "auto")
    assert session.loaded is first


def test_switching_releases_the_old_model(tiny_model_dir):
    session = Session()
    session.load(str(tiny_model_dir), "baseline-fp32")
    old_weight = weakref.ref(next(session.loaded.model.parameters()))
    session.load(str(tiny_model_dir), "cpu")
    import gc

    gc.collect()
    assert old_weight() is None
    assert session.profile_name == "cpu"


def test_a_failed_load_keeps_the_previous_model_in_use(tiny_model_dir, tmp_path):
    session = Session()
    session.load(str(tiny_model_dir), "baseline-fp32")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{ not json")
    with pytest.raises(ModelLoadError):
        session.load(str(broken), "baseline-fp32")
    assert session.model_ref == str(tiny_model_dir) and session.profile_name == "baseline-fp32"
    result = session.ask([Document("d", "Some words here. " * 50)], "Which words?")
    assert result.answers


def test_a_profile_that_cannot_run_here_is_explained_and_nothing_changes(tiny_model_dir):
    session = Session()
    session.load(str(tiny_model_dir), "baseline-fp32")
    before = session.loaded
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine can run GPU profiles")
    with pytest.raises(ProfileError):
        session.load(str(tiny_model_dir), "multi-gpu")
    assert session.profile_name == "baseline-fp32" and session.loaded is not None
    assert session.loaded.model is not None and before.readout.profile == "baseline-fp32"


def test_read_documents_joins_files_and_pasted_text(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("First document.")
    documents, seconds = read_documents([str(path), ("b.md", b"# Second")], "Pasted words.")
    assert [d.name for d in documents] == ["a.txt", "b.md", "pasted text"]
    assert seconds >= 0
    with pytest.raises(InputError):
        read_documents([], "   ")
