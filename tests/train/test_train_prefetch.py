"""Fetching the next batch ahead (train/prefetch.py) changes when a batch is read, never which:
forced on here on the CPU (where `auto` leaves it off), a run that splits its micro-batch after an
out-of-memory, rolls back after a NaN, is stopped and resumed trains on exactly the batches of the
plain run that meets the same faults (dropout on, so a random draw taken out of turn shows too).
The two runs (three `envkit run`s) are trained once for the module: each start-up costs seconds."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import ROOT, envkit
from envkit.train.data.prefetch import DeviceBatches, want_fetch_ahead

TEMPLATES = ROOT / "templates" / "train"
ARGS = ["--set", "training.max_steps=12", "--set", "training.batch_size=8", "--set", "dataset.num_samples=2000",
        "--set", "model.hidden=32", "--set", "model.dropout=0.1", "--set", "eval.every_steps=0", "--set", "checkpoint.every_steps=2",
        "--set", "logging.every_steps=1", "--set", "logging.progress=none"]
# out of memory at step 3 (micro-batch 8 -> 4), a NaN at 5 (back to step 4), out of memory at 7 (4 -> 2);
# each rebuilds the loader mid-run, and the batch fetched ahead from the old one must not be used
FAULTS = "oom@3,nan@5,oom@7"


def run(tmp_path, *args, run_id="r"):
    return envkit("run", str(TEMPLATES / "mlp_quick_test.yaml"), "--run-id", run_id, "--profile", "cpu", *ARGS, *args,
                  cwd=tmp_path, env={"ENVKIT_TRAIN_INJECT": FAULTS}, timeout=400)


def losses(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in rows if "loss" in r]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(plain, ahead): the run folders of the same faulted run without and with fetch-ahead, the
    second stopped after step 9 and resumed."""
    d = tmp_path_factory.mktemp("prefetch")
    res = run(d, "--set", "dataloader.fetch_ahead=false", run_id="plain")
    assert res.returncode == 0, res.stderr[-2000:]
    ahead = ["--set", "dataloader.fetch_ahead=true"]
    first = run(d, *ahead, "--stop-after", "9", run_id="ahead")
    assert first.returncode == 0, first.stderr[-2000:]
    again = run(d, *ahead, run_id="ahead")
    assert again.returncode == 0, again.stderr[-2000:]
    return d / "runs" / "mlp-quick-test" / "plain", d / "runs" / "mlp-quick-test" / "ahead"


def test_resume_with_fetch_ahead_is_bit_identical_to_the_plain_run(runs):
    plain, ahead = runs
    assert json.loads((ahead / "summary.json").read_text())["resumed_from"] == "step_00000009.pt"
    assert [s for s, _ in losses(ahead)] == list(range(1, 13))  # no step skipped or repeated
    assert losses(ahead) == losses(plain)  # the same batches in the same steps, through a stop and a resume: same floats


def test_out_of_memory_split_and_nan_rollback_with_fetch_ahead(runs):
    """Both rebuild the loader mid-run: the batch fetched ahead from the old one must not be used."""
    plain, ahead = runs
    for d in runs:
        log = (d / "train.log").read_text()
        assert "rolled back to step_00000004.pt" in log and "micro-batch 4 x 2 accumulation" in log, d.name
        assert "micro-batch 2 x 4 accumulation" in log, d.name
    assert losses(ahead)[:8] == losses(plain)[:8]  # the same batches after the splits and the rollback, before the stop


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
