"""The run's code put back (envkit/reproduce/restore.py) and the git calls that record and restore it
(envkit/record/code.py), in-process and without training: git repositories made in tmp, the record
taken as `envkit exec` takes it, restored as `envkit reproduce` restores it. git runs with hooks and
fsmonitor off; a recorded folder inside the run folder is never used (one line, exit 2); a failure
inside the restore leaves no worktree behind, and a killed reproduction's leftovers are pruned by
the next one; two reproductions at once each get their own folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from envkit.errors import EnvkitError
from envkit.record.code import InsideRunFolder, code_state
from envkit.reproduce.check import CannotReproduce
from envkit.reproduce.restore import prune_leftovers, restore, temp_folder
from envkit.reproduce.rerun import next_dir

HOOK = "#!/bin/sh\necho \"$0\" >> {marker}\n"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@e", "-c", "user.name=t", "-c", "protocol.file.allow=always",
                           *args], check=True, capture_output=True, text=True).stdout


def _repo(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True)
    _git(path, "init", "-q")
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    _git(path, "add", "-A")
    _git(path, "commit", "-qm", "one")
    return path


def _armed(repo: Path, marker: Path) -> None:
    """Hooks and an fsmonitor that would write `marker` if git ran them."""
    hook = repo / ".git" / "hooks"
    for name in ("post-checkout", "pre-commit", "post-index-change", "reference-transaction"):
        (hook / name).write_text(HOOK.format(marker=marker))
        (hook / name).chmod(0o755)
    (repo / "monitor.sh").write_text(HOOK.format(marker=marker))
    (repo / "monitor.sh").chmod(0o755)
    _git(repo, "config", "core.fsmonitor", str(repo / "monitor.sh"))


def _run_folder(tmp: Path, name: str = "exp") -> Path:
    run = tmp / "runs" / name / "orig"
    (run / "code").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    (run / "pylock.toml").write_text('lock-version = "1.0"\ncreated-by = "test"\npackages = []\n')
    return run


class _Restoring:
    """restore() as reproduce calls it: the folder's snapshot, its plan, the code put back where the
    plan placed it; `close` removes the worktrees, the placed folders and the snapshot."""

    def __init__(self, run: Path, say):
        from envkit.reproduce.plan import make
        from envkit.runfolder.snapshot import RunSnapshot

        self.folder = RunSnapshot.take(run)
        try:
            self.plan = make(self.folder, venv=None, steps=None, device=None)
        except BaseException:
            self.folder.close()
            raise
        try:
            self.restored = restore(self.plan, say=say)
        except BaseException:
            self.plan.close()
            self.folder.close()
            raise
        self.folders = self.restored.folders

    def close(self) -> None:
        self.restored.close()
        self.plan.close()
        self.folder.close()


def _record(run: Path, folder: Path, cwd: Path | None = None) -> dict:
    state = code_state(folder, role="project", out_dir=run / "code", exclude=[run.parent.parent])
    rec = {"kind": "exec", "cwd": str(cwd or folder), "code": [state], "data": [], "command": ["python", "train.py"]}
    (run / "record.json").write_text(json.dumps(rec))
    return rec


def test_git_runs_no_hook_and_no_fsmonitor_while_recording_and_restoring(tmp_path):
    marker = tmp_path / "marker"
    repo = _repo(tmp_path / "proj", {"train.py": "print(1)\n", ".gitignore": "runs/\nmonitor.sh\n"})
    _armed(repo, marker)
    (repo / "train.py").write_text("print(2)\n")
    run = _run_folder(repo)
    _record(run, repo)
    _git(repo, "commit", "-qam", "two", "--no-verify")  # the tree moves on: restore checks out a worktree
    marker.unlink(missing_ok=True)  # the commit above is the user's own git, hooks and all
    said = []
    restored = _Restoring(run, say=said.append)
    try:
        tree = restored.folders["project"]
        assert tree != repo and (tree / "train.py").read_text() == "print(2)\n", said
    finally:
        restored.close()
    assert not marker.exists(), marker.read_text()
    assert len(_git(repo, "worktree", "list").splitlines()) == 1


def test_the_commit_a_run_records_runs_no_hook_and_no_fsmonitor_of_the_repository(tmp_path):
    """environment.json's `git` (commit, dirty) of `envkit run` in an armed repository: git runs
    nothing of the repository's config, and the changed tracked file still shows as dirty."""
    from envkit.launch.launcher import git_commit

    marker = tmp_path / "marker"
    repo = _repo(tmp_path / "proj", {"train.yaml": "a: 1\n", ".gitignore": "runs/\nmonitor.sh\n"})
    _armed(repo, marker)
    (repo / "train.yaml").write_text("a: 2\n")
    marker.unlink(missing_ok=True)
    assert git_commit(repo) == {"commit": _git(repo, "rev-parse", "HEAD").strip(), "dirty": True, "folder": str(repo)}
    assert not marker.exists(), marker.read_text()
    assert git_commit(tmp_path) is None  # not a repository


