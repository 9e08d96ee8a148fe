"""Names a user (or a hostile config) gives a run stay inside the runs folder: `experiment.name`,
`--run-id`, `exec --name` and a sweep grid's names are never `.`, `..`, empty or a path. Each entry
point is run as a user would, from a project folder inside a parent folder the test watches: the
refusal is one line naming the key, exit 2, and nothing appears in the parent or the project."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from conftest import envkit

TINY = """\
experiment: {name: tiny, output_dir: runs}
model: {type: mlp, hidden: 8, depth: 1}
dataset: {type: synthetic, task: teacher, num_samples: 64}
training: {max_steps: 2, batch_size: 8}
eval: {every_steps: 0}
checkpoint: {every_steps: 0}
logging: {device_seconds: 0}
device: {type: cpu}
"""


def _project(tmp_path: Path, yaml: str = TINY) -> Path:
    proj = tmp_path / "parent" / "project"
    proj.mkdir(parents=True)
    (proj / "train.yaml").write_text(yaml)
    return proj


def _listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def _refused(res, *words):
    assert res.returncode == 2, res.stderr[-2000:]
    assert "Traceback" not in res.stderr and res.stderr.strip().count("\n") == 0, res.stderr
    for w in words:
        assert w in res.stderr, res.stderr


@pytest.mark.parametrize("args, key", [
    (("--set", "experiment.name=..", "--run-id", ".."), "--run-id"),
    (("--set", "experiment.name=..",), "experiment.name"),
    (("--set", "experiment.name=.",), "experiment.name"),
    (("--set", "experiment.name=a/../..",), "experiment.name"),
    (("--set", "experiment.name=''",), "experiment.name"),
    (("--run-id", "..",), "--run-id"),
    (("--run-id", ".",), "--run-id"),
])
def test_run_refuses_a_name_that_leaves_the_runs_folder(tmp_path, args, key):
    proj = _project(tmp_path)
    before = _listing(tmp_path)
    res = envkit("run", "train.yaml", "--profile", "cpu", *args, cwd=proj, timeout=300)
    _refused(res, key)
    assert _listing(tmp_path) == before  # no config.json, train.log or checkpoints/ anywhere


def test_validate_names_the_key_of_a_dotdot_experiment_name(tmp_path):
    proj = _project(tmp_path, TINY.replace("name: tiny", "name: '..'"))
    res = envkit("validate", "train.yaml", "--profile", "cpu", cwd=proj)
    _refused(res, "train.yaml: experiment.name", "'..'")


@pytest.mark.parametrize("name", ["..", ".", "", "a/b", "../x"])
def test_exec_refuses_a_name_that_leaves_the_runs_folder(tmp_path, name):
    proj = _project(tmp_path)
    (proj / "ok.py").write_text("print('ran')\n")
    before = _listing(tmp_path)
    env = {"ENVKIT_HOME": str(tmp_path / "no-managed-env"), "ENVKIT_CACHE_DIR": str(tmp_path / "cache"),
           "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")}
    res = envkit("exec", "--profile", "cpu", "--name", name, "--", "python", "ok.py", cwd=proj, env=env)
    _refused(res, "--name")
    assert "ran" not in res.stdout
    assert _listing(tmp_path) - {"cache"} - {p for p in _listing(tmp_path) if p.startswith("cache/")} == before


def test_sweep_refuses_a_grid_name_that_leaves_the_runs_folder(tmp_path):
    proj = _project(tmp_path, TINY + "sweep:\n  grid:\n    experiment.name: ['..', ok]\n")
    before = _listing(tmp_path)
    res = envkit("sweep", "train.yaml", "--profile", "cpu", cwd=proj, timeout=300)
    _refused(res, "sweep.grid.experiment.name")
    assert _listing(tmp_path) == before


# ---------------------------------------------------------------- no writes through a planted symlink

LINKED = [".owner.lock", "train.log", "metrics.jsonl", "heartbeat.json", "summary.json", "config.json", "environment.json",
          "checkpoints"]


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    """A run stopped after 2 steps (resumable), copied per test."""
    d = tmp_path_factory.mktemp("linked")
    (d / "train.yaml").write_text(TINY)
    res = envkit("run", "train.yaml", "--profile", "cpu", "--run-id", "r", "--stop-after", "2", cwd=d, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return d


@pytest.mark.parametrize("name", LINKED)
def test_a_symlink_planted_in_a_run_folder_is_refused_and_its_target_untouched(tmp_path, stopped_run, name):
    """A symlink at a name envkit writes, pointing outside the run folder: `envkit run` resuming into
    the folder and `envkit exec --run-dir` into it refuse in one line naming the file (exit 2); the
    victim is byte-identical. The old envkit truncated a .owner.lock target and appended train.log
    and metrics.jsonl lines to theirs."""
    import shutil

    shutil.copytree(stopped_run, tmp_path / "p")
    project = tmp_path / "p"
    run = project / "runs" / next(p.name for p in (project / "runs").iterdir()) / "r"
    victim = tmp_path / "victim"
    if name == "checkpoints":
        victim.mkdir()
        (victim / "keep.txt").write_bytes(b"precious\n")
        shutil.rmtree(run / name)
    else:
        victim.write_bytes(b'{"precious": true}\n')
        (run / name).unlink()
    before = sorted((p.name, p.read_bytes()) for p in ([victim] if victim.is_file() else victim.iterdir()))
    (run / name).symlink_to(victim)
    for cmd in (["run", "train.yaml", "--profile", "cpu", "--run-id", "r"], ["exec", "--profile", "cpu", "--run-dir", str(run), "--", "true"]):
        res = envkit(*cmd, cwd=project, timeout=300, env={"ENVKIT_HOME": str(tmp_path / "no-managed-env")})
        assert res.returncode == 2, (cmd, res.stderr[-2000:])
        errors = [line for line in res.stderr.splitlines() if line.startswith("envkit: error")]
        assert len(errors) == 1 and f"{name} is a symbolic link" in errors[0] and "Traceback" not in res.stderr, res.stderr
        assert sorted((p.name, p.read_bytes()) for p in ([victim] if victim.is_file() else victim.iterdir())) == before
