"""Input too large, out of range or missing is one line at the start (naming the file, key or
option and the fix), never a traceback, a run of hours, or a machine out of memory: a sweep grid
counted before it is expanded, integers within the trainer's 64-bit range, a script that does not
exist, an --output folder that cannot be made, a full disk when a run resumes."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from conftest import envkit

TINY = """\
experiment: {name: tiny, output_dir: runs}
model: {type: mlp, hidden: 8, depth: 1}
dataset: {type: synthetic, task: teacher, num_samples: 64}
training: {max_steps: 4, batch_size: 8}
eval: {every_steps: 0}
checkpoint: {every_steps: 2}
logging: {every_steps: 1, device_seconds: 0}
device: {type: cpu}
"""


def _one_line(res, code=2):
    assert res.returncode == code, (res.returncode, res.stderr[-2000:])
    errors = [line for line in res.stderr.splitlines() if line.startswith("envkit: error")]
    assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr
    return errors[0]


def test_a_grid_of_a_hundred_million_runs_is_refused_before_it_is_expanded(tmp_path):
    ten = "[" + ", ".join(str(0.001 * (i + 1)) for i in range(10)) + "]"
    keys = ["training.lr", "training.weight_decay", "training.beta1", "training.beta2", "training.momentum",
            "training.grad_clip", "model.dropout", "dataset.noise"]
    grid = "".join(f"    {k}: {ten}\n" for k in keys)  # 10^8 combinations
    (tmp_path / "train.yaml").write_text(TINY + "sweep:\n  grid:\n" + grid)
    res = envkit("sweep", "train.yaml", "--profile", "cpu", cwd=tmp_path, timeout=120)
    line = _one_line(res)
    assert "sweep.grid" in line and "100,000,000 runs" in line and "--max-runs" in line, line
    assert not (tmp_path / "runs").exists()


def test_max_runs_is_the_limit_a_user_sets(tmp_path):
    (tmp_path / "train.yaml").write_text(TINY + "sweep:\n  grid:\n    experiment.seed: [0, 1, 2]\n")
    line = _one_line(envkit("sweep", "train.yaml", "--profile", "cpu", "--max-runs", "2", "--report-only", cwd=tmp_path))
    assert "3 runs" in line and "limit of 2" in line
    res = envkit("sweep", "train.yaml", "--profile", "cpu", "--max-runs", "3", "--report-only", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert len(json.loads(res.stdout)["runs"]) == 3


@pytest.mark.parametrize("cmd", ["validate", "run"])
def test_a_seed_beyond_64_bits_is_one_line_naming_the_key(tmp_path, cmd):
    (tmp_path / "train.yaml").write_text(TINY.replace("output_dir: runs}", "output_dir: runs, seed: 99999999999999999999999}"))
    line = _one_line(envkit(cmd, "train.yaml", "--profile", "cpu", cwd=tmp_path, timeout=300))
    assert "train.yaml: experiment.seed" in line and "9223372036854775807" in line, line
    assert not (tmp_path / "runs").exists()


def _exec_env(tmp_path: Path) -> dict:
    return {"ENVKIT_HOME": str(tmp_path / "no-managed-env"), "ENVKIT_CACHE_DIR": str(tmp_path / "cache"),
            "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")}


def test_exec_refuses_a_missing_script_before_making_a_run_folder(tmp_path):
    res = envkit("exec", "--profile", "cpu", "--restart-on-failure", "2", "--restart-delay", "0", "--", "python", "-u", "missing.py",
                 cwd=tmp_path, env=_exec_env(tmp_path), timeout=120)
    line = _one_line(res)
    assert "script not found: missing.py" in line, line
    assert "attempt" not in res.stderr  # not started, so not retried
    assert not (tmp_path / "runs").exists()
    # -m and -c are not files: they still run
    res = envkit("exec", "--profile", "cpu", "--", "python", "-c", "print('fine')", cwd=tmp_path, env=_exec_env(tmp_path), timeout=120)
    assert res.returncode == 0 and "fine" in res.stdout, res.stderr


def test_bench_output_to_a_folder_that_cannot_be_made_fails_before_the_ladder(tmp_path):
    (tmp_path / "afile").write_text("a file, not a folder\n")
    res = envkit("bench", "--model", "mlp", "--device", "cpu", "--output", str(tmp_path / "afile" / "sub" / "out.json"),
                 "--seconds", "0.5", "--budget", "30s", cwd=tmp_path, timeout=300)
    line = _one_line(res)
    assert "--output" in line and "afile" in line, line
    assert "samples/s" not in res.stdout and "rung" not in res.stderr.lower()  # no rung ran


def test_a_full_disk_when_a_run_resumes_is_one_line_and_nothing_is_lost(tmp_path):
    (tmp_path / "train.yaml").write_text(TINY)
    res = envkit("run", "train.yaml", "--profile", "cpu", "--run-id", "r", "--stop-after", "2", cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    run = tmp_path / "runs" / "tiny" / "r"
    before = {p.name: p.read_bytes() for p in [run / "config.json", *(run / "checkpoints").iterdir()]}
    res = envkit("run", "train.yaml", "--profile", "cpu", "--run-id", "r", cwd=tmp_path, timeout=300,
                 env={"ENVKIT_TRAIN_INJECT": "diskfull@start"})
    line = _one_line(res, code=1)
    assert "disk_full" in line and "config.json" in line and "nothing was changed" in line, line
    assert {p.name: p.read_bytes() for p in [run / "config.json", *(run / "checkpoints").iterdir()]} == before
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]
    res = envkit("run", "train.yaml", "--profile", "cpu", "--run-id", "r", cwd=tmp_path, timeout=300)  # space freed
    assert res.returncode == 0, res.stderr[-2000:]
    assert "resumed from step_00000002.pt" in (run / "train.log").read_text()
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"


def _alias_bomb(depth: int = 7) -> str:
    """experiment.tags holding a "billion laughs": each level 9 aliases of the one before, so depth 7
    is 9**7 (4.8 million) strings from about 1 KB of YAML."""
    tags = "  tags:\n    - &l0 [" + ", ".join(["lol"] * 9) + "]\n"
    tags += "".join(f"    - &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]\n" for i in range(1, depth))
    return TINY.replace("experiment: {name: tiny, output_dir: runs}\n", "experiment:\n  name: tiny\n  output_dir: runs\n" + tags) + \
        "sweep:\n  grid:\n    experiment.seed: [0, 1]\n"


@pytest.mark.parametrize("cmd", ["validate", "run", "sweep"])
def test_a_yaml_alias_bomb_in_the_tags_is_one_line_and_makes_no_run_folder(tmp_path, cmd):
    import resource
    import subprocess

    (tmp_path / "train.yaml").write_text(_alias_bomb())
    assert len((tmp_path / "train.yaml").read_bytes()) < 2000

    def cap_memory():  # the old envkit grew to 2.9 GB on this file: a MemoryError here, not a swapping host
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTORCH_", "ENVKIT_"))}
    res = subprocess.run([sys.executable, "-m", "envkit", cmd, "train.yaml", "--profile", "cpu"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300, preexec_fn=cap_memory)
    line = _one_line(res)
    assert "train.yaml" in line and "aliases" in line, line
    assert "MemoryError" not in res.stderr
    assert not (tmp_path / "runs").exists()


@pytest.fixture
def read_only(tmp_path):
    """A folder made read-only by a read-only bind mount of itself (as root, permission bits are ignored)."""
    import subprocess

    made = []

    def make(path: Path) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        for cmd in (["mount", "--bind", str(path), str(path)], ["mount", "-o", "remount,ro,bind", str(path)]):
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode != 0:
                pytest.skip(f"cannot make a read-only bind mount here ({' '.join(cmd[:3])}: {res.stderr.strip()[:200]})")
            made[len(made):] = [path][: cmd[1] == "--bind"]  # unmounted at the end once bound
        return path

    yield make
    for path in made:
        subprocess.run(["umount", str(path)], capture_output=True)


def test_read_only_folders_are_one_line_or_a_table_never_a_traceback(tmp_path, read_only):
    """A runs folder on a read-only disk holding a run whose owner died without a summary: `envkit runs`
    prints its table (killed), `monitor --once` its line and `stop` says it is gone, none writing
    (the old ones crashed writing summary.json); `envkit run` into a read-only output_dir is one
    line (the old one: a mkdir traceback)."""
    (tmp_path / "train.yaml").write_text(TINY)
    res = envkit("run", "train.yaml", "--profile", "cpu", "--run-id", "r", cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    run = tmp_path / "runs" / "tiny" / "r"
    (run / "summary.json").unlink()  # as a SIGKILLed run leaves it
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    read_only(tmp_path / "runs")

    res = envkit("runs", cwd=tmp_path)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert [line.split()[:3] for line in res.stdout.splitlines()[1:]] == [["tiny", "r", "killed"]], res.stdout
    res = envkit("monitor", str(run), "--once", cwd=tmp_path)
    assert "Traceback" not in res.stderr and "killed" in res.stdout, res.stdout + res.stderr[-2000:]
    res = envkit("stop", str(run), cwd=tmp_path)
    _one_line(res, code=1)
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before

    read_only(tmp_path / "ro")
    res = envkit("run", "train.yaml", "--profile", "cpu", "--set", "experiment.output_dir=ro/runs", cwd=tmp_path, timeout=300)
    line = _one_line(res)
    assert "Read-only file system" in line and "ro/runs" in line, line
