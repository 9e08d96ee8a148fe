"""training.parallel fsdp for real on the CPU: two gloo processes through torchrun shard the quick-test
GPT with FSDP2 and train it to the losses DDP trains it to; a sharded checkpoint (a step_*.dcp
folder written by torch.distributed.checkpoint) survives SIGKILL exactly, detects a damaged shard,
and resumes on one process as a DDP checkpoint does. Bad combinations are one line before anything
starts.

Tolerance: an fsdp step reduce-scatters each gradient shard (a + b) where DDP all-reduces whole
buckets (a + b): with two processes the same two fp32 numbers are added, so the losses agree to the
six decimals metrics.jsonl keeps (measured: identical over 20 steps; gradient norms differ in the
7th significant digit, from the norm summed over shards). rel 1e-5 leaves room for a different
summation order in another torch while still failing on any real difference (a wrong shard, a
missed gradient reduction, a step of the wrong data changes the 3rd digit).

A run through torchrun costs three Python processes' start-up (torchrun and two ranks, several seconds
each on 2 cores): the fsdp and ddp runs the tests start from are trained once for the module
(stopped at step 12 of 16, so they are also the interrupted runs a one-process resume continues);
the ddp one is also what test_two_processes_through_torchrun_on_cpu reads (DDP through torchrun).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from train_runs import close, losses, summary
from conftest import ROOT, envkit, share_of_cores
from envkit.runfolder.owner import owner_lock_state
from processes import alive, wait_for

GPT = str(ROOT / "templates" / "train" / "gpt_quick_test.yaml")
BASE = ["--profile", "cpu", "--set", "training.max_steps=16", "--set", "training.batch_size=16", "--set", "eval.every_steps=0",
        "--set", "logging.every_steps=1",
        "--set", "checkpoint.every_steps=4", "--set", "logging.progress=none"]
TWO = ["--nproc-per-node", "2"]
REL = 1e-5


def _run(tmp_path, run_id, *args, timeout=600, env=None):
    res = envkit("run", GPT, *BASE, "--run-id", run_id, *args, cwd=tmp_path, timeout=timeout, env=env)
    return res


def _dir(tmp_path, run_id) -> Path:
    return tmp_path / "runs" / "gpt-quick-test" / run_id


def _popen(tmp_path, run_id, *args, env=None):
    full = {k: v for k, v in os.environ.items() if not k.startswith(("PYTORCH_", "ENVKIT_"))}
    full.update(PYTHONUNBUFFERED="1", **(env or {}))
    share_of_cores(full)
    return subprocess.Popen([sys.executable, "-m", "envkit", "run", GPT, *BASE, "--run-id", run_id, *args], cwd=tmp_path, env=full,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


STOP = ["--stop-after", "12"]


# the profile's threads, split by envkit: not a value the test runner exported (share_of_cores)
PROFILE_THREADS = {"OMP_NUM_THREADS": None}
AC = ["--set", "training.activation_checkpointing=full"]


@pytest.fixture(scope="module")
def two_process_runs(tmp_path_factory):
    """A project with two runs of two processes each, stopped at step 12 (checkpoints 8 and 12): "fsdp"
    (training.parallel fsdp) and "ddp" (auto, which chooses ddp here, with activation checkpointing,
    which recomputes the same activations): (the project folder, the ddp command's result). Read by
    the tests; the one that resumes them copies them."""
    d = tmp_path_factory.mktemp("two")
    ddp = _run(d, "ddp", *TWO, *STOP, *AC, env=PROFILE_THREADS)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    fsdp = _run(d, "fsdp", *TWO, *STOP, "--set", "training.parallel=fsdp")
    assert fsdp.returncode == 0, fsdp.stderr[-3000:]
    return d, ddp


def test_two_processes_through_torchrun_on_cpu(tmp_path, two_process_runs):
    """--nproc-per-node 2 goes through torchrun and DDP (gloo on the CPU): both ranks train one model.
    Then training.ddp_reduce after_backward (no DDP module: one bucketed all-reduce after the backward)
    trains to the same losses, with training.ddp_bucket_mb regrouping the all-reduce into many buckets,
    not changing its sums (two ranks: a + b either way); training.ddp_comm_dtype bf16 needs NCCL: on
    gloo it says so in one line and trains in fp32."""
    project, res = two_process_runs
    d = _dir(project, "ddp")
    s = summary(d)
    assert s["status"] == "stopped" and s["world_size"] == 2 and s["steps"] == 12
    steps = losses(d)
    assert steps[12] < steps[1]  # it learned
    assert "16 x 1 accum x 2 proc" in (d / "train.log").read_text()
    # only envkit's lines: no torchrun banner about OMP_NUM_THREADS, no barrier() device warning
    out = res.stdout + res.stderr
    assert "OMP_NUM_THREADS" not in out and "barrier()" not in out and "UserWarning" not in out, out[-3000:]
    # the profile's OMP_NUM_THREADS is for the whole machine: each of the 2 processes gets half
    env_doc = json.loads((d / "environment.json").read_text())
    machine_threads = int(env_doc["profile_env"]["OMP_NUM_THREADS"])
    assert env_doc["environ"]["OMP_NUM_THREADS"] == str(max(1, machine_threads // 2))

    assert "gradients all-reduced overlapping the backward (DDP)" in (d / "train.log").read_text()  # auto on the CPU

    res = _run(tmp_path, "small", *TWO, *STOP, *AC, "--set", "training.ddp_bucket_mb=0.05", "--set", "training.ddp_comm_dtype=bf16",
               "--set", "training.ddp_reduce=after_backward", env=PROFILE_THREADS)
    assert res.returncode == 0, res.stderr[-3000:]
    small = _dir(tmp_path, "small")
    assert losses(small) == steps
    log = (small / "train.log").read_text()
    assert "training.ddp_comm_dtype bf16 ignored on cpu: gloo all-reduces fp32" in log
    assert "gradients all-reduced after the backward (training.ddp_reduce, as set)" in log
    assert summary(small)["derived"]["training.ddp_reduce"] == "after_backward"


def test_fsdp_trains_like_ddp_and_a_sigkilled_run_resumes_exactly(tmp_path, two_process_runs):
    project = two_process_runs[0]
    # auto on two CPU processes: the 0.4M-parameter model fits, so ddp, said with the numbers
    log = (_dir(project, "ddp") / "train.log").read_text()
    assert "training.parallel: ddp (auto: weights + gradients + adamw state" in log and "fit one device" in log, log

    d = _dir(project, "fsdp")
    # a 0.4M-parameter model with room to spare: one unit, the whole model (sharding.fsdp_plan)
    plan = next(line for line in (d / "train.log").read_text().splitlines() if "training.parallel: fsdp" in line)
    assert ("training.parallel: fsdp (as set): the root only (one unit) over 2 processes; one unit, the whole "
            "model (0.23M parameters, at most 500M): gathered weights and full gradients with the sharded state take") in plan, plan
    s = summary(d)
    assert s["status"] == "stopped" and s["steps"] == 12 and s["parallel"] == "fsdp" and s["world_size"] == 2
    a, b = losses(_dir(project, "ddp")), losses(d)
    assert sorted(a) == sorted(b) == list(range(1, 13))
    close(a, b, range(1, 13), REL)
    assert b[12] < b[1]  # it learned
    # the checkpoints are folders of shards, each process's file, DCP's index and envkit's fields
    ckpts = sorted(p.name for p in (d / "checkpoints").iterdir())
    assert ckpts == ["step_00000008.dcp", "step_00000012.dcp"], ckpts  # the template's keep_last: 2, folders pruned like files
    assert {".metadata", "__0_0.distcp", "__1_0.distcp", "envkit.pt"} <= {p.name for p in (d / "checkpoints" / ckpts[-1]).iterdir()}

    # SIGKILL of envkit run between checkpoints (a slowed step makes "between" certain), then run again
    killed = _popen(tmp_path, "killed", *TWO, *STOP, "--set", "training.parallel=fsdp", env={"ENVKIT_TRAIN_INJECT": "sleep=0.3"})
    k = _dir(tmp_path, "killed")
    try:
        assert wait_for(lambda: (k / "checkpoints" / "step_00000004.dcp").is_dir() and max(losses(k) or {0: 0}) >= 6, seconds=300)
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=60)
    finally:
        if killed.poll() is None:
            killed.kill()
    beat = json.loads((k / "heartbeat.json").read_text())
    assert wait_for(lambda: not alive(beat["pid"]), seconds=120), "the trainer outlived envkit run"
    # every rank (and torchrun) gone: the folder's owner lock is free again, held by no orphan
    assert wait_for(lambda: owner_lock_state(k) == "free", seconds=120), "a process of the killed run still holds its folder"
    status = summary(k)["status"] if (k / "summary.json").exists() else None
    assert status != "completed"
    again = _run(tmp_path, "killed", *TWO, *STOP, "--set", "training.parallel=fsdp")
    assert again.returncode == 0, again.stderr[-3000:]
    resumed = summary(k)
    # the orphaned trainer checkpoints at its next step and stops (train/run/parent_watch.py): any step from 4 on
    assert resumed["status"] == "stopped" and resumed["steps"] == 12 and resumed["resumed_from"].endswith(".dcp"), resumed
    assert losses(k) == b  # exact: the same floats as the run never stopped


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_sharded_checkpoint_resumes_on_one_process_as_a_ddp_one_does(tmp_path, two_process_runs):
    """The 2-process runs stopped at step 12; each newest checkpoint is damaged (one byte of one fsdp
    shard, one byte of the ddp file), so both resume from step 8, on one process: the same weights,
    optimizer state and data position make the same losses. Their batch_size is per process, so the
    step's global batch halves, and the log says so (test_processes.py resumes with the same one)."""
    shutil.copytree(two_process_runs[0] / "runs", tmp_path / "runs")  # a copy: the other test reads the stopped runs
    _flip_a_byte(_dir(tmp_path, "fsdp") / "checkpoints" / "step_00000012.dcp" / "__1_0.distcp")
    _flip_a_byte(_dir(tmp_path, "ddp") / "checkpoints" / "step_00000012.pt")

    for run_id in ("fsdp", "ddp"):
        res = _run(tmp_path, run_id)  # one process: training.parallel auto (no --set: the config hash is the same)
        assert res.returncode == 0, res.stderr[-3000:]
    f, g = _dir(tmp_path, "fsdp"), _dir(tmp_path, "ddp")
    log = (f / "train.log").read_text()
    assert "skipping corrupt checkpoint step_00000012.dcp" in log and "__1_0.distcp: checksum mismatch" in log, log
    # batch_size is per process: one process trains half the global batch, said in one line with the way to resume exactly
    said = [line for line in log.splitlines() if "checkpoint step_00000008.dcp was written by 2 processes, resumed on 1" in line]
    assert len(said) == 1 and said[0].endswith(
        "weights and optimizer state resharded; global batch 32 (2 processes x 16), now 16 (1 process x 16): the data position "
        "is kept, the losses will not match an uninterrupted run; to resume exactly: --nproc-per-node 2 (a run with "
        "training.global_batch_size keeps its global batch at any process count)"), said
    assert summary(f)["resumed_from"] == "step_00000008.dcp" and summary(g)["resumed_from"] == "step_00000008.pt"
    assert summary(f)["world_size"] == 1 and summary(f)["status"] == "completed" and summary(f)["steps"] == 16
    close(losses(f), losses(g), range(9, 17), REL)


@pytest.mark.parametrize("template,args,words", [
    ("gpt_quick_test", [], "training.parallel fsdp shards over several processes, and this run starts one"),
    ("mlp_quick_test", ["--nproc-per-node", "2"], "model.type mlp has no sharding plan"),
])
def test_fsdp_that_cannot_run_is_one_line_before_anything_starts(tmp_path, template, args, words):
    res = envkit("run", str(ROOT / "templates" / "train" / f"{template}.yaml"), "--profile", "cpu", "--run-id", "bad",
                 "--set", "training.parallel=fsdp", *args, cwd=tmp_path, timeout=120)
    assert res.returncode == 2, res.stderr[-2000:]
    errors = [line for line in res.stderr.splitlines() if line.startswith("envkit: error")]
    assert len(errors) == 1 and words in errors[0] and "--set training.parallel" in errors[0], res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "runs").exists()