def test_a_code_folder_or_working_directory_inside_the_run_folder_is_never_used(tmp_path):
    """A received run folder ships a repository with a hook: refused before git starts, exit 2."""
    marker = tmp_path / "marker"
    run = _run_folder(tmp_path)
    shipped = _repo(run / "code" / "repo", {"train.py": "print('shipped')\n"})
    _armed(shipped, marker)
    marker.unlink(missing_ok=True)
    rec = {"kind": "exec", "cwd": str(shipped), "data": [], "command": ["python", "train.py"],
           "code": [{"role": "project", "folder": str(shipped), "relative": ".", "commit": "0" * 40, "code_hash": "x"}]}
    (run / "record.json").write_text(json.dumps(rec))
    with pytest.raises(EnvkitError) as exc:
        _Restoring(run, say=lambda _: None)
    assert exc.value.exit_code == 2
    line = exc.value.one_line()
    assert "\n" not in line and "inside the run folder itself" in line and str(shipped) in line and "(fix: " in line
    with pytest.raises(InsideRunFolder):  # the one git helper refuses it, whoever asks
        code_state(shipped, role="project", out_dir=None)
    assert not marker.exists()
    # the recorded working directory inside the run folder: the same
    (run / "record.json").write_text(json.dumps({"kind": "exec", "cwd": str(run / "profiles-here"), "data": [], "code": [],
                                                 "command": ["python", "train.py"]}))
    with pytest.raises(EnvkitError, match="inside the run folder"):
        _Restoring(run, say=lambda _: None)


@pytest.fixture
def own_tmp(tmp_path, monkeypatch):
    """Reproduce's temporary folders go into a folder of this test's (tempfile reads TMPDIR)."""
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


def _moved_on(tmp: Path) -> tuple[Path, Path, dict]:
    """A repository whose run had an uncommitted edit, the tree moved on since: (repo, run, record)."""
    repo = _repo(tmp / "proj", {"train.py": "print(1)\n", ".gitignore": "runs/\n"})
    (repo / "train.py").write_text("print(2)\n")
    run = _run_folder(repo)
    rec = _record(run, repo)
    _git(repo, "commit", "-qam", "two")
    return repo, run, rec


def test_a_failure_inside_the_restore_leaves_no_worktree_and_no_temporary_folder(tmp_path, own_tmp):
    repo, run, rec = _moved_on(tmp_path)
    (run / "code" / "project.patch").write_text("diff --git a/train.py b/train.py\nthis is not a patch\n")
    with pytest.raises(CannotReproduce, match="is not one git applies"):
        _Restoring(run, say=lambda _: None)
    assert len(_git(repo, "worktree", "list").splitlines()) == 1
    assert list(own_tmp.iterdir()) == []


KILLED = """\
import sys, time
from pathlib import Path
from envkit.reproduce.plan import make
from envkit.reproduce.restore import restore
from envkit.runfolder.snapshot import RunSnapshot
restored = restore(make(RunSnapshot.take(Path(sys.argv[1])), venv=None, steps=None, device=None), say=lambda _: None)
print(restored.folders["project"], flush=True)
time.sleep(600)
"""


