"""The small things a newcomer runs into: a mistyped command or option names the right one, `envkit
init NAME` never writes a template into a file named like one, a plot with nothing to draw says how
to log, and the folders envkit makes inside a project keep themselves out of its git."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from conftest import envkit


def test_a_mistyped_command_names_the_nearest_one():
    r = envkit("exce", "--", "python", "x.py")
    assert r.returncode == 2 and "No such command 'exce'. Did you mean 'exec'?" in r.stderr, r.stderr


def test_an_option_that_is_a_config_value_says_where_it_lives(tmp_path):
    r = envkit("run", "--max-steps", "5", "train.yaml", cwd=tmp_path)
    assert r.returncode == 2 and "--set training.max_steps=N" in r.stderr and "--stop-after N" in r.stderr
    assert "--profile-steps" not in r.stderr  # click's spelling-based guess


def test_init_refuses_a_name_that_is_neither_a_template_nor_a_path(tmp_path):
    r = envkit("init", "mlp", cwd=tmp_path)
    line = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 2 and "'mlp' is neither a template nor a .yaml or .py path" in line and "'mlp_quick_test'" in line
    assert list(tmp_path.iterdir()) == []  # no file named mlp holding the gpt template
    r = envkit("init", "mlp_quick_test", cwd=tmp_path)
    assert r.returncode == 0 and (tmp_path / "train.yaml").is_file()


def test_plot_of_a_run_that_logged_nothing_says_how_to_log(tmp_path):
    run = tmp_path / "runs" / "exp" / "r1"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"kind": "exec"}))
    r = envkit("plot", str(run))
    assert r.returncode == 2 and "no metrics yet" in r.stderr and "track.log(step, loss=...)" in r.stderr


def test_the_runs_folder_and_the_managed_env_keep_themselves_out_of_git(tmp_path):
    from envkit.install.setup.managed import write_state
    from envkit.runfolder.links import make_run_folder

    repo = tmp_path / "proj"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    make_run_folder(repo / "runs" / "exp" / "r1")
    write_state(repo / ".envkit", python="/usr/bin/python3")
    (repo / "runs" / "exp" / "r1" / "metrics.jsonl").write_text("{}\n")
    status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=all"], capture_output=True,
                            text=True, check=True).stdout
    assert status == "", status  # `git add -A` would commit neither the venv nor the run outputs
    # a .gitignore already in a runs folder is the user's: kept as it was
    own = tmp_path / "own"
    (own / "runs").mkdir(parents=True)
    (own / "runs" / ".gitignore").write_text("*.pt\n")
    make_run_folder(own / "runs" / "exp" / "r1")
    assert (own / "runs" / ".gitignore").read_text() == "*.pt\n"
    assert not (Path(own) / "runs" / "exp" / ".gitignore").exists()
