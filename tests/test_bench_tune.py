"""`envkit bench` and `envkit tune` as a user runs them, on this CPU machine (tiny model, few steps);
the CUDA ladder on a GPU (marked gpu, skipped without one)."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import envkit, has_cuda, snapshot_path
from envkit.tune.writer import render_profile, write_profile, written_by_envkit
from envkit.tune.decide import Decision
from envkit.errors import EnvkitError

FAST = ("--model", "mlp", "--steps", "2")


def test_bench_on_cpu_runs_cpu_rungs_skips_device_rungs_saves_and_plots(tmp_path):
    out, png = tmp_path / "ladder.json", tmp_path / "ladder.png"
    res = envkit("bench", *FAST, "--no-compile", "--json", "--output", str(out), "--plot", str(png), cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    data = json.loads(res.stdout)
    assert data["device"] == "cpu" and data["model"] == "mlp"
    rungs = {r["name"]: r for r in data["rungs"]}
    base = rungs["cpu fp32"]
    assert base["status"] == "ok" and base["per_second"] > 0 and base["speedup"] == 1.0 and math.isfinite(base["loss"])
    assert set(base) >= {"name", "status", "per_second", "speedup", "peak_memory_mb", "loss", "reason"}
    prof = rungs["cpu + profile"]
    assert prof["status"] in ("ok", "flagged") and prof["loss"] == pytest.approx(base["loss"], rel=1e-3)  # same steps, same seed
    assert rungs["cpu + compile"]["status"] == "skip" and "--no-compile" in rungs["cpu + compile"]["reason"]
    cuda = [r for r in data["rungs"] if r["name"].startswith("cuda")]
    assert len(cuda) == 5 and all(r["status"] == "skip" and r["check"] == "cuda" and r["reason"] for r in cuda)
    assert json.loads(out.read_text())["rungs"] == data["rungs"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_plain_output_names_the_doctor_check(tmp_path):
    res = envkit("bench", *FAST, "--no-compile", "--output", str(tmp_path / "b.json"), cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "[ok] cpu fp32:" in res.stdout and "(doctor check 'cuda')" in res.stdout
    assert "[skip] cuda fp32:" in res.stdout


def test_bench_refuses_a_device_this_machine_lacks(tmp_path):
    if has_cuda():
        pytest.skip("this machine has CUDA")
    res = envkit("bench", *FAST, "--device", "cuda", cwd=tmp_path, timeout=120)
    assert res.returncode == 2 and "doctor check 'cuda'" in res.stderr and "Traceback" not in res.stderr


def test_tune_writes_a_profile_that_doctor_names_and_run_uses(tmp_path):
    cfg = tmp_path / "config"
    env = {"ENVKIT_CONFIG_DIR": str(cfg)}
    res = envkit("tune", "--budget", "25s", *FAST, "--json", env=env, cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:] + res.stdout[-2000:]
    out = json.loads(res.stdout)
    assert out["profile"] == "cpu-tuned" and Path(out["path"]) == cfg / "profiles" / "cpu-tuned.toml"
    assert out["settings"] and all(s["reason"].startswith(("measured:", "keeps")) for s in out["settings"])
    assert written_by_envkit(Path(out["path"]))
    text = Path(out["path"]).read_text()
    assert 'extends = "cpu"' in text and "torch 2" in text  # the source names envkit, torch and the machine
    doc = json.loads(envkit("doctor", "--json", "--no-runtime", env=env, cwd=tmp_path).stdout)
    assert doc["profile"] == "cpu-tuned"
    replay = json.loads(envkit("doctor", "--json", "--replay", str(snapshot_path("linux_no_gpu")), env=env, cwd=tmp_path).stdout)
    assert replay["profile"] == "cpu"  # a recorded machine is another machine
    assert envkit("init", "train.yaml", "--template", "mlp_quick_test", env=env, cwd=tmp_path).returncode == 0
    shown = envkit("run", "train.yaml", "--print-config", env=env, cwd=tmp_path)
    assert "profile: cpu-tuned" in shown.stdout, shown.stdout + shown.stderr
    other = envkit("run", "train.yaml", "--print-config", "--profile", "cpu", env=env, cwd=tmp_path)
    assert "(profile: cpu)" in other.stdout and "cpu-tuned" not in other.stdout  # --profile still chooses another
    listed = envkit("profile", "show", "cpu-tuned", "--resolved", env=env, cwd=tmp_path)
    assert listed.returncode == 0 and "measured:" in listed.stdout


def test_tune_never_writes_over_a_file_the_user_wrote_or_edited(tmp_path):
    path = tmp_path / "cpu-tuned.toml"
    text = render_profile("cpu-tuned", "cpu", [Decision("train", "batch_size", 32, "measured: 2 vs 1", True)], "measured: test", "2.13.0", "d")
    write_profile(path, text)  # a new file
    write_profile(path, text)  # its own file: rewritten
    path.write_text(path.read_text() + "\n# my note\n")
    edited = path.read_text()
    with pytest.raises(EnvkitError) as e:
        write_profile(path, text)
    assert str(path) in e.value.one_line() and path.read_text() == edited
    path.write_text('extends = "cpu"\n')
    with pytest.raises(EnvkitError):
        write_profile(path, text)
    assert path.read_text() == 'extends = "cpu"\n'


def test_ctrl_c_writes_the_best_so_far_or_nothing_never_half_a_file(tmp_path):
    cfg = tmp_path / "config"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTORCH_", "ENVKIT_"))}
    env.update(ENVKIT_CONFIG_DIR=str(cfg), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "envkit", "tune", "--budget", "5m", *FAST], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    deadline = time.monotonic() + 240
    for line in proc.stdout:  # wait for two measurements: the shipped one and a first candidate
        seen.append(line)
        if sum(" ok " in ln or " fail " in ln for ln in seen) >= 2 or time.monotonic() > deadline:
            break
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, "".join(seen) + rest
    path = cfg / "profiles" / "cpu-tuned.toml"
    if path.exists():
        assert written_by_envkit(path)
        assert "wrote profile cpu-tuned (interrupted" in rest
    assert not list((cfg / "profiles").glob(".*.tmp")) if (cfg / "profiles").exists() else True


@pytest.mark.gpu
@pytest.mark.skipif(not has_cuda(), reason="needs CUDA")
def test_cuda_ladder_runs_every_rung(tmp_path):
    res = envkit("bench", "--model", "gpt", "--json", "--output", str(tmp_path / "b.json"), cwd=tmp_path, timeout=900)
    data = json.loads(res.stdout)
    rungs = {r["name"]: r for r in data["rungs"]}
    assert data["device"] == "cuda"
    for name in ("cuda fp32", "cuda + bf16", "cuda + compile", "cuda + profile", "cuda + fused AdamW"):
        assert rungs[name]["status"] in ("ok", "flagged"), rungs[name]
        assert rungs[name]["peak_memory_mb"] > 0
    assert rungs["cuda + bf16"]["speedup"] > 1