def test_a_killed_reproductions_worktree_and_folders_are_removed_by_the_next_one(tmp_path, own_tmp):
    repo, run, rec = _moved_on(tmp_path)
    env = {**os.environ, "TMPDIR": str(own_tmp)}
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(run)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        left = Path(proc.stdout.readline().strip())
    finally:
        proc.kill()
        proc.wait()
    assert left.is_dir() and len(_git(repo, "worktree", "list").splitlines()) == 2  # what a kill -9 leaves
    restored = _Restoring(run, say=lambda _: None)
    try:
        assert not left.exists() and len(_git(repo, "worktree", "list").splitlines()) == 2  # its own, not the dead one's
    finally:
        restored.close()
    assert len(_git(repo, "worktree", "list").splitlines()) == 1 and list(own_tmp.iterdir()) == []
    mine = temp_folder("config")  # a live reproduction's folder is left alone
    prune_leftovers([repo])
    assert mine.is_dir()


def test_two_reproductions_at_once_each_get_their_own_folder(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    run = _run_folder(tmp_path)
    with ThreadPoolExecutor(8) as pool:
        dirs = list(pool.map(lambda _: next_dir(run), range(8)))
    assert sorted(d.name for d in dirs) == [f"orig-repro{i}" for i in range(1, 9)]
    assert all(d.is_dir() for d in dirs)


def test_a_run_started_from_inside_a_run_folder_records_the_tree_that_holds_it(tmp_path):
    """`envkit run runs/exp/orig/config.yaml` names a folder inside a run folder as its project: the
    record takes the user's tree above it, never git inside the run folder."""
    from envkit.record.start import capture

    repo = _repo(tmp_path / "proj", {"train.py": "print(1)\n", ".gitignore": "runs/\n"})
    old = _run_folder(repo)
    (old / "record.json").write_text("{}")
    new = _run_folder(repo, "exp2")
    rec, errors = capture(new, command=["python", "train.py"], project=old, cwd=str(old))
    assert errors == [] and [s["folder"] for s in rec["code"] if s["role"] == "project"] == [str(repo)]


def test_a_run_folder_under_a_name_envkit_run_cannot_train_beside_is_one_line_naming_where_to_move_it(tmp_path):
    from envkit.reproduce.rerun import run_config

    from envkit.reproduce.plan import make
    from envkit.runfolder.snapshot import RunSnapshot

    run = tmp_path / "from bob" / "orig"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"values": {"experiment": {"name": "tiny"}}}))
    (run / "record.json").write_text(json.dumps({"kind": "run", "code": [], "data": []}))
    (run / "pylock.toml").write_text('lock-version = "1.0"\ncreated-by = "test"\npackages = []\n')
    folder = RunSnapshot.take(run)
    plan = make(folder, venv=None, steps=None, device=None)
    try:
        with pytest.raises(CannotReproduce) as exc:
            run_config(plan, run.parent / "orig-repro1")
    finally:
        plan.close()
        folder.close()
    assert "'from bob'" in exc.value.message and "runs/tiny/orig/" in exc.value.fix


def test_train_yaml_folders_an_older_envkit_left_are_removed_after_a_day(own_tmp):
    old, new = own_tmp / "envkit-reproduce-abc", own_tmp / "envkit-reproduce-def"
    for d in (old, new):
        d.mkdir()
        (d / "train.yaml").write_text("experiment: {name: tiny}\n")
    os.utime(old, (0, 0))
    prune_leftovers([])
    assert not old.exists() and new.is_dir()


