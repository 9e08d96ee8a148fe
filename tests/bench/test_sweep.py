"""`envkit sweep` on this CPU as a user runs it: a narrow ResNet-18 on a small CIFAR-10 binary folder
with a learnable signal (tests/cifar_fixture.py), optimizer {adamw, lion} x seed {0, 1}.

One story, in order: interrupted (Ctrl-C during the first run: it checkpoints, no other starts, the
sweep exits 130 naming the runs left), resumed (the interrupted run continues from its checkpoint,
the others start, all complete above chance accuracy, the table printed), and run again (nothing
retrains; the table and --json come back from the run folders)."""

from __future__ import annotations

import json
from pathlib import Path

from cifar_fixture import write_cifar10
from conftest import envkit

CHANCE = 0.1  # ten balanced classes

SWEEP_YAML = """\
experiment: {name: sw, output_dir: runs, seed: 0}
dataset: {type: cifar10, path: data/cifar-10-batches-bin}
model: {type: resnet18, width: 4, stem: imagenet}   # ResNet-18's layout at 1/16 of the width: CI-sized
training: {max_steps: 16, batch_size: 16, lr: 3.0e-3, warmup_steps: 1, compile: false}
eval: {every_steps: 0, batches: 4}
checkpoint: {every_steps: 8}
logging: {every_steps: 8, device_seconds: 0}
device: {type: cpu}
sweep:
  grid:
    training.optimizer: [adamw, lion]
    experiment.seed: [0, 1]
"""
RUN_IDS = ["optimizer-adamw_seed-0", "optimizer-adamw_seed-1", "optimizer-lion_seed-0", "optimizer-lion_seed-1"]


def sweep(tmp_path, *args, env=None):
    return envkit("sweep", "train.yaml", "--profile", "cpu", *args, cwd=tmp_path, timeout=600, env=env)


