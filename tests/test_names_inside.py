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
