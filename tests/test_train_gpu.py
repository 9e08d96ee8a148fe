"""The trainer on a real CUDA GPU (skipped without one): bf16 + compile, fused AdamW, MFU reported."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT, envkit, has_cuda

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not has_cuda(), reason="needs CUDA")]


def test_gpt_quick_test_bf16_compile_on_cuda(tmp_path):
    res = envkit("run", str(ROOT / "templates" / "train" / "gpt_quick_test.yaml"), "--run-id", "g",
                 "--set", "device.type=cuda", "--set", "training.precision=bf16", "--set", "training.compile=true",
                 cwd=tmp_path, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    s = json.loads((tmp_path / "runs" / "gpt-quick-test" / "g" / "summary.json").read_text())
    assert s["status"] == "completed" and s["device"] == "cuda" and s["precision"] == "bf16"
    assert s["compile"] == "on", s["compile"]
    assert s["accuracy"] >= 0.5 and s["best_val_loss"] < 0.6 * s["baseline_loss"], s
    assert s["tokens_per_second"] > 0
    if s["device_name"] and any(k in s["device_name"] for k in ("H100", "H200", "A100")):
        assert s["mfu"] is not None and s["mfu"] > 0


def test_exact_resume_on_cuda_fp32(tmp_path):
    """On CUDA the resume restores the same state; losses match closely (cuBLAS may not be bitwise)."""
    args = ["--set", "device.type=cuda", "--set", "training.precision=fp32", "--set", "training.compile=false",
            "--set", "training.max_steps=20", "--set", "logging.every_steps=1", "--set", "eval.every_steps=0"]
    q = str(ROOT / "templates" / "train" / "gpt_quick_test.yaml")
    assert envkit("run", q, "--run-id", "a", *args, cwd=tmp_path).returncode == 0
    assert envkit("run", q, "--run-id", "b", *args, "--stop-after", "10", cwd=tmp_path).returncode == 0
    assert envkit("run", q, "--run-id", "b", *args, cwd=tmp_path).returncode == 0
    d = tmp_path / "runs" / "gpt-quick-test"
    def losses(run: str) -> list[float]:  # training rows only (eval rows carry val_loss)
        rows = [json.loads(x) for x in (d / run / "metrics.jsonl").read_text().splitlines()]
        return [r["loss"] for r in rows if "loss" in r]

    la, lb = losses("a"), losses("b")
    assert len(la) == len(lb) == 20
    assert max(abs(x - y) for x, y in zip(la, lb)) < 1e-4


def test_bench_trainer_small_on_cuda():
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_trainer.py"), "--small", "--steps", "20",
                          "--warmup", "8", "--json"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert out["device"] != "cpu" and out["ratio_envkit_over_plain"] > 0