def _ctrl_c_during_the_first_run(tmp_path) -> tuple[int, str]:
    """`envkit sweep` in a terminal, Ctrl-C to its process group (the sweep and its run) once the
    first run has logged its first step (this sweep logs every step). Each step sleeps a quarter of
    a second in this sweep only (ENVKIT_TRAIN_INJECT): the run is still training when the signal
    lands, on a fast or a slow machine."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import default_sigint, share_of_cores

    env = share_of_cores({k: v for k, v in os.environ.items() if not k.startswith(("PYTORCH_", "ENVKIT_"))})
    env["ENVKIT_TRAIN_INJECT"] = "sleep=0.25"
    proc = subprocess.Popen([sys.executable, "-m", "envkit", "sweep", "train.yaml", "--profile", "cpu", "--set", "logging.every_steps=1"],
                            cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=default_sigint)
    metrics = tmp_path / "runs" / "sw" / RUN_IDS[0] / "metrics.jsonl"

    def training() -> bool:  # the run's loop has logged a step: its Ctrl-C handling is in place
        try:
            return '"loss"' in metrics.read_text()
        except OSError:
            return False

    try:
        deadline = time.monotonic() + 300
        while not training() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out + err


def test_sweep_interrupted_resumed_and_shown_again(tmp_path, monkeypatch):
    write_cifar10(tmp_path / "data", per_file=60, test=100)  # 300 training images
    (tmp_path / "train.yaml").write_text(SWEEP_YAML)
    exp = tmp_path / "runs" / "sw"

    code, out = _ctrl_c_during_the_first_run(tmp_path)
    assert code == 130, out[-3000:]  # so `envkit sweep && next` stops
    assert (f"sweep interrupted: 4 of 4 runs left ({', '.join(RUN_IDS)}); `envkit sweep` again resumes them" in out), out[-3000:]
    s = json.loads((exp / RUN_IDS[0] / "summary.json").read_text())
    assert (s["status"], s["signal"]) == ("interrupted", "SIGINT") and 1 <= s["steps"] < 16, s
    assert (exp / RUN_IDS[0] / "checkpoints" / f"step_{s['steps']:08d}.pt").is_file()
    assert sorted(p.name for p in exp.iterdir()) == RUN_IDS[:1]  # no other run started after the Ctrl-C

    # two at once: each run's console goes to its console.log. With no OMP_NUM_THREADS exported, the sweep
    # gives each CPU run half of the profile's threads (one per core): two runs of the profile's thread per
    # core each took eight times as long per step on 2 cores.
    whole = int(json.loads(envkit("profile", "show", "cpu", "--resolved", "--json").stdout)["env"]["OMP_NUM_THREADS"]["value"])
    second = sweep(tmp_path, "--parallel", "2", env={"OMP_NUM_THREADS": None})
    assert second.returncode == 0, second.stdout + second.stderr
    share = str(max(1, whole // 2))
    assert second.stdout.count(f"({share} CPU thread") == len(RUN_IDS), second.stdout
    for rid in RUN_IDS:
        assert json.loads((exp / rid / "environment.json").read_text())["environ"]["OMP_NUM_THREADS"] == share, rid
        s = json.loads((exp / rid / "summary.json").read_text())
        assert s["status"] == "completed" and s["steps"] == 16
        assert bool(s["resumed_from"]) is (rid == RUN_IDS[0]), rid  # the interrupted one continued, not started over
        assert s["accuracy"] > CHANCE + 0.1, (rid, s["accuracy"])
        cfg = json.loads((exp / rid / "config.json").read_text())["values"]
        assert cfg["training"]["optimizer"] == rid.split("_")[0].split("-")[1]
        assert cfg["experiment"]["seed"] == int(rid[-1])
    assert all((exp / rid / "console.log").is_file() for rid in RUN_IDS)
    from envkit.runfolder.seal import verify

    monkeypatch.delenv("ENVKIT_CACHE_DIR", raising=False)  # the machine key the sweep's processes used (envkit() drops ENVKIT_*)
    assert [verify(exp / rid).results for rid in RUN_IDS] == [True] * 4  # each run's results sealed as it ended
    table = second.stdout
    assert "mean ± std" in table and "optimizer=adamw" in table and "optimizer=lion" in table and "2/2" in table

    logs_before = {rid: (exp / rid / "train.log").read_text() for rid in RUN_IDS}
    third = sweep(tmp_path, "--json", "--plot", "curves.png")
    assert third.returncode == 0, third.stderr
    assert {rid: (exp / rid / "train.log").read_text() for rid in RUN_IDS} == logs_before  # nothing retrained
    assert third.stderr.count("skip") == 4
    out = json.loads(third.stdout)
    assert [Path(r["run_dir"]).name for r in out["runs"]] == RUN_IDS
    for r in out["runs"]:
        assert set(r) >= {"overrides", "run_dir", "status", "best_val_loss", "accuracy"} and r["status"] == "completed"
        s = json.loads((Path(r["run_dir"]) / "summary.json").read_text())
        assert r["best_val_loss"] == s["best_val_loss"]
    adamw = [r for r in out["runs"] if r["overrides"]["training.optimizer"] == "adamw"]
    group = next(g for g in out["groups"] if g["group"] == "optimizer=adamw")
    accs = [r["accuracy"] for r in adamw]
    assert group["accuracy_mean"] == sum(accs) / 2
    assert abs(group["accuracy_std"] - abs(accs[0] - accs[1]) / 2 ** 0.5) < 1e-9  # sample std of two values
    assert (tmp_path / "curves.png").stat().st_size > 1000


def test_bad_grid_is_one_line_exit_2(tmp_path):
    (tmp_path / "train.yaml").write_text("model: {type: mlp}\ndataset: {type: synthetic, task: teacher}\n"
                                         "sweep:\n  grid:\n    training.optimiser: [adamw, lion]\n")
    res = sweep(tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "optimiser" in res.stderr and "did you mean 'optimizer'" in res.stderr
    (tmp_path / "train.yaml").write_text("model: {type: mlp}\ndataset: {type: synthetic, task: teacher}\n"
                                         "sweep:\n  grid:\n    training.optimizer: [adamw, rmsprop]\n")
    res = sweep(tmp_path)
    assert res.returncode == 2 and "sweep.grid.training.optimizer" in res.stderr and "rmsprop" in res.stderr


def test_a_grid_device_this_machine_lacks_stops_before_any_run(tmp_path):
    """The base config trains on the CPU, but one combination asks for CUDA (there is none here):
    the sweep stops before its first run, in one line naming the grid, the run and the doctor
    check, instead of training the CPU runs and failing the CUDA one at its turn."""
    (tmp_path / "train.yaml").write_text("model: {type: mlp}\ndataset: {type: synthetic, task: teacher}\n"
                                         "training: {max_steps: 2}\ndevice: {type: cpu}\n"
                                         "sweep:\n  grid:\n    device.type: [cpu, cuda]\n")
    res = sweep(tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    line = res.stderr.strip().splitlines()[-1]
    assert "sweep.grid" in line and "type-cuda" in line and "doctor check 'cuda'" in line, line
    assert not (tmp_path / "runs").exists()


def test_linked_keys_make_one_run_per_entry_not_a_cross_product(tmp_path):
    from envkit.plan.grid import expand

    combos = expand({"recipe": [{"training.optimizer": "sgd", "training.lr": 0.1},
                                {"training.optimizer": "lion", "training.lr": 3e-4}],
                     "experiment.seed": [0, 1, 2]}, "train.yaml")
    assert len(combos) == 6
    assert combos[0].overrides == {"training.optimizer": "sgd", "training.lr": 0.1, "experiment.seed": 0}
    assert combos[3].group == "optimizer=lion, lr=0.0003"
