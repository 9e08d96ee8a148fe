"""The trainer on a real CUDA GPU (skipped without one): bf16 + compile, fused AdamW, MFU reported."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from conftest import ROOT, envkit, has_cuda
from envkit.resources import load_toml

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not has_cuda(), reason="needs CUDA")]


def compiled_as(run_dir) -> str:
    """What summary.json says of compile for the mode the run's config (its profile) asked for, and
    the scope the run decided (compile_scope auto: per block without CUDA graphs)."""
    mode = json.loads((run_dir / "config.json").read_text())["values"]["training"]["compile_mode"]
    scope = json.loads((run_dir / "summary.json").read_text())["derived"]["training.compile_scope"]
    on = "on" if mode == "default" else f"on ({mode})"
    return {"model": on, "blocks": f"{on}, per block (2 blocks, one compile) and the head with the loss"}[scope]


@pytest.mark.parametrize("scope", ["model", "blocks"])
def test_a_second_run_on_another_machine_compiles_nothing(tmp_path, scope):
    """The compile cache: a second run with envkit's cache kept and Inductor's and Triton's fresh (a
    new machine that got envkit's cache) loads it and compiles no graph (torch's counters)."""
    args = ["--set", "device.type=cuda", "--set", "training.compile=true", "--set", f"training.compile_scope={scope}",
            "--set", "training.max_steps=5", "--set", "eval.every_steps=0", "--set", "checkpoint.every_steps=0"]
    stats, outs = {}, {}
    for run_id in ("a", "b"):
        env = {"ENVKIT_CACHE_DIR": str(tmp_path / "cache"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / run_id / "inductor"),
               "TRITON_CACHE_DIR": str(tmp_path / run_id / "triton")}
        res = envkit("run", str(ROOT / "templates" / "train" / "gpt_quick_test.yaml"), "--run-id", run_id, *args,
                     cwd=tmp_path, env=env, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
        s = json.loads((tmp_path / "runs" / "gpt-quick-test" / run_id / "summary.json").read_text())
        stats[run_id], outs[run_id] = s["compile_stats"], res.stdout + res.stderr
        assert s["derived"]["training.compile_scope"] == scope
    assert stats["a"]["fxgraph_cache_miss"] > 0 and "compile cache: saved gpt-" in outs["a"], (stats, outs["a"][-2000:])
    assert "compile cache: loaded gpt-" in outs["b"], outs["b"][-2000:]
    assert stats["b"]["fxgraph_cache_miss"] == 0 and stats["b"]["autograd_cache_miss"] == 0, stats
    assert stats["b"]["fxgraph_cache_hit"] > 0, stats


def test_gpt_quick_test_bf16_compile_on_cuda(tmp_path):
    res = envkit("run", str(ROOT / "templates" / "train" / "gpt_quick_test.yaml"), "--run-id", "g",
                 "--set", "device.type=cuda", "--set", "training.precision=bf16", "--set", "training.compile=true",
                 cwd=tmp_path, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    s = json.loads((tmp_path / "runs" / "gpt-quick-test" / "g" / "summary.json").read_text())
    assert s["status"] == "completed" and s["device"] == "cuda" and s["precision"] == "bf16"
    assert s["compile"] == compiled_as(tmp_path / "runs" / "gpt-quick-test" / "g"), s["compile"]  # cuda-hopper: reduce-overhead
    assert s["accuracy"] >= 0.5 and s["best_val_loss"] < 0.6 * s["baseline_loss"], s
    assert s["tokens_per_second"] > 0
    # MFU on a device envkit/data/peaks.toml lists (every `match` word in the name, as a word), n/a on any other
    listed = [p["name"] for p in load_toml(ROOT / "envkit" / "data" / "peaks.toml")["peak"]
              if all(re.search(rf"(?<!\w){re.escape(w)}(?!\w)", s["device_name"] or "", re.I) for w in p["match"])]
    assert (s["mfu"] is not None and s["mfu"] > 0) is bool(listed), (s["device_name"], listed, s["mfu"])


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


def test_bench_trainer_smoke_on_cuda():
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_trainer.py"), "--smoke", "--json"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert out["device"] != "cpu"
    (row,) = out["runs"]
    assert row["ratio"] > 0 and row["envkit"]["tokens_per_second"] > 0 and row["compile"] is True


def test_tokens_folder_with_compiled_loss_and_a_profile_on_cuda(tmp_path):
    """The tokens type on the GPU, forward + loss compiled, and a trace that holds CUDA kernels."""
    np = pytest.importorskip("numpy")
    data = tmp_path / "data"
    data.mkdir()
    rng = np.random.default_rng(0)
    for name in ("train.bin", "val.bin"):
        (np.cumsum(np.where(rng.random(50_000) < 0.02, 3, 7)) % 61).astype(np.uint16).tofile(data / name)
    (data / "meta.json").write_text('{"vocab_size": 64}')
    (tmp_path / "t.yaml").write_text(
        "experiment: {name: tok}\ndataset: {type: tokens, path: data}\n"
        "model: {type: gpt, n_layer: 2, n_head: 2, n_embd: 64, block_size: 64}\n"
        "training: {max_steps: 60, batch_size: 16, lr: 0.01, warmup_steps: 5, compile: true, precision: bf16}\n"
        "eval: {every_steps: 60}\nlogging: {every_steps: 10}\ndevice: {type: cuda}\n")
    res = envkit("run", str(tmp_path / "t.yaml"), "--run-id", "g", "--profile-steps", "30:31", cwd=tmp_path, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    d = tmp_path / "runs" / "tok" / "g"
    s = json.loads((d / "summary.json").read_text())
    assert s["status"] == "completed" and s["compile"] == compiled_as(d) and s["best_val_loss"] < 0.5 * s["baseline_loss"], s
    trace = json.loads((d / "profile_steps_30-31.json").read_text())
    assert any(e.get("cat") == "kernel" for e in trace["traceEvents"])


def test_profile_steps_on_cuda_writes_the_device_timeline(tmp_path):
    q = str(ROOT / "templates" / "train" / "gpt_quick_test.yaml")
    res = envkit("run", q, "--run-id", "p", "--set", "device.type=cuda", "--set", "training.max_steps=12",
                 "--set", "eval.every_steps=0", "--profile-steps", "8:10", cwd=tmp_path, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    text = (tmp_path / "runs" / "gpt-quick-test" / "p" / "profile_steps_8-10.txt").read_text()
    assert text.startswith("device timeline: ") and "ms a step" in text
    assert "matmul" in text and "kernels that took the most time:" in text


def test_the_gpt_is_initialised_on_the_gpu_the_same_way_each_run(tmp_path):
    """models.build_model_for: on CUDA the GPT's weights are drawn on the GPU (seconds saved at start),
    and the same seed gives the same weights, so two runs train to the same losses."""
    losses = {}
    for run_id in ("a", "b"):
        res = envkit("run", str(ROOT / "templates" / "train" / "gpt_quick_test.yaml"), "--run-id", run_id, "--set", "device.type=cuda",
                     "--set", "training.compile=false", "--set", "training.deterministic=true",
                     "--set", "training.max_steps=6", "--set", "logging.every_steps=1",
                     "--set", "eval.every_steps=0", "--set", "checkpoint.every_steps=0", cwd=tmp_path, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
        assert "initialised there" in res.stdout + res.stderr, (res.stdout + res.stderr)[-2000:]
        rows = (tmp_path / "runs" / "gpt-quick-test" / run_id / "metrics.jsonl").read_text().splitlines()
        losses[run_id] = [json.loads(r)["loss"] for r in rows if '"loss"' in r]
    assert len(losses["a"]) == 6 and losses["a"] == losses["b"], losses

