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
def straight_dir(tmp_path_factory):
    """The run that meets no fault (trained once for the module): what every survived fault must
    end equal (or close) to."""
    d = tmp_path_factory.mktemp("straight")
    res = train(d)
    assert res.returncode == 0, res.stderr[-2000:]
    return d


@pytest.fixture(scope="module")
def straight(straight_dir):
    return losses(straight_dir)


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


def lrs(tmp_path, run_id="r") -> dict[int, float]:
    rows = [json.loads(line) for line in (folder(tmp_path, run_id) / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["lr"] for r in rows if "lr" in r}


@pytest.fixture(scope="module")
def straight_lr(straight_dir):
    return lrs(straight_dir)


def test_each_nan_rollback_cuts_the_learning_rate_until_max_rollbacks_stops_the_run(tmp_path, straight_lr):
    """nan_lr_factor 0.5: after one rollback the lr is half the schedule's, after two a quarter;
    the third non-finite loss with max_rollbacks 2 stops with the advice (exit 1, status nan)."""
    res = train(tmp_path, "--set", "training.max_rollbacks=2", inject="nan@5,nan@7,nan@9")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "already rolled back 2 time(s) (training.max_rollbacks)" in res.stderr
    s = summary(tmp_path)
    assert s["status"] == "nan" and s["rollbacks"] == 2
    log = (folder(tmp_path) / "train.log").read_text()
    assert "learning rate x0.5 (rollback 1/2)" in log and "learning rate x0.25 (rollback 2/2)" in log
    got = lrs(tmp_path)
    assert got[6] == pytest.approx(0.5 * straight_lr[6], rel=1e-6)  # after the first rollback (to step 4)
    assert got[8] == pytest.approx(0.25 * straight_lr[8], rel=1e-6)  # after the second (to step 6)


def test_a_nan_before_the_first_checkpoint_stops_with_the_advice(tmp_path):
    res = train(tmp_path, inject="nan@1")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "before the first checkpoint: nothing to roll back to" in res.stderr and "training.lr" in res.stderr
    assert summary(tmp_path)["status"] == "nan"
    assert list((folder(tmp_path) / "checkpoints").glob("*")) == []  # no checkpoint written (an empty or absent folder)


def test_schedules_cosine_to_min_lr_and_constant(tmp_path):
    """Cosine from lr to min_lr over max_steps (the standard half-cosine); constant stays at lr;
    warm-up climbs linearly first."""
    import math

    assert train(tmp_path, "--set", "training.lr=0.01", "--set", "training.min_lr=0.002", run_id="cos").returncode == 0
    cos = lrs(tmp_path, "cos")
    for step, lr in cos.items():  # step k (1-based) is trained with the schedule at k-1
        assert lr == pytest.approx(0.002 + 0.5 * (1 + math.cos(math.pi * (step - 1) / 12)) * 0.008, rel=1e-6), step
    assert train(tmp_path, "--set", "training.schedule=constant", "--set", "training.warmup_steps=4", "--set", "training.lr=0.01",
                 run_id="const").returncode == 0
    const = lrs(tmp_path, "const")
    assert [round(const[k], 6) for k in (1, 2, 3, 4)] == [0.0025, 0.005, 0.0075, 0.01]
    assert {round(const[k], 6) for k in range(5, 13)} == {0.01}


def test_a_changed_config_is_not_resumed(tmp_path, straight):
    """An unfinished run is resumed by the same config only: another config starts a new run
    folder (and says why); naming the old folder with another config is refused."""
    assert train(tmp_path, "--stop-after", "4").returncode == 0
    res = envkit("run", TEMPLATE, "--profile", "cpu", *SMALL, "--set", "training.lr=0.001", cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "not resuming r: its config differs" in res.stdout + res.stderr
    runs = sorted(p.name for p in (tmp_path / "runs" / "mlp-quick-test").iterdir())
    assert len(runs) == 2 and summary(tmp_path)["status"] == "stopped"  # r is untouched
    res = train(tmp_path, "--set", "training.lr=0.001")  # --run-id r, another config
    errors = [line for line in res.stderr.splitlines() if line.startswith("envkit:")]
    assert res.returncode == 2 and len(errors) == 1 and "with a different config" in errors[0] and "--resume never" in errors[0]
    res = envkit("run", TEMPLATE, "--profile", "cpu", *SMALL, cwd=tmp_path, timeout=300)  # the same config: r resumes
    assert res.returncode == 0 and "resuming unfinished run r" in res.stdout + res.stderr
    assert summary(tmp_path)["status"] == "completed" and losses(tmp_path)[12] == straight[12]


def test_resume_from_a_named_checkpoint_and_resume_never(tmp_path, straight):
    assert train(tmp_path, "--stop-after", "6").returncode == 0
    early = folder(tmp_path) / "checkpoints" / "step_00000004.pt"
    res = envkit("run", TEMPLATE, "--profile", "cpu", *SMALL, "--resume", str(early), cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "resumed from step_00000004.pt" in (folder(tmp_path) / "train.log").read_text()
    assert summary(tmp_path)["status"] == "completed" and losses(tmp_path)[12] == straight[12]
    res = train(tmp_path, "--resume", "never")  # the folder exists: refused, nothing changed
    errors = [line for line in res.stderr.splitlines() if line.startswith("envkit:")]
    assert res.returncode == 2 and len(errors) == 1 and "run folder" in errors[0] and "exists" in errors[0]
    assert "Traceback" not in res.stderr and summary(tmp_path)["status"] == "completed"
    res = envkit("run", TEMPLATE, "--profile", "cpu", *SMALL, "--resume", str(tmp_path / "nope.pt"), cwd=tmp_path)
    assert res.returncode == 2 and "checkpoint not found" in res.stderr


def test_a_second_device_fault_after_the_switch_to_the_cpu_stops_instead_of_looping(tmp_path):
    res = train(tmp_path, "--set", "device.fallback=cpu", inject="device@6,device@9")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    s = summary(tmp_path)
    assert s["status"] == "failed" and [e["switch"] for e in s["faults"] if e["event"] == "device_switch"] == ["cpu"]


def test_a_missing_operator_with_the_mps_fallback_already_on_is_not_retried(tmp_path):
    res = envkit("run", TEMPLATE, "--run-id", "r", "--profile", "cpu", *SMALL, cwd=tmp_path, timeout=300,
                 env={"ENVKIT_TRAIN_INJECT": "device@6", "PYTORCH_ENABLE_MPS_FALLBACK": "1"})
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert not [e for e in summary(tmp_path)["faults"] if e["event"] == "device_switch"]


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


@pytest.mark.parametrize("kind, name", [("diskfull-metrics", "metrics.jsonl"), ("diskfull-log", "train.log"),
                                        ("diskfull-heartbeat", "heartbeat.json"), ("diskfull-summary", "summary.json")])
def test_disk_full_at_any_write_stops_in_one_line_with_no_half_row(tmp_path, straight, kind, name):
    """The disk fills up as metrics.jsonl, train.log, heartbeat.json or summary.json is written: the
    run stops (status disk_full) in one line naming the file, the last checkpoint kept, no half line
    left (the old trainer died with a chained OSError traceback and left half a row, to which the
    resumed run glued its next one); `envkit run` again finishes the run."""
    at = 12 if kind == "diskfull-summary" else 5
    every_step = ["--set", "logging.progress=plain", "--set", "logging.heartbeat_seconds=0.001"]  # each file written each step
    res = train(tmp_path, *every_step, inject=f"{kind}@{at}")
    assert res.returncode == 1, res.stderr[-2000:]
    errors = [line for line in res.stderr.splitlines() if line.startswith("envkit:")]
    assert len(errors) == 1 and f"no space left on the device while writing {name}" in errors[0], res.stderr
    assert "Traceback" not in res.stderr
    kept = f"step_{at - at % 2:08d}.pt"
    assert f"checkpoint {kept} kept" in errors[0] and (folder(tmp_path) / "checkpoints" / kept).is_file()
    for text in (folder(tmp_path) / "metrics.jsonl").read_text(), (folder(tmp_path) / "train.log").read_text():
        assert text.endswith("\n")
    rows = [json.loads(line) for line in (folder(tmp_path) / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in rows) == at - (kind == "diskfull-metrics")
    expected = None if kind == "diskfull-summary" else "disk_full"
    assert json.loads((folder(tmp_path) / "summary.json").read_text() if expected else "{}").get("status") == expected
    res = train(tmp_path)  # space freed
    assert res.returncode == 0, res.stderr[-2000:]
    rows = [json.loads(line) for line in (folder(tmp_path) / "metrics.jsonl").read_text().splitlines()]  # every line whole
    assert summary(tmp_path)["status"] == "completed" and losses(tmp_path)[12] == straight[12]


def test_a_resumed_run_cuts_off_a_half_row_left_at_the_end_of_metrics(tmp_path, straight):
    """What an older envkit (or a kill mid-write) left: half a row at the end of metrics.jsonl. The
    resumed run cuts it off, says so in train.log, and appends whole rows after it."""
    res = train(tmp_path, "--stop-after", "6")
    assert res.returncode == 0, res.stderr[-2000:]
    metrics = folder(tmp_path) / "metrics.jsonl"
    whole = metrics.read_bytes()
    metrics.write_bytes(whole + b'{"step": 7, "loss": 2.3')
    res = train(tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    text = metrics.read_bytes()
    assert text.startswith(whole)
    rows = [json.loads(line) for line in text.decode().splitlines()]  # the old trainer's row 7 glued to the half: a ValueError
    assert [r["step"] for r in rows if "loss" in r][-6:] == list(range(7, 13))
    assert "the last line of metrics.jsonl was cut off mid-write" in (folder(tmp_path) / "train.log").read_text()
