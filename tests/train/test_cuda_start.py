"""CUDA's start on a thread (envkit/train/run/cuda_start.py) where the run may use CUDA, and only there;
on a machine without a driver it ends quietly and the run trains as before. On a GPU:
tests/train/test_train_gpu.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT, has_cuda


def started_for(device_type: str, **environ: str) -> str:
    """What begin_for(device_type) did in a fresh process with `environ`: none, or the thread's outcome."""
    code = ("import os, sys\n"
            "from envkit.train.run import cuda_start\n"
            f"t = cuda_start.begin_for({device_type!r})\n"
            "cuda_start.wait()\n"
            "print('none' if t is None else ('error: ' + t.error if t.error else 'started'), os.environ.get('CUDA_MODULE_LOADING'))\n"
            "print('torch' if 'torch' in sys.modules else 'no torch')\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **environ}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout


@pytest.mark.parametrize("device_type", ["cpu", "mps"])
def test_a_run_that_cannot_use_cuda_starts_nothing(device_type):
    assert started_for(device_type).splitlines()[0] == "none None"


def test_a_run_moved_to_the_cpu_after_a_device_fault_starts_nothing():
    assert started_for("auto", ENVKIT_TRAIN_DEVICE="cpu").splitlines()[0] == "none None"


@pytest.mark.skipif(has_cuda() or not sys.platform.startswith("linux"), reason="a machine without a CUDA driver")
@pytest.mark.parametrize("device_type", ["auto", "cuda"])
def test_without_a_driver_the_thread_ends_quietly_and_imports_no_torch(device_type):
    first, second = started_for(device_type).splitlines()
    assert first.startswith("error: no CUDA driver") and first.endswith(" LAZY"), first
    assert second == "no torch"  # it runs while the trainer imports torch: it must not import it itself


def test_a_lazy_loading_choice_the_user_made_is_kept():
    out = started_for("cuda", CUDA_MODULE_LOADING="EAGER").splitlines()[0]
    assert out.endswith(" EAGER"), out