def test_auto_shards_when_the_state_would_not_fit_one_device(monkeypatch):
    """auto: ddp while weights + gradients + optimizer state take at most half the free memory,
    fsdp past it (the reason names the bytes); a model without a sharding plan stays ddp, and says why."""
    import torch

    from envkit.train.run import sharding
    from envkit.train.run.models import GPT

    model = GPT(vocab_size=512, block_size=16, n_layer=2, n_head=2, n_embd=32)
    weights = sum(p.numel() * 4 for p in model.parameters())
    from envkit.config.schema import Training

    adamw = Training(optimizer="adamw", momentum=0.9)
    assert sharding.state_bytes(model, adamw) == 4 * weights  # weights, gradients, two AdamW moments
    assert sharding.state_bytes(model, Training(optimizer="sgd", momentum=0.0)) == 2 * weights
    cpu = torch.device("cpu")
    for free, want in ((10 * weights, "ddp"), (7 * weights, "fsdp")):
        monkeypatch.setattr(sharding, "free_bytes", lambda device, n, free=free: free)
        mode, why = sharding.choose("auto", world=2, device=cpu, model=model, model_type="gpt", training=adamw, local_world=2)
        assert mode == want, why
        assert why.startswith("auto: weights + gradients + adamw state") and "free" in why
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 64))
    monkeypatch.setattr(sharding, "free_bytes", lambda device, n: 1)  # nothing fits: still ddp, for want of a plan
    mode, why = sharding.choose("auto", world=2, device=cpu, model=mlp, model_type="mlp", training=adamw, local_world=2)
    assert mode == "ddp" and "no sharding plan" in why
    assert sharding.choose("auto", world=1, device=cpu, model=model, model_type="gpt", training=adamw, local_world=1)[0] == "single"


