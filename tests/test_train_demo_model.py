"""The demo model's training script: a run stopped and resumed ends with the same weights as one run straight."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "train_demo_model.py"
TINY = ["--steps", "4", "--validate-every", "2", "--save-every", "1", "--validation-batches", "1", "--hidden", "32",
        "--layers", "1", "--heads", "2", "--ffn", "64", "--vocab", "600", "--tokenizer-facts", "500", "--batch", "4",
        "--warmup", "2", "--threads", "1"]


def train(run_dir: Path, *extra: str) -> str:
    done = subprocess.run([sys.executable, str(SCRIPT), "--run-dir", str(run_dir), *TINY, *extra],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.slow
def test_a_resumed_run_ends_where_an_unbroken_one_does(tmp_path):
    straight = train(tmp_path / "straight")
    assert "finished: 4 steps" in straight
    first = train(tmp_path / "broken", "--sitting-steps", "3")
    assert "stopped at step 3 of 4" in first and not (tmp_path / "broken" / "model").exists()
    second = train(tmp_path / "broken", "--resume")
    assert "resumed at step 3 of 4" in second and "finished: 4 steps" in second
    a = load_file(tmp_path / "straight" / "model" / "model.safetensors")
    b = load_file(tmp_path / "broken" / "model" / "model.safetensors")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[name], b[name]) for name in a)
    log = [json.loads(line) for line in (tmp_path / "broken" / "validation.jsonl").read_text().splitlines()]
    assert [entry["step"] for entry in log] == [2, 4]
    assert {"classic_em", "broad_em", "notes_em", "broad_em_pos"} <= log[-1].keys()


@pytest.mark.slow
def test_a_fresh_run_refuses_to_overwrite_a_checkpoint(tmp_path):
    train(tmp_path / "run", "--sitting-steps", "1")
    done = subprocess.run([sys.executable, str(SCRIPT), "--run-dir", str(tmp_path / "run"), *TINY],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode != 0 and "--resume" in (done.stderr + done.stdout)


@pytest.mark.slow
def test_a_finished_run_trains_further_with_more_steps_and_a_new_schedule(tmp_path):
    train(tmp_path / "run")
    before = load_file(tmp_path / "run" / "model" / "model.safetensors")
    more = train(tmp_path / "run", "--resume", "--more-steps", "2", "--lr", "1e-3")
    assert "resumed at step 4 of 6" in more and "finished: 6 steps" in more
    after = load_file(tmp_path / "run" / "model" / "model.safetensors")
    assert any(not torch.equal(before[name], after[name]) for name in before)
    log = [json.loads(line) for line in (tmp_path / "run" / "validation.jsonl").read_text().splitlines()]
    assert [entry["step"] for entry in log] == [2, 4, 6]
    assert log[-1]["lr"] > log[1]["lr"]  # warmed up again at the new peak, not left at the end of the old decay
