"""The demo model's training script: a run stopped and resumed ends with the same weights as one run straight."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "train_demo_model.py"
TINY = ["--steps", "4", "--validate-every", "2", "--save-every", "1", "--validation-batches", "1",
        "--validation-size", "8", "--hidden", "32", "--layers", "1", "--heads", "2", "--ffn", "64", "--vocab", "600",
        "--tokenizer-facts", "500", "--batch", "4", "--warmup", "2", "--threads", "1"]


def train(run_dir: Path, *extra: str) -> str:
    done = subprocess.run([sys.executable, str(SCRIPT), "--run-dir", str(run_dir), *TINY, *extra],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory) -> tuple[Path, str]:
    """A run of 4 steps in one sitting, and what it printed; tests that go on with it work on a copy."""
    run_dir = tmp_path_factory.mktemp("straight") / "run"
    return run_dir, train(run_dir)


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory) -> tuple[Path, str]:
    """A run of 4 steps stopped after its first sitting of 3, and what it printed; tests work on a copy."""
    run_dir = tmp_path_factory.mktemp("stopped") / "run"
    return run_dir, train(run_dir, "--sitting-steps", "3")


@pytest.mark.slow
def test_a_resumed_run_ends_where_an_unbroken_one_does(tmp_path, straight_run, stopped_run):
    straight_dir, straight = straight_run
    assert "finished: 4 steps" in straight
    stopped_dir, first = stopped_run
    assert "stopped at step 3 of 4" in first and not (stopped_dir / "model").exists()
    broken = shutil.copytree(stopped_dir, tmp_path / "broken")
    second = train(broken, "--resume")
    assert "resumed at step 3 of 4" in second and "finished: 4 steps" in second
    a = load_file(straight_dir / "model" / "model.safetensors")
    b = load_file(broken / "model" / "model.safetensors")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[name], b[name]) for name in a)
    log = [json.loads(line) for line in (broken / "validation.jsonl").read_text().splitlines()]
    assert [entry["step"] for entry in log] == [2, 4]
    assert {"classic_em", "broad_em", "notes_em", "broad_em_pos"} <= log[-1].keys()


@pytest.mark.slow
def test_a_fresh_run_refuses_to_overwrite_a_checkpoint(tmp_path, stopped_run):
    run_dir = shutil.copytree(stopped_run[0], tmp_path / "run")
    checkpoint = (run_dir / "checkpoint.pt").read_bytes()
    done = subprocess.run([sys.executable, str(SCRIPT), "--run-dir", str(run_dir), *TINY],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode != 0 and "--resume" in (done.stderr + done.stdout)
    assert (run_dir / "checkpoint.pt").read_bytes() == checkpoint


@pytest.mark.slow
def test_a_finished_run_trains_further_with_more_steps_and_a_new_schedule(tmp_path, straight_run):
    run_dir = shutil.copytree(straight_run[0], tmp_path / "run")
    before = load_file(run_dir / "model" / "model.safetensors")
    more = train(run_dir, "--resume", "--more-steps", "2", "--lr", "1e-3")
    assert "resumed at step 4 of 6" in more and "finished: 6 steps" in more
    after = load_file(run_dir / "model" / "model.safetensors")
    assert any(not torch.equal(before[name], after[name]) for name in before)
    log = [json.loads(line) for line in (run_dir / "validation.jsonl").read_text().splitlines()]
    assert [entry["step"] for entry in log] == [2, 4, 6]
    assert log[-1]["lr"] > log[1]["lr"]  # warmed up again at the new peak, not left at the end of the old decay