def test_cuda_graphs_are_left_out_with_several_processes_and_said():
    from envkit.train.run.speed import compile_mode_for

    assert compile_mode_for("reduce-overhead", 1) == ("reduce-overhead", None)  # one GPU: the profile's measured mode
    mode, line = compile_mode_for("reduce-overhead", 2)
    assert mode == "default" and "no CUDA graphs with 2 processes" in line
    assert compile_mode_for("max-autotune", 4)[0] == "max-autotune-no-cudagraphs"
    assert compile_mode_for("max-autotune-no-cudagraphs", 2) == ("max-autotune-no-cudagraphs", None)


def test_ddp_reduce_auto_keeps_cuda_graphs_for_small_gradients_and_hides_large_ones_behind_the_backward():
    """training.ddp_reduce auto: after the backward (CUDA graphs kept) where the compiled mode has CUDA graphs
    and the gradients are small (ResNet-18's 45 MB), DDP's overlap for GPT-2 small's 496 MB and wherever
    no CUDA graphs are at stake; each choice says why, and a set value wins. compile_mode_for keeps the
    graphs when nothing communicates between them."""
    from envkit.train.run.distributed import ddp_reduce_for
    from envkit.train.run.speed import compile_mode_for

    mb = 2**20
    mode, why = ddp_reduce_for("auto", "cuda", True, "reduce-overhead", 45 * mb)
    assert mode == "after_backward" and "keeps its CUDA graphs" in why and "45 MB of gradients" in why
    mode, why = ddp_reduce_for("auto", "cuda", True, "reduce-overhead", 496 * mb)
    assert mode == "overlap" and "496 MB of gradients, over 128 MB" in why
    assert ddp_reduce_for("auto", "cuda", True, "default", 45 * mb)[0] == "overlap"  # no CUDA graphs to keep
    assert ddp_reduce_for("auto", "cuda", False, "reduce-overhead", 45 * mb)[0] == "overlap"  # not compiled
    assert ddp_reduce_for("auto", "cpu", True, "reduce-overhead", 45 * mb)[0] == "overlap"
    assert ddp_reduce_for("after_backward", "cpu", False, "default", 496 * mb) == (
        "after_backward", "gradients all-reduced after the backward (training.ddp_reduce, as set)")
    assert compile_mode_for("reduce-overhead", 2, between_graphs=False) == ("reduce-overhead", None)


