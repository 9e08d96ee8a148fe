"""Fetching the next batch ahead (train/prefetch.py) changes when a batch is read, never which:
forced on here on the CPU (where `auto` leaves it off), a run stopped and resumed, a run that
splits its micro-batch after an out-of-memory and one that rolls back after a NaN each train on
exactly the batches of the plain run."""

from __future__ import annotations

import json

import torch

from conftest import ROOT, envkit
from envkit.train.data.prefetch import DeviceBatches, want_fetch_ahead

TEMPLATES = ROOT / "templates" / "train"
AHEAD = ["--set", "dataloader.fetch_ahead=true"]


def run(tmp_path, template, *args, run_id="r", inject=None):
    env = {"ENVKIT_TRAIN_INJECT": inject} if inject else None
    return envkit("run", str(TEMPLATES / f"{template}.yaml"), "--run-id", run_id, "--profile", "cpu", *args,
                  cwd=tmp_path, env=env, timeout=400)


def rows(tmp_path, template, run_id):
    d = tmp_path / "runs" / template.replace("_", "-") / run_id
    return [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()], d


def losses(tmp_path, template, run_id):
    return [(r["step"], r["loss"]) for r in rows(tmp_path, template, run_id)[0] if "loss" in r]


def test_resume_with_fetch_ahead_is_bit_identical_to_the_plain_run(tmp_path):
    args = ["--set", "training.max_steps=20", "--set", "training.batch_size=16", "--set", "logging.every_steps=1", "--set", "eval.every_steps=10",
            "--set", "checkpoint.every_steps=7", "--set", "model.dropout=0.1", "--set", "eval.accuracy_samples=16",
            "--set", "logging.progress=none"]
    assert run(tmp_path, "gpt_quick_test", *args, "--set", "dataloader.fetch_ahead=false", run_id="plain").returncode == 0
    first = run(tmp_path, "gpt_quick_test", *args, *AHEAD, "--stop-after", "9", run_id="ahead")
    assert first.returncode == 0, first.stderr[-2000:]
    again = run(tmp_path, "gpt_quick_test", *args, *AHEAD, run_id="ahead")
    assert again.returncode == 0, again.stderr[-2000:]
    plain, ahead = losses(tmp_path, "gpt_quick_test", "plain"), losses(tmp_path, "gpt_quick_test", "ahead")
    assert [s for s, _ in ahead] == list(range(1, 21))
    assert ahead == plain  # the same batches in the same steps, through a stop and a resume: same floats


def test_out_of_memory_split_and_nan_rollback_with_fetch_ahead(tmp_path):
    """Both rebuild the loader mid-run: the batch fetched ahead from the old one must not be used."""
    args = ["--set", "training.max_steps=12", "--set", "training.batch_size=8", "--set", "dataset.num_samples=2000",
            "--set", "model.hidden=32", "--set", "eval.every_steps=0", "--set", "checkpoint.every_steps=2",
            "--set", "logging.every_steps=1", "--set", "logging.progress=none"]
    for fault in ("oom@3,oom@7", "nan@5"):
        name = fault.split("@")[0]
        for ahead in ("false", "true"):
            res = run(tmp_path, "mlp_quick_test", *args, "--set", f"dataloader.fetch_ahead={ahead}", run_id=f"{name}-{ahead}",
                      inject=fault)
            assert res.returncode == 0, res.stderr[-2000:]
        plain, ahead = losses(tmp_path, "mlp_quick_test", f"{name}-false"), losses(tmp_path, "mlp_quick_test", f"{name}-true")
        assert [s for s, _ in ahead] == list(range(1, 13))  # no step skipped or repeated
        assert ahead == plain, fault  # the same batches after the split / the rollback
    _, d = rows(tmp_path, "mlp_quick_test", "nan-true")
    assert "rolled back to step_00000004.pt" in (d / "train.log").read_text()
    assert "micro-batch 4 x 2 accumulation" in (rows(tmp_path, "mlp_quick_test", "oom-true")[1] / "train.log").read_text()


def test_auto_fetches_ahead_only_where_it_pays_and_cannot_change_a_batch():
    assert want_fetch_ahead("auto", "cuda", 0, builtin_dataset=True)
    assert want_fetch_ahead("auto", "mps", 4, builtin_dataset=False)
    assert not want_fetch_ahead("auto", "cuda", 0, builtin_dataset=False)  # a factory dataset read in this process
    assert not want_fetch_ahead("auto", "cpu", 4, builtin_dataset=True)  # synchronous: nothing to overlap
    assert want_fetch_ahead(True, "cpu", 0, builtin_dataset=False) and not want_fetch_ahead(False, "cuda", 8, True)


def test_device_batches_take_the_fetched_one_and_drop_it_on_reset():
    def loader(start):
        return iter((torch.tensor([i]), torch.tensor([i + 100])) for i in range(start, 1000))

    def next_batch(it):
        return next(it)

    b = DeviceBatches(loader(0), torch.device("cpu"), False, next_batch, ahead=True)
    assert int(b.take()[0]) == 0
    b.prefetch()
    b.prefetch()  # one ahead, not two
    assert int(b.take()[0]) == 1 and int(b.take()[0]) == 2
    b.prefetch()  # fetched 3 ...
    b.reset(loader(2))  # ... then the loader is rebuilt at the counted position (a rollback)
    assert [int(b.take()[0]) for _ in range(2)] == [2, 3]
    off = DeviceBatches(loader(0), torch.device("cpu"), False, next_batch, ahead=False)
    off.prefetch()
    assert off.pending is None and int(off.take()[0]) == 0
