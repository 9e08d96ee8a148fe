"""Faults the trainer survives on its own, each raised for real on the CPU through the injection
hook (ENVKIT_TRAIN_INJECT, envkit/train/recovery/faults.py), each ending in the promised state with
nothing lost: `envkit run` in a subprocess as a user would, a tiny MLP, a dozen steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT, envkit
from envkit.train.run import checkpoint as ckpt

TEMPLATE = str(ROOT / "templates" / "train" / "mlp_quick_test.yaml")
SMALL = ["--set", "training.max_steps=12", "--set", "training.batch_size=8", "--set", "training.warmup_steps=0",
         "--set", "dataset.num_samples=2000", "--set", "model.hidden=32", "--set", "eval.every_steps=0",
         "--set", "checkpoint.every_steps=2", "--set", "checkpoint.keep_last=3", "--set", "logging.every_steps=1",
         "--set", "logging.progress=none"]


def train(tmp_path, *args, run_id="r", inject=None):
    env = {"ENVKIT_TRAIN_INJECT": inject} if inject else None
    return envkit("run", TEMPLATE, "--run-id", run_id, "--profile", "cpu", *SMALL, *args, cwd=tmp_path, env=env, timeout=300)


def folder(tmp_path, run_id="r") -> Path:
    return tmp_path / "runs" / "mlp-quick-test" / run_id


def summary(tmp_path, run_id="r") -> dict:
    return json.loads((folder(tmp_path, run_id) / "summary.json").read_text())


def losses(tmp_path, run_id="r") -> dict[int, float]:
    rows = [json.loads(line) for line in (folder(tmp_path, run_id) / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """The run that meets no fault: what every survived fault must end equal (or close) to."""
    d = tmp_path_factory.mktemp("straight")
    res = train(d)
    assert res.returncode == 0, res.stderr[-2000:]
    return losses(d)


def test_out_of_memory_splits_the_micro_batch_and_continues(tmp_path, straight):
    res = train(tmp_path, inject="oom@3,oom@7")
    assert res.returncode == 0, res.stderr[-2000:]
    s = summary(tmp_path)
    assert s["status"] == "completed" and s["steps"] == 12
    assert (s["micro_batch"], s["grad_accum"]) == (2, 4)  # 8x1 -> 4x2 -> 2x4: the effective batch stays 8
    ooms = [e for e in s["faults"] if e["event"] == "oom"]
    assert [(e["step"], e["micro_batch"]) for e in ooms] == [(3, 4), (7, 2)]
    rows = [json.loads(x) for x in (folder(tmp_path) / "metrics.jsonl").read_text().splitlines()]
    assert [r["micro_batch"] for r in rows if r.get("event") == "oom"] == [4, 2]
    log = (folder(tmp_path) / "train.log").read_text()
    assert "out of memory at step 3 with micro-batch 8" in log and "effective batch 8 unchanged" in log
    got = losses(tmp_path)
    assert sorted(got) == list(range(1, 13))  # no step skipped or repeated
    # the same examples in the same steps: only the order of the float sums differs
    assert all(abs(got[k] - straight[k]) <= 1e-4 * max(1.0, abs(straight[k])) for k in straight), (got, straight)


def test_oom_above_n_is_a_device_that_holds_n_samples(tmp_path, straight):
    """ENVKIT_TRAIN_INJECT=oom-above=3: every step with a micro-batch above 3 runs out of memory, so
    the trainer splits 8 -> 4 -> 2 at the first step (largest divisor each time) and then trains
    2 x 4 with the same losses as the straight run."""
    res = train(tmp_path, inject="oom-above=3")
    assert res.returncode == 0, res.stderr[-2000:]
    s = summary(tmp_path)
    assert s["status"] == "completed" and s["steps"] == 12 and (s["micro_batch"], s["grad_accum"]) == (2, 4)
    ooms = [e for e in s["faults"] if e["event"] == "oom"]
    assert [(e["step"], e["micro_batch_before"], e["micro_batch"]) for e in ooms] == [(1, 8, 4), (1, 4, 2)]
    assert "Tried to allocate" in ooms[0]["error"] and "oom-above=3" in ooms[0]["error"]
    got = losses(tmp_path)
    assert all(abs(got[k] - straight[k]) <= 1e-4 * max(1.0, abs(straight[k])) for k in straight), (got, straight)


def test_out_of_memory_at_micro_batch_one_stops_with_the_advice(tmp_path):
    res = train(tmp_path, "--set", "training.batch_size=1", inject="oom@2")
    assert res.returncode == 1
    assert "ran out of memory" in res.stderr and "training.grad_accum" in res.stderr and "Traceback" not in res.stderr
    assert summary(tmp_path)["status"] == "failed"


def test_nan_rolls_back_and_completes(tmp_path):
    res = train(tmp_path, inject="nan@5")
    assert res.returncode == 0, res.stderr[-2000:]
    s = summary(tmp_path)
    assert s["status"] == "completed" and s["steps"] == 12 and s["rollbacks"] == 1
    assert "rolled back to step_00000004.pt" in (folder(tmp_path) / "train.log").read_text()


@pytest.mark.parametrize("policy, switch", [("cpu", "cpu"), ("auto", "mps-fallback")])
def test_device_fault_restarts_from_the_last_checkpoint(tmp_path, straight, policy, switch):
    res = train(tmp_path, "--set", f"device.fallback={policy}", inject="device@6")
    assert res.returncode == 0, res.stderr[-2000:]
    s = summary(tmp_path)
    assert s["status"] == "completed" and s["steps"] == 12 and s["resumed_from"] == "step_00000004.pt"
    [event] = [e for e in s["faults"] if e["event"] == "device_switch"]
    assert event["switch"] == switch and event["step"] == 5 and "not currently implemented for the MPS device" in event["error"]
    assert "restarting from the last checkpoint" in res.stderr
    environ_line = "PYTORCH_ENABLE_MPS_FALLBACK=1" if switch == "mps-fallback" else "on the CPU"
    assert environ_line in (folder(tmp_path) / "train.log").read_text()
    assert losses(tmp_path)[12] == straight[12]  # on the CPU a resumed run is bit for bit the straight one


def test_device_fault_with_fallback_none_stops_with_the_advice(tmp_path):
    res = train(tmp_path, "--set", "device.fallback=none", inject="device@6")
    assert res.returncode == 1 and "PYTORCH_ENABLE_MPS_FALLBACK=1" in res.stderr and "Traceback" not in res.stderr
    assert summary(tmp_path)["status"] == "failed" and not [e for e in summary(tmp_path)["faults"] if e["event"] == "device_switch"]


def test_corrupt_checkpoints_are_named_and_skipped(tmp_path, straight):
    assert train(tmp_path, "--stop-after", "6").returncode == 0
    ck = folder(tmp_path) / "checkpoints"
    newest, middle = ck / "step_00000006.pt", ck / "step_00000004.pt"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # truncated
    raw = bytearray(middle.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # one bit flipped, the size unchanged
    middle.write_bytes(bytes(raw))
    with pytest.raises(ckpt.CorruptCheckpoint, match="checksum mismatch"):
        ckpt.load(middle)
    res = train(tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    log = (folder(tmp_path) / "train.log").read_text()
    assert "skipping corrupt checkpoint" in log and "step_00000006.pt" in log and "step_00000004.pt (in " in log and "CorruptCheckpoint" in log
    s = summary(tmp_path)
    assert s["status"] == "completed" and s["resumed_from"] == "step_00000002.pt"
    assert losses(tmp_path)[12] == straight[12]


def test_disk_full_while_checkpointing_keeps_the_previous_one(tmp_path, straight):
    res = train(tmp_path, inject="diskfull@4")
    assert res.returncode == 1  # training failed (the child exits 3: stopped)
    errors = [line for line in res.stderr.splitlines() if line.startswith("envkit:")]
    assert len(errors) == 1 and "no space left on the device while writing checkpoint step_00000004.pt" in errors[0], res.stderr
    assert "previous checkpoint step_00000002.pt kept" in errors[0] and "Traceback" not in res.stderr
    ck = folder(tmp_path) / "checkpoints"
    assert sorted(p.name for p in ck.iterdir()) == ["step_00000002.pt"]  # no partial file, no temporary file
    assert summary(tmp_path)["status"] == "disk_full"
    res = train(tmp_path)  # space freed: the run resumes and nothing is lost
    assert res.returncode == 0, res.stderr[-2000:]
    assert summary(tmp_path)["status"] == "completed" and losses(tmp_path)[12] == straight[12]


REAL_OOM = ["--set", "training.max_steps=3", "--set", "training.batch_size=1048576", "--set", "dataset.num_samples=1048576",
            "--set", "model.hidden=8192", "--set", "model.depth=4", "--set", "training.precision=fp32",
            "--set", "training.compile=false", "--set", "eval.every_steps=0", "--set", "checkpoint.every_steps=0",
            "--set", "logging.every_steps=1", "--set", "logging.progress=none"]


@pytest.mark.gpu
def test_a_real_cuda_out_of_memory_is_survived(tmp_path):
    """A micro-batch of 2^20 examples through a 4 x 8192 MLP needs ~256 GB of activations: the
    trainer must split it until it fits (on an 80 GB H100: 2^18), and complete."""
    from conftest import has_cuda

    if not has_cuda():
        pytest.skip("no CUDA device")
    res = envkit("run", TEMPLATE, "--run-id", "r", "--set", "device.type=cuda", *REAL_OOM, cwd=tmp_path, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    s = summary(tmp_path)
    assert s["status"] == "completed" and s["steps"] == 3 and s["micro_batch"] < 1048576
    assert s["micro_batch"] * s["grad_accum"] == 1048576 and any(e["event"] == "oom" for e in s["faults"])
