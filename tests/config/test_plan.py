"""One way to start a run (envkit/plan/): a combination a run cannot start with is refused in the
same one line (exit 2) whichever command met it, `envkit run` here, `envkit run --slurm` or a
sweep's combination, before anything is written; and planning imports no torch."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, envkit, snapshot_path

TEMPLATE = ROOT / "templates" / "train" / "mlp_quick_test.yaml"
GRID = "\nsweep:\n  grid:\n    training.lr: [0.1, 0.01]\n"


def config(tmp_path: Path, *training: str) -> Path:
    """The quick MLP with these `key: value` lines in its training section (in place of the
    template's own), and a grid over the rate."""
    data = yaml.safe_load(TEMPLATE.read_text())
    for line in training:
        key, _, value = line.partition(": ")
        data["training"][key] = value
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False) + GRID)
    return path


# (the config's own lines, the extra options of each command, the words of the refusal): the
# profile `base` leaves training.batch_size auto to the probe (cpu.toml fixes a number).
BAD = {
    "batch-auto-on-2-nodes": (["batch_size: auto"], ["--profile", "base"],
                              ("c.yaml: training.batch_size: training.batch_size auto is decided per machine; "
                               "with 2 nodes every node needs the same number")),
    "fsdp-without-a-sharding-plan": (["parallel: fsdp"], [],
                                     "c.yaml: training.parallel: model.type mlp has no sharding plan for training.parallel fsdp"),
}
PATHS = {
    "run": ["run", "--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:29533"],
    "run --nproc-per-node": ["run", "--nproc-per-node", "2"],
    "run --slurm --dry-run": ["run", "--slurm", "--nodes", "2", "--dry-run"],
    "sweep --slurm --dry-run": ["sweep", "--slurm", "--nodes", "2", "--dry-run"],
}
WHICH = {"batch-auto-on-2-nodes": ["run", "run --slurm --dry-run", "sweep --slurm --dry-run"],
         "fsdp-without-a-sharding-plan": ["run --nproc-per-node", "run --slurm --dry-run", "sweep --slurm --dry-run"]}


@pytest.mark.parametrize("bad", list(BAD))
def test_one_bad_combination_is_the_same_one_line_through_run_slurm_and_sweep(tmp_path, bad):
    lines, extra, words = BAD[bad]
    cfg = config(tmp_path, *lines)
    said, stderr = {}, {}
    for path in WHICH[bad]:
        command = PATHS[path]
        r = envkit(command[0], cfg.name, *command[1:], *extra, cwd=tmp_path, timeout=120)
        said[path] = (r.returncode, [line for line in r.stderr.splitlines() if line.startswith("envkit: error:")])
        stderr[path] = r.stderr
    first = said[WHICH[bad][0]]
    assert first[0] == 2 and len(first[1]) == 1 and first[1][0].startswith(f"envkit: error: {words}"), stderr
    assert said == {path: first for path in WHICH[bad]}, stderr
    assert {path: len(text.strip().splitlines()) for path, text in stderr.items()} == {path: 1 for path in WHICH[bad]}, stderr
    assert not (tmp_path / "runs").exists()  # refused before anything was written


def test_a_grid_value_the_process_count_cannot_take_stops_the_sweep_before_any_run(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(TEMPLATE.read_text() + "\nsweep:\n  grid:\n    training.parallel: [ddp, fsdp]\n")
    r = envkit("sweep", cfg.name, "--set", "training.max_steps=2", cwd=tmp_path, timeout=120)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip().splitlines() == [
        ("envkit: error: c.yaml: sweep.grid: run parallel-fsdp: training.parallel fsdp shards over several processes, "
         "and this run starts one (fix: take that value out of sweep.grid)")]
    assert not (tmp_path / "runs").exists()  # not even the ddp run, which comes first in the grid


def test_a_sweep_here_refuses_batch_size_auto_in_one_line(tmp_path):
    """Its runs start without `envkit run`'s probe: each trainer met "auto" and died with a traceback."""
    cfg = config(tmp_path, "batch_size: auto")
    r = envkit("sweep", cfg.name, "--profile", "base", "--set", "training.max_steps=2", cwd=tmp_path, timeout=120)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip().splitlines() == [
        ("envkit: error: c.yaml: training.batch_size: training.batch_size auto is decided by `envkit run`'s probe, which a "
         "sweep's runs do not take (fix: `envkit run` once to see the probed batch, then --set training.batch_size=N "
         "(or list numbers in sweep.grid))")]
    assert not (tmp_path / "runs").exists()


def test_slurm_refuses_a_run_folder_started_with_another_config_at_submission(tmp_path, monkeypatch):
    """The nodes would refuse it after the job waited in the queue: the plan refuses it here."""
    from envkit.plan import RunRequest, make_plan
    from envkit.launch.launcher import write_run_files

    cfg = config(tmp_path)
    monkeypatch.chdir(tmp_path)
    p = make_plan(RunRequest(cfg.name, run_id="first"))
    write_run_files(p, p.run.run_dir, {})  # the folder as `envkit run` leaves it before its trainer starts
    assert (tmp_path / "runs" / "mlp-quick-test" / "first" / "config.json").is_file()
    r = envkit("run", cfg.name, "--set", "training.lr=0.5", "--run-id", "first", "--slurm", "--dry-run", cwd=tmp_path, timeout=120)
    assert r.returncode == 2, r.stdout[-2000:]
    assert len(r.stderr.strip().splitlines()) == 1 and "run first was started with a different config" in r.stderr, r.stderr


@pytest.mark.skipif(shutil.which("sbatch") is None, reason="Slurm's sbatch is not installed (apt install slurm-wlm)")
def test_slurm_submits_a_run_folder_again_with_the_config_it_started_with(tmp_path, monkeypatch):
    from envkit.plan import RunRequest, make_plan
    from envkit.launch.launcher import write_run_files

    cfg = config(tmp_path)
    monkeypatch.chdir(tmp_path)
    p = make_plan(RunRequest(cfg.name, run_id="first"))
    write_run_files(p, p.run.run_dir, {})
    r = envkit("run", cfg.name, "--run-id", "first", "--slurm", "--dry-run", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("#!/bin/bash") and "--run-id first" in r.stdout


def test_planning_imports_no_torch(tmp_path):
    """`envkit run`'s parent, `validate` and `sweep` plan in a process without torch (importing it takes seconds)."""
    code = (
        "import sys\n"
        "from envkit.plan import RunRequest, make_plan\n"
        f"v = make_plan(RunRequest({str(TEMPLATE)!r}, replay={str(snapshot_path('linux_no_gpu'))!r}, purpose='validate'))\n"
        f"p = make_plan(RunRequest({str(TEMPLATE)!r}, run_id='r1'))\n"
        "print(v.cfg.model.type, p.run.run_dir.name, p.run.state, 'torch' in sys.modules)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "mlp r1 new False"
