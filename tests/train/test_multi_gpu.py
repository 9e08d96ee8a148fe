"""The trainer on two CUDA GPUs (skipped with fewer): DDP and FSDP through torchrun and NCCL, each
checkpoint resumed on one GPU with the same global batch (training.global_batch_size) to the losses
of the run that never stopped, and a deterministic DDP run trained twice to the same floats.
test_processes.py holds the same claims on the CPU (gloo), where they are checked on every run of the
suite.

Tolerance on the GPU: rel 1e-3 (the CPU's is 1e-5). One GPU computes a step over 32 rows where each
of two computed 16, with other kernels for the other shapes, and the cuda profiles' matmul precision
"high" rounds matmul inputs to TF32 (10-bit mantissa): an input a few ulps away may round the other
way. A step of other data moves the loss by about 1e-2 here (measured on the CPU: 0.016 at the first
step), ten times the tolerance."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import ROOT, envkit


def _cuda_devices() -> int:
    try:
        import torch
    except Exception:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_cuda_devices() < 2, reason="needs 2 CUDA GPUs")]

GPT = str(ROOT / "templates" / "train" / "gpt_quick_test.yaml")
# fp32 without compile: the resumed run's other batch shape is not recompiled, and bf16 rounding is left out
BASE = ["--set", "device.type=cuda", "--set", "training.precision=fp32", "--set", "training.compile=false",
        "--set", "training.max_steps=12", "--set", "training.global_batch_size=32", "--set", "eval.every_steps=0",
        "--set", "logging.every_steps=1", "--set", "checkpoint.every_steps=6", "--set", "logging.progress=none"]
TWO = ["--nproc-per-node", "2"]
REL = 1e-3


def _run(project: Path, run_id: str, *args: str):
    res = envkit("run", GPT, *BASE, "--run-id", run_id, *args, cwd=project, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    return project / "runs" / "gpt-quick-test" / run_id


def _rows(run_dir: Path) -> dict[int, dict]:
    """step -> its training row (the last one: a resumed run logs again the steps after its checkpoint)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r for r in rows if "loss" in r}


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def _resumed_on_one_gpu(tmp_path: Path, whole: Path, checkpoint: str) -> Path:
    """A copy of the finished run, trained again from its step-6 checkpoint on one GPU (no
    training.parallel set: it is outside the config hash, and fsdp needs several processes)."""
    copy = tmp_path / "again" / "runs" / "gpt-quick-test" / whole.name
    shutil.copytree(whole, copy)
    return _run(tmp_path / "again", whole.name, "--resume", str(copy / "checkpoints" / checkpoint))


@pytest.mark.parametrize("parallel,checkpoint,moved", [("ddp", "step_00000006.pt", "loaded"),
                                                        ("fsdp", "step_00000006.dcp", "resharded")])
def test_two_gpus_train_and_their_checkpoint_resumes_on_one_with_the_same_losses(tmp_path, parallel, checkpoint, moved):
    whole = _run(tmp_path, parallel, *TWO, "--set", f"training.parallel={parallel}")
    s = _summary(whole)
    assert (s["status"], s["device"], s["world_size"], s["parallel"], s["steps"]) == ("completed", "cuda", 2, parallel, 12), s
    before = _rows(whole)
    assert sorted(before) == list(range(1, 13)) and before[12]["loss"] < before[1]["loss"]  # it learned
    assert "16 x 1 accum x 2 proc" in (whole / "train.log").read_text()

    again = _resumed_on_one_gpu(tmp_path, whole, checkpoint)
    r = _summary(again)
    assert (r["status"], r["world_size"], r["steps"], r["resumed_from"]) == ("completed", 1, 12, checkpoint), r
    log = (again / "train.log").read_text()
    assert (f"checkpoint {checkpoint} was written by 2 processes, resumed on 1: weights and optimizer state {moved}; global batch "
            "32 as before (2 processes x 16, now 1 process x 32): the steps go on as they would have") in log, log
    after = _rows(again)
    for step in range(7, 13):
        assert after[step]["loss"] == pytest.approx(before[step]["loss"], rel=REL), (step, after[step], before[step])


def test_deterministic_ddp_on_two_gpus_gives_the_same_floats_twice(tmp_path):
    """training.deterministic: deterministic kernels, and NCCL's all-reduce of two GPUs sums in one
    order: every logged loss and gradient norm is the same float in both runs."""
    args = [*TWO, "--set", "training.deterministic=true", "--set", "training.max_steps=8"]
    a, b = _run(tmp_path, "a", *args), _run(tmp_path, "b", *args)
    assert _summary(a)["world_size"] == _summary(b)["world_size"] == 2
    kept = ("loss", "grad_norm", "lr")
    rows_a = {s: {k: r.get(k) for k in kept} for s, r in _rows(a).items()}
    rows_b = {s: {k: r.get(k) for k in kept} for s, r in _rows(b).items()}
    assert sorted(rows_a) == list(range(1, 9))
    assert rows_a == rows_b


def test_ddp_after_the_backward_with_cuda_graphs_trains_to_the_losses_of_ddps_overlap(tmp_path):
    """training.ddp_reduce after_backward, compiled with CUDA graphs (reduce-overhead), against DDP's
    overlapped all-reduce (compiled without them): the same losses within the GPU tolerance, and each
    run's line says which it used."""
    args = [*TWO, "--set", "training.compile=true", "--set", "training.compile_mode=reduce-overhead", "--set", "training.max_steps=8"]
    after = _run(tmp_path, "after", *args, "--set", "training.ddp_reduce=after_backward")
    overlap = _run(tmp_path, "overlap", *args, "--set", "training.ddp_reduce=overlap")
    assert "gradients all-reduced after the backward" in (after / "train.log").read_text()
    assert "no CUDA graphs with 2 processes" in (overlap / "train.log").read_text()
    a, b = _rows(after), _rows(overlap)
    assert sorted(a) == sorted(b) == list(range(1, 9))
    for step in a:
        assert a[step]["loss"] == pytest.approx(b[step]["loss"], rel=REL), step