def test_a_large_untracked_file_is_linked_into_the_worktree_and_one_that_is_gone_is_named_before_training(tmp_path):
    repo = _repo(tmp_path / "proj", {"train.py": "print(1)\n", ".gitignore": "runs/\n"})
    (repo / "train.py").write_text("print(2)\n")
    (repo / "tokens.bin").write_bytes(b"\0" * 64)  # binary: not kept in the run folder
    (repo / "vocab.bin").write_bytes(b"\0" * 64)
    run = _run_folder(repo)
    rec = _record(run, repo)
    assert {s["path"] for s in rec["code"][0]["untracked_skipped"]} == {"tokens.bin", "vocab.bin"}
    _git(repo, "commit", "-qam", "two")
    (repo / "vocab.bin").unlink()
    said = []
    restored = _Restoring(run, say=said.append)
    try:
        tree = restored.folders["project"]
        assert (tree / "tokens.bin").resolve() == (repo / "tokens.bin").resolve()
        assert any("linked into the worktree" in s and str(repo / "tokens.bin") in s for s in said), said
        assert any(s.startswith("note: untracked files the run had that are not put back") and str(repo / "vocab.bin") in s
                   for s in said), said
    finally:
        restored.close()
    assert (repo / "tokens.bin").read_bytes() == b"\0" * 64  # the user's file is where it was


def test_a_commit_that_is_gone_is_checked_out_from_its_tree_and_one_gone_with_its_tree_is_named(tmp_path, own_tmp):
    """`git commit --amend` and `git gc` after the run: the run's commit is gone, its tree (the same
    content) is not, and the reproduction checks that tree out. Amended with other content, the tree
    is gone too: one line naming the commit and how to get it, before anything is checked out."""
    repo = _repo(tmp_path / "proj", {"train.py": "print(1)\n", ".gitignore": "runs/\n"})
    run = _run_folder(repo)
    rec = _record(run, repo)
    assert rec["code"][0]["tree"] == _git(repo, "rev-parse", "HEAD^{tree}").strip()
    _git(repo, "commit", "-q", "--amend", "-m", "one, reworded")
    _git(repo, "reflog", "expire", "--expire=now", "--all")
    _git(repo, "gc", "-q", "--prune=now")
    assert subprocess.run(["git", "-C", str(repo), "cat-file", "-e", rec["code"][0]["commit"]]).returncode != 0  # gone
    said = []
    restored = _Restoring(run, say=said.append)
    try:
        tree = restored.folders["project"]
        assert tree != repo and (tree / "train.py").read_text() == "print(1)\n"
        assert any("gone from the repository: a commit of its tree" in s for s in said), said
    finally:
        restored.close()
    (repo / "train.py").write_text("print(2)\n")
    _git(repo, "commit", "-q", "--amend", "-am", "other content")
    _git(repo, "reflog", "expire", "--expire=now", "--all")
    _git(repo, "gc", "-q", "--prune=now")
    with pytest.raises(CannotReproduce) as exc:
        _Restoring(run, say=lambda _: None)
    assert f"the run's commit {rec['code'][0]['commit'][:12]} is not in {repo} and neither is its tree" in exc.value.message
    assert "git -C" in (exc.value.fix or "") and "fetch origin" in (exc.value.fix or "")
    assert len(_git(repo, "worktree", "list").splitlines()) == 1 and list(own_tmp.iterdir()) == []



def test_an_exec_runs_command_keeps_the_venvs_interpreter_where_it_is_inside_a_moved_tree(tmp_path):
    """`envkit reproduce RUN --venv .venv` of a project whose venv lies in its tree: the run's script
    moves into the tree's checkout (the run's code), the interpreter stays the venv's own (the
    checkout holds no venv)."""
    from envkit.reproduce.plan import exec_command

    tree, checkout = tmp_path / "proj", tmp_path / "worktree"
    venv = tree / ".venv"

    def moved(argv):
        return [str(checkout / os.path.relpath(a, tree)) if a.startswith(str(tree)) else a for a in argv]

    recorded = [str(tree / ".venv/bin/python"), str(tree / "train.py"), "--lr=0.1"]
    got = exec_command(recorded, str(tree / ".venv/bin/python"), venv, moved)
    assert got == [str(venv / "bin/python"), str(checkout / "train.py"), "--lr=0.1"]
    # a command run with another program (not the run's interpreter) has every path of the tree moved
    assert exec_command(["/usr/bin/env", str(tree / "go.sh")], str(tree / ".venv/bin/python"), venv, moved) == [
        "/usr/bin/env", str(checkout / "go.sh")]
