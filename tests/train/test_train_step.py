"""The trainer's step clock and summary, in-process on the CPU: what `dt_ms` measures after a NaN
rollback, and summary.json's fields filled from the run (not from variable names)."""

from __future__ import annotations

import json
import time

import pytest

from cifar_fixture import write_cifar10
from envkit.config.config import load_config


def _config(folder, max_steps: int):
    return load_config(None, data={
        "experiment": {"seed": 3}, "dataset": {"type": "cifar10", "path": str(folder)},
        "model": {"type": "cnn", "width": 4}, "device": {"type": "cpu"},
        "training": {"max_steps": max_steps, "batch_size": 8, "lr": 1e-3, "compile": False, "nan_policy": "rollback"},
        "eval": {"every_steps": 4, "batches": 1}, "checkpoint": {"every_steps": 4},
        "logging": {"every_steps": 5, "progress": "none", "device_seconds": 0}})


def test_dt_after_a_rollback_at_eval_time_measures_only_the_steps_since_the_rollback(tmp_path, monkeypatch):
    """A NaN planted before step 7 is found at step 8 (an eval step, not a logged one) and rolls
    back to step 4. A fake clock moves 1 s per trained step, except 10 s for each of the steps that
    the rollback throws away (6, 7, 8): every logged row must still say 1000 ms a step, because
    the rows after the rollback measure only steps trained since it."""
    from envkit.train.run.loop import train

    now = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])
    monkeypatch.setenv("ENVKIT_TRAIN_INJECT", "nan@7")
    seen = []

    def on_step(step, **_):
        first_pass = not seen or step > max(seen)
        now[0] += 10.0 if first_pass and step in (6, 7, 8) else 1.0
        seen.append(step)

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    result = train(_config(write_cifar10(tmp_path, per_file=20, test=20), 12), run_dir, resume="never",
                   handle_signals=False, on_step=on_step)

    assert result.status == "completed" and result.rollbacks == 1
    assert seen == [1, 2, 3, 4, 5, 6, 7, 8, 5, 6, 7, 8, 9, 10, 11, 12]  # steps 5-8 trained twice
    assert "rolled back to step_00000004.pt (step 4)" in (run_dir / "train.log").read_text()
    rows = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if "dt_ms" in r]
    assert [(r["step"], r["dt_ms"]) for r in rows] == [(5, 1000.0), (5, 1000.0), (10, 1000.0), (12, 1000.0)]


def test_summary_fields_come_from_the_run(tmp_path):
    """Every field of summary.json that a completed CPU run knows is filled, and matches the run."""
    from envkit.train.run.loop import train

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    train(_config(write_cifar10(tmp_path, per_file=20, test=20), 6), run_dir, resume="never", handle_signals=False)
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if "loss" in r]
    vals = [r["val_loss"] for r in rows if "val_loss" in r]
    assert (summary["status"], summary["steps"], summary["max_steps"], summary["world_size"]) == ("completed", 6, 6, 1)
    assert (summary["device"], summary["device_name"], summary["precision"], summary["compile"]) == ("cpu", "cpu", "fp32", "off")
    assert summary["final_loss"] == pytest.approx(losses[-1], abs=1e-6)
    assert summary["final_val_loss"] == vals[-1] and summary["best_val_loss"] == min(vals)
    assert summary["micro_batch"] == 8 and summary["grad_accum"] == 1 and summary["rollbacks"] == 0
    assert summary["parameters"] > 0 and summary["samples"] == 6 * 8  # six steps of eight images
    # the run's rate is what it trained over its training time, not the median of its log windows
    # (elapsed_seconds is written to 0.01 s)
    training_seconds = summary["elapsed_seconds"]  # what the run recorded, whatever the machine's speed
    assert summary["samples"] / summary["samples_per_second"] == pytest.approx(training_seconds, abs=0.006)
    assert 0 <= summary["accuracy"] <= 1 and summary["chance_accuracy"] == 0.1
    assert len(summary["config_hash"]) >= 8 and summary["faults"] == []
