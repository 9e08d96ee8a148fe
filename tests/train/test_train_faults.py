"""Faults the trainer survives on its own, each raised for real on the CPU through the injection
hook (ENVKIT_TRAIN_INJECT, envkit/train/recovery/injection.py), each ending in the promised state with
nothing lost: `envkit run` in a subprocess as a user would, a tiny MLP, a dozen steps.

Each `envkit run` costs about 3 s of start-up (torch and torch._dynamo imported), most of these
tests' time: the runs several tests start alike are trained once per module (the straight run, a
run stopped at step 6) and each test resumes its own copy."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from conftest import ROOT, envkit
from envkit.train.run import checkpointer as ckpt

TEMPLATE = str(ROOT / "templates" / "train" / "mlp_quick_test.yaml")
SMALL = ["--set", "training.max_steps=12", "--set", "training.batch_size=8", "--set", "training.warmup_steps=0",
         "--set", "dataset.num_samples=2000", "--set", "model.hidden=32", "--set", "eval.every_steps=0",
         "--set", "checkpoint.every_steps=2", "--set", "checkpoint.keep_last=3", "--set", "logging.every_steps=1",
         "--set", "logging.progress=none", "--set", "training.min_lr=0.0006"]  # min_lr: not the default (lr/10)


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


@pytest.fixture(scope="module")
def stopped_dir(tmp_path_factory):
    """A project folder whose run r was stopped at step 6 (checkpoints 2, 4 and 6), trained once for
    the module: each test that resumes it works on its own copy (copy_of)."""
    d = tmp_path_factory.mktemp("stopped")
    res = train(d, "--stop-after", "6")
    assert res.returncode == 0, res.stderr[-2000:]
    assert sorted(p.name for p in (folder(d) / "checkpoints").iterdir()) == ["step_00000002.pt", "step_00000004.pt", "step_00000006.pt"]
    return d


def copy_of(stopped_dir: Path, tmp_path: Path) -> Path:
    """The stopped project's runs/ in this test's folder (a project moved to another folder resumes there)."""
    shutil.copytree(stopped_dir / "runs", tmp_path / "runs")
    return tmp_path


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


# Out of memory at micro-batch 1 (nothing left to split) stops with the advice: tested with a model
# that runs out of memory, and the same command then resuming, in test_train_run.py.


def test_device_fault_restarts_from_the_last_checkpoint(tmp_path, straight):
    """device.fallback auto, a missing MPS operator: the child restarts itself with the CPU fallback
    on, from the last checkpoint, and completes the run."""
    res = train(tmp_path, "--set", "device.fallback=auto", inject="device@6")
    assert res.returncode == 0, res.stderr[-2000:]
    s = summary(tmp_path)
    assert s["status"] == "completed" and s["steps"] == 12 and s["resumed_from"] == "step_00000004.pt"
    [event] = [e for e in s["faults"] if e["event"] == "device_switch"]
    assert event["switch"] == "mps-fallback" and event["step"] == 5 and "not currently implemented for the MPS device" in event["error"]
    assert "restarting from the last checkpoint" in res.stderr
    assert "PYTORCH_ENABLE_MPS_FALLBACK=1" in (folder(tmp_path) / "train.log").read_text()
    assert losses(tmp_path)[12] == straight[12]  # on the CPU a resumed run is bit for bit the straight one


def test_device_fault_with_fallback_cpu_restarts_on_the_cpu_and_a_second_fault_there_stops(tmp_path, straight):
    """device.fallback cpu: the first fault (step 6) restarts the child on the CPU from the last
    checkpoint, which trains on exactly as the straight run; a second fault there (step 9) stops
    instead of restarting again (no loop)."""
    res = train(tmp_path, "--set", "device.fallback=cpu", inject="device@6,device@9")
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "restarting from the last checkpoint" in res.stderr
    s = summary(tmp_path)
    assert s["status"] == "failed" and s["resumed_from"] == "step_00000004.pt"
    [event] = [e for e in s["faults"] if e["event"] == "device_switch"]
    assert event["switch"] == "cpu" and event["step"] == 5 and "not currently implemented for the MPS device" in event["error"]
    assert "on the CPU" in (folder(tmp_path) / "train.log").read_text()
    got = losses(tmp_path)
    assert [got[k] for k in (5, 6, 7, 8)] == [straight[k] for k in (5, 6, 7, 8)]  # restarted on the CPU: bit for bit


def test_device_fault_with_fallback_none_stops_with_the_advice(tmp_path):
    res = train(tmp_path, "--set", "device.fallback=none", inject="device@6")
    assert res.returncode == 1 and "PYTORCH_ENABLE_MPS_FALLBACK=1" in res.stderr and "Traceback" not in res.stderr
    assert summary(tmp_path)["status"] == "failed" and not [e for e in summary(tmp_path)["faults"] if e["event"] == "device_switch"]


def test_corrupt_checkpoints_are_named_and_skipped(tmp_path, straight, stopped_dir):
    copy_of(stopped_dir, tmp_path)
    ck = folder(tmp_path) / "checkpoints"
    newest, middle = ck / "step_00000006.pt", ck / "step_00000004.pt"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # truncated
    raw = bytearray(middle.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # one bit flipped, the size unchanged
    middle.write_bytes(bytes(raw))
    with pytest.raises(ckpt.CorruptCheckpoint, match="checksum mismatch"):
        ckpt.read(middle)
    res = train(tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    log = (folder(tmp_path) / "train.log").read_text()
    assert "skipping corrupt checkpoint" in log and "step_00000006.pt" in log and "step_00000004.pt (in " in log and "CorruptCheckpoint" in log
    s = summary(tmp_path)
    assert s["status"] == "completed" and s["resumed_from"] == "step_00000002.pt"
    assert losses(tmp_path)[12] == straight[12]


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


# Another config than SMALL's: a constant lr 0.01 after 4 warm-up steps (no min_lr: a constant schedule has none).
CONSTANT = ["--set", "training.schedule=constant", "--set", "training.warmup_steps=4", "--set", "training.lr=0.01",
            "--set", "training.min_lr=null"]


@pytest.fixture(scope="module")
def beside_stopped(tmp_path_factory, stopped_dir):
    """A copy of the stopped project where `envkit run` (no --run-id) was started with another config
    (CONSTANT): (the project folder, that command's result, its run folder). Trained once for two
    tests: it must start a run of its own (test_a_changed_config_is_not_resumed), and its learning
    rates follow the constant schedule (test_schedules_cosine_to_min_lr_and_constant)."""
    d = copy_of(stopped_dir, tmp_path_factory.mktemp("beside"))
    res = envkit("run", TEMPLATE, "--profile", "cpu", *SMALL, *CONSTANT, cwd=d, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    (other,) = [p for p in (d / "runs" / "mlp-quick-test").iterdir() if p.name != "r"]
    return d, res, other


def test_schedules_cosine_to_min_lr_and_constant(straight_lr, beside_stopped):
    """Cosine from lr to min_lr over max_steps (the standard half-cosine); constant stays at lr;
    warm-up climbs linearly first. (The straight run: SMALL's lr 0.003 to min_lr 0.0006, no warm-up.)"""
    import math

    for step, lr in straight_lr.items():  # step k (1-based) is trained with the schedule at k-1
        assert lr == pytest.approx(0.0006 + 0.5 * (1 + math.cos(math.pi * (step - 1) / 12)) * 0.0024, rel=1e-6), step
    assert sorted(straight_lr) == list(range(1, 13))
    project, _, other = beside_stopped
    const = lrs(project, other.name)
    assert [round(const[k], 6) for k in (1, 2, 3, 4)] == [0.0025, 0.005, 0.0075, 0.01]
    assert {round(const[k], 6) for k in range(5, 13)} == {0.01}


def test_a_changed_config_is_not_resumed(straight, beside_stopped):
    """An unfinished run is resumed by the same config only: another config starts a new run
    folder (and says why); naming the old folder with another config is refused."""
    tmp_path, res, _ = beside_stopped  # r stopped at step 6, then `envkit run` with CONSTANT
    assert "not resuming r: its config differs" in res.stdout + res.stderr
    runs = sorted(p.name for p in (tmp_path / "runs" / "mlp-quick-test").iterdir())
    assert len(runs) == 2 and summary(tmp_path)["status"] == "stopped" and summary(tmp_path)["steps"] == 6  # r is untouched
    res = train(tmp_path, *CONSTANT)  # --run-id r, another config
    errors = [line for line in res.stderr.splitlines() if line.startswith("envkit:")]
    assert res.returncode == 2 and len(errors) == 1 and "with a different config" in errors[0] and "--resume never" in errors[0]
    res = envkit("run", TEMPLATE, "--profile", "cpu", *SMALL, cwd=tmp_path, timeout=300)  # the same config: r resumes
    assert res.returncode == 0 and "resuming unfinished run r" in res.stdout + res.stderr
    assert summary(tmp_path)["status"] == "completed" and losses(tmp_path)[12] == straight[12]


def test_resume_from_a_named_checkpoint_and_resume_never(tmp_path, straight, stopped_dir):
    copy_of(stopped_dir, tmp_path)
    early = folder(tmp_path) / "checkpoints" / "step_00000004.pt"
    res = envkit("run", TEMPLATE, "--profile", "cpu", *SMALL, "--resume", str(early), cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "resumed from step_00000004.pt" in (folder(tmp_path) / "train.log").read_text()
    assert summary(tmp_path)["status"] == "completed" and losses(tmp_path)[12] == straight[12]
    # steps 5 and 6, logged by the stopped attempt and again after the resume from step 4: plot,
    # monitor, sweep and reproduce read each step once, with the values of the attempt that counts
    from envkit.runfolder.find import read_metrics

    rows = [r for r in read_metrics(folder(tmp_path)) if "loss" in r]
    assert [r["step"] for r in rows] == list(range(1, 13))
    assert {r["step"]: r["loss"] for r in rows} == straight
    res = train(tmp_path, "--resume", "never")  # the folder exists: refused, nothing changed
    errors = [line for line in res.stderr.splitlines() if line.startswith("envkit:")]
    assert res.returncode == 2 and len(errors) == 1 and "run folder" in errors[0] and "exists" in errors[0]
    assert "Traceback" not in res.stderr and summary(tmp_path)["status"] == "completed"
    res = envkit("run", TEMPLATE, "--profile", "cpu", *SMALL, "--resume", str(tmp_path / "nope.pt"), cwd=tmp_path)
    assert res.returncode == 2 and "checkpoint not found" in res.stderr


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


# The disk fills up as each of the run's files is written, one after another in one run folder: each
# `envkit run` resumes the run the last one stopped and meets the next fault (each fires once per
# folder). (fault, the file it names, its step: the step of the checkpoint kept is the even one below)
DISK_FULL = [("diskfull-metrics", "metrics.jsonl", 3), ("diskfull", "checkpoint step_00000004.pt", 4), ("diskfull-log", "train.log", 5),
             ("diskfull-heartbeat", "heartbeat.json", 7), ("diskfull-summary", "summary.json", 12)]


def test_disk_full_at_any_write_stops_in_one_line_with_no_half_row(tmp_path, straight):
    """The disk fills up as a checkpoint, metrics.jsonl, train.log, heartbeat.json or summary.json is
    written: the run stops (status disk_full) in one line naming the file, the last checkpoint kept,
    no half line and no partial file left (the old trainer died with a chained OSError traceback and
    left half a row, to which the resumed run glued its next one); `envkit run` again goes on, and the
    run ends as the straight one did."""
    every_step = ["--set", "logging.progress=plain", "--set", "logging.heartbeat_seconds=0.001"]  # each file written each step
    inject = ",".join(f"{kind}@{at}" for kind, _, at in DISK_FULL)
    run_dir = folder(tmp_path)
    for kind, name, at in DISK_FULL:
        summary_before = (run_dir / "summary.json").read_bytes() if (run_dir / "summary.json").exists() else None
        res = train(tmp_path, *every_step, inject=inject)
        assert res.returncode == 1, (kind, res.stderr[-2000:])  # training failed (the child exits 3: stopped)
        errors = [line for line in res.stderr.splitlines() if line.startswith("envkit:")]
        assert len(errors) == 1 and f"no space left on the device while writing {name}" in errors[0], (kind, res.stderr)
        assert "Traceback" not in res.stderr
        kept = f"step_{at - at % 2 if kind != 'diskfull' else at - 2:08d}.pt"
        assert f"checkpoint {kept} kept" in errors[0] and (run_dir / "checkpoints" / kept).is_file(), (kind, errors[0])
        names = [p.name for p in (run_dir / "checkpoints").iterdir()]
        assert all(re.fullmatch(r"step_\d{8}\.pt", n) and n <= kept for n in names), (kind, names)  # no partial file, no temporary file
        for text in (run_dir / "metrics.jsonl").read_text(), (run_dir / "train.log").read_text():
            assert text.endswith("\n"), kind
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]  # every line whole
        assert max(r["step"] for r in rows if "step" in r) == at - (kind == "diskfull-metrics"), kind
        summary_after = (run_dir / "summary.json").read_bytes()
        assert json.loads(summary_after)["status"] == "disk_full", kind
        # this run's own summary; but where summary.json itself could not be written, the one before, whole (not half of one)
        assert (summary_after == summary_before) == (kind == "diskfull-summary"), kind
    res = train(tmp_path)  # space freed
    assert res.returncode == 0, res.stderr[-2000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]  # every line whole
    assert summary(tmp_path)["status"] == "completed" and losses(tmp_path)[12] == straight[12]


def test_a_resumed_run_cuts_off_a_half_row_left_at_the_end_of_metrics(tmp_path, stopped_dir):
    """What an older envkit (or a kill mid-write) left: half a row at the end of metrics.jsonl. The
    resumed run cuts it off, says so in train.log, and appends whole rows after it."""
    copy_of(stopped_dir, tmp_path)
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


def test_the_fault_hook_is_absent_unless_the_variable_is_set_and_a_bad_spec_is_one_line():
    """A user's run builds no injector at all (the loop's `if inject:` is all it runs of the hook);
    a test's spec is parsed once, up front, and a bad one is refused naming the variable and the fix."""
    from envkit.errors import EnvkitError
    from envkit.train.recovery import injection

    assert injection.from_env({}) is None and injection.from_env({"ENVKIT_TRAIN_INJECT": " "}) is None
    hook = injection.from_env({"ENVKIT_TRAIN_INJECT": "oom@5, nan@8,oom-above=16,sleep=0.05,diskfull@start"})
    assert hook is not None
    assert (hook.planned, hook.oom_above, hook.sleep, hook.at_start) == ((("oom", 5), ("nan", 8)), 16, 0.05, True)
    with pytest.raises(EnvkitError) as bad:
        injection.from_env({"ENVKIT_TRAIN_INJECT": "boom@3"})
    assert bad.value.where == "ENVKIT_TRAIN_INJECT" and "KIND@STEP" in (bad.value.fix or "")
