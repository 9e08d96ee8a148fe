"""A run folder is data that travels between people: `envkit reproduce` reads it bounded and
validated (envkit/runfolder), never uses a path it names inside itself, and runs nothing from a
folder this machine did not write unchanged without showing it and asking. Each crafted folder
below plants a command, interpreter, repository, package or index that would create a marker
file if anything ran it: the marker never appears, and the answer is one line and exit 2.

One real `envkit exec` run (a script in a git repository logging three steps) is made once;
every test edits a copy of its folder. Nothing here trains."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from conftest import envkit
from hostile_folders import edit_json, on_a_terminal, one_error_line, tar_bytes

SCRIPT = "from envkit import track\nfor s in range(1, 4):\n    track.log(s, loss=1.0 / s)\n"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """(the run folder, the env every command runs with) of one real exec run, its record sealed."""
    root = tmp_path_factory.mktemp("trust")
    repo = root / "proj"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    (repo / ".gitignore").write_text("runs/\n")
    (repo / "train.py").write_text(SCRIPT)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "one")
    env = {"ENVKIT_CACHE_DIR": str(root / "cache"), "ENVKIT_HOME": str(root / "no-managed-env")}
    r = envkit("exec", "--name", "proj", "--", sys.executable, "train.py", cwd=repo, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    run = next((repo / "runs" / "proj").iterdir())
    deadline = time.monotonic() + 120
    while not (run / "record.seal").is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (run / "record.seal").is_file(), "the record was never sealed"
    return run, env


@pytest.fixture
def copy(made, tmp_path):
    """A copy of the run folder, under an experiment folder of its own, and the env."""
    run, env = made
    dest = tmp_path / "runs" / "proj" / run.name
    shutil.copytree(run, dest)
    return dest, env


def _marker_script(path: Path, marker: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\ntouch {marker}\nexec {sys.executable} \"$@\"\n")
    path.chmod(0o755)
    return path


def test_a_folder_this_machine_wrote_verifies_and_an_edit_or_another_machines_key_does_not(copy, monkeypatch, tmp_path):
    from envkit.runfolder.seal import verify

    run, env = copy
    monkeypatch.setenv("ENVKIT_CACHE_DIR", env["ENVKIT_CACHE_DIR"])
    assert verify(run).trusted  # copied, moved, but not changed: still this machine's
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "another-machine"))
    assert not verify(run).trusted and "written elsewhere" in verify(run).why
    monkeypatch.setenv("ENVKIT_CACHE_DIR", env["ENVKIT_CACHE_DIR"])
    (run / "pylock.toml").write_text((run / "pylock.toml").read_text() + "\n# edited\n")
    assert not verify(run).trusted and "pylock.toml changed after the run" in verify(run).why


def test_a_changed_command_is_shown_and_nothing_runs_without_a_yes(copy, tmp_path):
    run, env = copy
    marker = tmp_path / "PWNED"
    edit_json(run / "record.json", lambda d: d.update(command=["touch", str(marker)]))
    r = envkit("reproduce", str(run), env=env, timeout=120)
    assert r.returncode == 2 and not marker.exists()
    assert "record.json changed after the run" in r.stdout and f"command: touch {marker}\n" in r.stdout
    assert "not reproduced" in one_error_line(r) and "--yes" in one_error_line(r)
    # --json: the same refusal as a JSON object on stdout, nothing else there
    r = envkit("reproduce", str(run), "--json", env=env, timeout=120)
    out = json.loads(r.stdout)
    assert r.returncode == 2 and out["exit_code"] == 2 and "not reproduced" in out["error"]["message"] and not marker.exists()
    # --check runs nothing and says what a reproduction would run
    r = envkit("reproduce", str(run), "--check", env=env, timeout=120)
    assert r.returncode in (0, 1) and not marker.exists(), r.stderr
    assert "is not run" in r.stdout and "record.json changed after the run" in r.stdout and str(marker) in r.stdout


def test_a_command_edited_in_config_json_alone_is_named_and_not_what_runs(copy):
    run, env = copy
    edit_json(run / "config.json", lambda d: d.update(command=["python", "other.py"]))
    r = envkit("reproduce", str(run), "--check", env=env, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "config.json's command 'python other.py' is not the run's (record.json: " in r.stdout


def test_on_a_terminal_it_asks_and_a_no_runs_nothing(copy, tmp_path):
    run, env = copy
    marker = tmp_path / "PWNED"
    edit_json(run / "record.json", lambda d: d.update(command=["touch", str(marker)]))
    rc, text = on_a_terminal(["reproduce", str(run)], env, lambda: None, answer=b"n\n", timeout=120)
    assert "Run and build all of this?" in text and "you said no" in text, text[-2000:]
    assert rc == 2 and not marker.exists()


@pytest.mark.parametrize("planted", ["python", "project-repo", "envkit-code", "cwd", "index"])
def test_a_path_the_record_names_inside_the_run_folder_is_never_used(copy, tmp_path, planted):
    run, env = copy
    marker = tmp_path / "PWNED"
    if planted == "python":
        evil = _marker_script(run / "evil" / "bin" / "python", marker)
        edit_json(run / "record.json", lambda d: d.update(python=str(evil)))
    elif planted in ("project-repo", "envkit-code"):
        # a repository shipped in the folder, whose hooks and fsmonitor would run if git worked in it
        repo = run / "shipped"
        repo.mkdir()
        _git(repo, "init", "-q")
        hook = _marker_script(repo / ".git" / "hooks" / "post-checkout", marker)
        _git(repo, "config", "core.fsmonitor", str(hook))
        role = "project" if planted == "project-repo" else "envkit"
        edit_json(run / "record.json", lambda d: [c.update(folder=str(repo)) for c in d["code"] if c["role"] == role])
    elif planted == "cwd":
        (run / "profiles").mkdir()
        (run / "profiles" / "cpu.toml").write_text(f'[env]\nLD_PRELOAD = "{run}/evil.so"\n')
        edit_json(run / "record.json", lambda d: d.update(cwd=str(run)))
    else:
        (run / "idx").mkdir()
        text = (run / "pylock.toml").read_text()
        (run / "pylock.toml").write_text(text.replace("[tool.envkit]", f'[tool.envkit]\nindexes = ["file://{run}/idx"]', 1))
    for args in (["--check"], ["--yes"]):
        r = envkit("reproduce", str(run), *args, env=env, timeout=120)
        line = one_error_line(r)
        assert r.returncode == 2 and "inside the run folder itself" in line, (args, r.stderr[-2000:])
        assert not marker.exists()


def test_a_recorded_interpreter_elsewhere_is_not_run_by_check_for_a_folder_from_someone_else(copy, tmp_path):
    run, env = copy
    marker = tmp_path / "PWNED"
    evil = _marker_script(tmp_path / "downloads" / "bin" / "python", marker)
    edit_json(run / "record.json", lambda d: d.update(python=str(evil)))
    r = envkit("reproduce", str(run), "--check", env=env, timeout=120)
    assert r.returncode in (0, 1) and not marker.exists(), r.stderr
    assert f"the interpreter the run names ({evil}) is not run" in r.stdout


def test_a_lock_that_names_a_local_index_is_shown_and_refused_before_anything_is_built(copy, tmp_path):
    run, env = copy
    idx = tmp_path / "some-index"
    idx.mkdir()
    text = (run / "pylock.toml").read_text()
    (run / "pylock.toml").write_text(text.replace("[tool.envkit]", f'[tool.envkit]\nindexes = ["{idx}"]', 1))
    r = envkit("reproduce", str(run), env=env, timeout=120)
    assert r.returncode == 2 and f"local package indexes: {idx}" in r.stdout, r.stdout + r.stderr[-2000:]
    assert "not reproduced" in one_error_line(r)
    assert not list((Path(env["ENVKIT_CACHE_DIR"]) / "reproduce").glob("venv-*"))  # no venv was built


@pytest.mark.parametrize("bad", ["deep", "wrong-type", "not-json", "role"])
def test_a_malformed_record_is_one_line_naming_the_file_and_key_and_json_on_stdout(copy, bad):
    run, env = copy
    path = run / "record.json"
    if bad == "deep":
        path.write_text("[" * 100_000 + "]" * 100_000)
    elif bad == "wrong-type":
        edit_json(path, lambda d: d.update(code="x"))
    elif bad == "not-json":
        path.write_text("{not json")
    else:
        edit_json(path, lambda d: d["code"][0].update(role="../../etc"))
    r = envkit("reproduce", str(run), "--check", "--json", env=env, timeout=120)
    line = one_error_line(r)
    assert r.returncode == 2 and "record.json" in line, r.stderr[-2000:]
    assert {"deep": "nests deeper", "wrong-type": "code is str", "not-json": "not valid JSON",
            "role": "code[0].role"}[bad] in line
    assert json.loads(r.stdout)["exit_code"] == 2


def test_a_run_still_going_is_refused_with_its_pid(copy):
    from envkit.runfolder.owner import take_owner_lock

    run, env = copy
    held = take_owner_lock(run, command="envkit exec")
    try:
        r = envkit("reproduce", str(run), env=env, timeout=120)
    finally:
        held.close()
    assert r.returncode == 2 and f"the run is still going (PID {os.getpid()}" in one_error_line(r)


def test_a_run_that_logged_no_metrics_is_told_so_before_anything_is_built(copy):
    run, env = copy
    (run / "metrics.jsonl").write_text("")
    r = envkit("reproduce", str(run), "--yes", env=env, timeout=120)
    line = one_error_line(r)
    assert r.returncode == 2 and "logged no metrics" in line and "track.log(step" in line
    assert "training again" not in r.stderr


# ---------------------------------------------------------------- the untracked files' archive


def _tar(path: Path, members: list[tarfile.TarInfo | tuple[str, bytes]], mode: str = "w") -> Path:
    path.write_bytes(tar_bytes(members, mode))
    return path


def _link(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info


@pytest.mark.parametrize("case", ["bomb", "escape", "absolute", "link", "git", "too-many"])
def test_an_archive_is_read_with_the_caps_it_was_written_with(tmp_path, case):
    from envkit.runfolder.limits import UNTRACKED_COUNT_MAX
    from envkit.runfolder.bounded import RunFolderError
    from envkit.runfolder.archive import extract

    archive = tmp_path / "project-untracked.tar"
    members = {"bomb": [("big.bin", bytes(64 << 20))],  # 64 MiB of zeros, gzipped to about 64 KiB: a thousandfold
               "escape": [("../outside.py", b"x")], "absolute": [("/tmp/abs.py", b"x")],
               "link": [_link("data", "/etc")], "git": [(".git/hooks/post-checkout", b"#!/bin/sh\n")],
               "too-many": [(f"f{i}.py", b"") for i in range(UNTRACKED_COUNT_MAX + 1)]}[case]
    _tar(archive, members, mode="w:gz" if case == "bomb" else "w")
    dest = tmp_path / "tree"
    dest.mkdir()
    with pytest.raises(RunFolderError) as err:
        extract(archive, dest)
    assert "untracked files' archive" in err.value.message
    assert not any(dest.iterdir()) and not (tmp_path / "outside.py").exists()  # checked before a byte is written


def test_an_archive_envkit_wrote_is_put_back_whole(tmp_path):
    from envkit.record.code import _tar as write_tar
    from envkit.runfolder.archive import extract

    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "helper.py").write_text("SCALE = 7\n")
    archive = tmp_path / "a.tar"
    archive.write_bytes(write_tar([("pkg/helper.py", src / "pkg" / "helper.py")]))
    dest = tmp_path / "tree"
    assert extract(archive, dest) == ["pkg/helper.py"] and (dest / "pkg" / "helper.py").read_text() == "SCALE = 7\n"


def test_a_run_whose_interpreter_had_no_torch_is_reproduced_in_a_venv_of_its_lock(made, template_venv, tmp_path):
    """A script that never imports torch, run by an interpreter without it: its lock names no torch,
    and the reproduction trains in a venv built from that lock (not the recorded interpreter)."""
    _, env = made
    repo = tmp_path / "plain"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / ".gitignore").write_text("runs/\n")
    (repo / "train.py").write_text("import sys\n" + SCRIPT + "print('ran by', sys.prefix)\n")
    python = str(template_venv / "bin" / "python")
    r = envkit("exec", "--name", "plain", "--", python, "train.py", cwd=repo, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    run = next((repo / "runs" / "plain").iterdir())
    deadline = time.monotonic() + 120
    while not (run / "record.seal").is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    venv = tmp_path / "rebuilt"
    r = envkit("reproduce", str(run), "--venv", str(venv), "--json", env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out["outcome"] == "same" and out["venv_built"] is True and out["steps_compared"] == 3
    assert f"ran by {venv}" in r.stderr  # the rebuilt venv's interpreter ran the script, not the recorded one