def test_fsdp_plan_is_one_unit_for_a_small_model_that_fits_and_units_by_memory_otherwise(monkeypatch):
    """sharding.fsdp_plan: the whole model one unit while its gathered weights and full gradients fit
    (GPT-2 small on 2 x H100: 0.99 and 0.92 of DDP in two leases against 0.61 in 3 units,
    benchmarks/RESULTS.md); past that, units of at least UNIT_MIN_PARAMS, with the weights kept
    gathered from forward to backward while they fit and resharded when they do not."""
    from envkit.train.run import sharding
    from envkit.train.run.models import GPT
    from envkit.config.schema import Training

    model = GPT(vocab_size=512, block_size=16, n_layer=2, n_head=2, n_embd=32)
    n = sum(p.numel() for p in model.parameters())
    adamw = Training(optimizer="adamw", momentum=0.9)
    sharded = 16 * n // 2  # fp32 weights, gradients and two moments over 2 processes
    whole = n * (2 * 2 + 4) + sharded  # bf16 weights and gradients, fp32 gradients for the reduction
    kept = 2 * n + sharded
    unit, reshard, why = sharding.fsdp_plan(model, adamw, "bf16", 2, free=2 * whole)
    assert (unit, reshard) == (-1, False) and why.startswith("one unit, the whole model"), why
    unit, reshard, why = sharding.fsdp_plan(model, adamw, "bf16", 2, free=2 * whole - 2)  # the whole model no longer fits
    assert (unit, reshard) == (sharding.UNIT_MIN_PARAMS, False) and "weights kept gathered" in why, why
    unit, reshard, why = sharding.fsdp_plan(model, adamw, "bf16", 2, free=2 * kept - 2)
    assert (unit, reshard) == (sharding.UNIT_MIN_PARAMS, True) and "resharded after the forward" in why, why
    assert sharding.fsdp_plan(model, adamw, "bf16", 2, free=None)[:2] == (sharding.UNIT_MIN_PARAMS, True)
    monkeypatch.setattr(sharding, "WHOLE_MAX_PARAMS", n - 1)  # a model past the size: units, however much is free
    unit, reshard, why = sharding.fsdp_plan(model, adamw, "bf16", 2, free=100 * whole)
    assert (unit, reshard) == (sharding.UNIT_MIN_PARAMS, False) and "over" in why, why


def test_the_last_unit_keeps_its_weights_gathered_after_the_forward(tmp_path):
    """apply_fsdp: units reshard after their forward as asked, except the last, whose backward comes
    next (a unit's parameters stay DTensors while resharded, plain tensors while gathered)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    from envkit.train.run import sharding
    from envkit.train.run.models import GPT

    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        for reshard, want in ((True, [True, True, False]), (False, [False, False, False])):
            torch.manual_seed(0)
            model = GPT(vocab_size=64, block_size=16, n_layer=3, n_head=2, n_embd=32)
            said = sharding.apply_fsdp(model, list(model.blocks), torch.device("cpu"), "fp32", 1, reshard_after_forward=reshard,
                                       min_unit_params=0)
            assert said.startswith("3 units of 1 block + root"), said
            model(torch.randint(64, (2, 16)))
            assert [isinstance(next(b.parameters()), DTensor) for b in model.blocks] == want
        model = GPT(vocab_size=64, block_size=16, n_layer=3, n_head=2, n_embd=32)
        said = sharding.apply_fsdp(model, list(model.blocks), torch.device("cpu"), "fp32", 1, min_unit_params=-1)
        assert said.startswith("the root only (one unit)"), said
    finally:
        dist.destroy_process_group()
