"""What runs is what was shown: each test crafts a received run folder the way an attacker would
(a file swapped while the question waits, a patch or archive that says more than the screen, text
that redraws the terminal, a FIFO or a sparse giant where a file should be) and checks that no
marker file appears, that the answer is one line and exit 2 within seconds, and that what the user
is shown names what would run. Each broke on the code before the snapshot and the plan
(envkit/runfolder/snapshot.py, envkit/reproduce/plan.py).

One real `envkit exec` run is made once (a script in a git repository, an untracked file beside
it, the tree moved on since, so a reproduction checks the run's commit out in a worktree); every
test edits a copy of its folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import envkit
from hostile_folders import SCRIPT, edit_json, genuine_run, git, on_a_terminal, one_error_line, tar_bytes

@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("attacks")
    env = {"ENVKIT_CACHE_DIR": str(root / "cache"), "ENVKIT_HOME": str(root / "no-managed-env")}
    return genuine_run(root, env), env


@pytest.fixture
def copy(made, tmp_path):
    run, env = made
    dest = tmp_path / "runs" / "proj" / run.name
    shutil.copytree(run, dest)
    return dest, env


def _marker_code(marker: Path) -> str:
    return f"open({str(marker)!r}, 'w').close()\n"


# ---------------------------------------------------------------- 1. what runs is read once


def test_files_swapped_while_the_question_waits_change_nothing_that_runs(copy, tmp_path):
    """The user is asked about an edited folder; while the question waits, its archive is swapped for
    one whose train.py writes a marker, its lock for garbage and its record's command for `touch`.
    The answer is yes: the reproduction runs what the screen showed, from the snapshot, and is `same`."""
    run, env = copy
    marker = tmp_path / "PWNED"
    edit_json(run / "record.json", lambda d: d.update(note="edited: not this machine's unchanged folder any more"))

    def swap():
        (run / "code" / "project-untracked.tar").write_bytes(tar_bytes([("train.py", _marker_code(marker).encode())]))
        (run / "pylock.toml").write_text("this is = not [a lock\n")
        edit_json(run / "record.json", lambda d: d.update(command=["touch", str(marker)]))

    rc, text = on_a_terminal(["reproduce", str(run), "--venv", sys.prefix], env, swap)
    assert not marker.exists(), text[-3000:]
    assert rc == 0 and "same: " in text, text[-3000:]
    assert "untracked files added: notes.txt" in text  # the screen listed the archive the snapshot holds


def test_a_plain_unified_diff_is_listed_by_the_files_git_would_change(copy, tmp_path):
    run, env = copy
    marker = tmp_path / "PWNED"
    (run / "code" / "project.patch").write_text(
        "--- a/train.py\n+++ b/train.py\n@@ -1,3 +1,4 @@\n" + "".join(f" {line}\n" for line in SCRIPT.splitlines())
        + f"+{_marker_code(marker)}")
    edit_json(run / "record.json", lambda d: d["code"][0].update(patch="code/project.patch", dirty=True))
    r = envkit("reproduce", str(run), env=env, timeout=120)
    assert r.returncode == 2 and not marker.exists(), r.stderr[-2000:]
    assert "the run's patch changes 1 file(s): train.py" in r.stdout, r.stdout
    assert "not reproduced" in one_error_line(r)


def test_an_archive_member_named_like_a_tracked_file_is_refused_before_it_replaces_it(copy, tmp_path):
    run, env = copy
    marker = tmp_path / "PWNED"
    (run / "code" / "project-untracked.tar").write_bytes(tar_bytes([("notes.txt", b"fine\n"), ("train.py", _marker_code(marker).encode())]))
    edit_json(run / "record.json", lambda d: d["code"][0].update(untracked=[{"path": "notes.txt"}, {"path": "train.py"}]))
    r = envkit("reproduce", str(run), "--yes", "--venv", sys.prefix, env=env, timeout=300)
    assert "a file the run's tree already has" in one_error_line(r), r.stderr[-2000:]
    assert r.returncode == 2 and not marker.exists()


def test_an_archive_member_the_record_does_not_list_is_refused_before_the_question(copy):
    run, env = copy
    (run / "code" / "project-untracked.tar").write_bytes(tar_bytes([("notes.txt", b"fine\n"), ("extra.py", b"x = 1\n")]))
    r = envkit("reproduce", str(run), env=env, timeout=120)
    assert r.returncode == 2 and "1 file(s) the record does not list ('extra.py' first)" in one_error_line(r)


def test_a_patch_that_makes_a_link_and_a_member_under_it_write_nothing_outside_the_worktree(copy, tmp_path):
    run, env = copy
    outside = tmp_path / "outside"
    outside.mkdir()
    (run / "code" / "project.patch").write_text(
        f"diff --git a/data b/data\nnew file mode 120000\nindex 0000000..1111111\n--- /dev/null\n+++ b/data\n@@ -0,0 +1 @@\n"
        f"+{outside}\n\\ No newline at end of file\n")
    (run / "code" / "project-untracked.tar").write_bytes(tar_bytes([("notes.txt", b"fine\n"), ("data/planted.py", b"x = 1\n")]))
    edit_json(run / "record.json", lambda d: d["code"][0].update(patch="code/project.patch", dirty=True,
                                                             untracked=[{"path": "notes.txt"}, {"path": "data/planted.py"}]))
    r = envkit("reproduce", str(run), env=env, timeout=120)
    assert r.returncode == 2 and "it makes symbolic links: data" in r.stdout, r.stdout + r.stderr[-2000:]
    r = envkit("reproduce", str(run), "--yes", "--venv", sys.prefix, env=env, timeout=300)
    assert r.returncode == 2 and "which is a symbolic link in the tree" in one_error_line(r), r.stderr[-2000:]
    assert list(outside.iterdir()) == []


def test_a_run_record_without_a_working_directory_runs_nowhere_a_folder_could_shadow_envkit(copy, tmp_path):
    """kind `run` without cwd: the training starts in an empty private folder (shown as such), not a
    folder above the run folder where a planted envkit/ would be imported as envkit."""
    run, env = copy
    marker = tmp_path / "PWNED"
    shadow = run.parent.parent.parent / "envkit"  # where the fallback used to be
    shadow.mkdir()
    (shadow / "__init__.py").write_text("")
    (shadow / "__main__.py").write_text(_marker_code(marker))

    def as_run(d):
        d.update(kind="run", config={"declared": {"model": {"type": "no-such-model"}}, "origin": {"model.type": "train.yaml"}})
        d.pop("cwd", None)
        d.pop("command", None)
    edit_json(run / "record.json", as_run)
    r = envkit("reproduce", str(run), env=env, timeout=120)
    assert r.returncode == 2 and "working directory: " in r.stdout and "envkit-reproduce-cwd-" in r.stdout, r.stdout
    r = envkit("reproduce", str(run), "--yes", "--venv", sys.prefix, env=env, timeout=300)
    assert not marker.exists(), r.stderr[-2000:]


def test_the_imports_a_config_names_the_process_count_and_every_index_are_on_the_screen(copy, tmp_path):
    run, env = copy
    marker = tmp_path / "PWNED"

    def as_run(d):
        d.update(kind="run", processes={"world": 4, "nodes": 1},
                 config={"declared": {"model": {"type": "os:system", "kwargs": {"command": f"touch {marker}"}}},
                         "origin": {"model.type": "train.yaml"}})
        d.pop("command", None)
    edit_json(run / "record.json", as_run)
    text = (run / "pylock.toml").read_text()
    (run / "pylock.toml").write_text(text.replace("[tool.envkit]", '[tool.envkit]\nindexes = ["http://pkgs.example.invalid/simple"]', 1))
    r = envkit("reproduce", str(run), env=env, timeout=120)
    assert r.returncode == 2 and not marker.exists(), r.stderr[-2000:]
    assert "the config's own code, imported and called: model.type = os:system" in r.stdout, r.stdout
    assert "processes: 4" in r.stdout
    assert "package indexes pip reads: " in r.stdout and "http://pkgs.example.invalid/simple" in r.stdout


def test_check_in_a_received_bundle_whose_record_names_a_relative_folder_runs_no_git_there(copy, tmp_path):
    run, env = copy
    marker = tmp_path / "PWNED"
    git(run, "init", "-q")
    git(run, "config", "filter.evil.clean", f"touch {marker}; cat")
    (run / ".gitattributes").write_text("* filter=evil\n")
    edit_json(run / "record.json", lambda d: d["code"][0].update(folder="."))
    r = envkit("reproduce", ".", "--check", env=env, cwd=run, timeout=120)
    line = one_error_line(r)
    assert r.returncode == 2 and "code[0].folder is '.', not an absolute path" in line, r.stderr[-2000:]
    assert not marker.exists()


def test_an_empty_or_short_key_is_never_used_to_trust_a_folder(copy, tmp_path, monkeypatch):
    import hashlib
    import hmac

    from envkit.runfolder import seal

    run, env = copy
    cache = tmp_path / "fresh-cache"
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(cache))
    key = cache / "keys" / "run-folders.key"
    key.parent.mkdir(parents=True)
    key.write_text("")  # what an interrupted first write leaves
    doc = json.loads((run / "record.seal").read_text())
    doc["mac"] = hmac.new(b"", json.dumps(doc["files"], sort_keys=True).encode(), hashlib.sha256).hexdigest()
    (run / "record.seal").write_text(json.dumps(doc))
    verdict = seal.verify(run)
    assert not verdict.trusted and "holds no 32-byte key" in verdict.why
    r = envkit("reproduce", str(run), env={**env, "ENVKIT_CACHE_DIR": str(cache)}, timeout=120)
    assert r.returncode == 2 and "not reproduced" in one_error_line(r)
    with pytest.raises(seal.KeyError_):  # nothing more is signed with it either
        seal.machine_key()
    key.unlink()
    assert len(seal.machine_key()) == seal.KEY_BYTES and len(key.read_text().strip()) == 2 * seal.KEY_BYTES


def test_the_results_a_verdict_reads_are_sealed_when_the_run_ends(copy, monkeypatch):
    from envkit.runfolder.seal import verify

    run, env = copy
    monkeypatch.setenv("ENVKIT_CACHE_DIR", env["ENVKIT_CACHE_DIR"])
    assert verify(run).trusted and verify(run).results
    edit_json(run / "summary.json", lambda d: d.update(device="cuda"))  # would loosen the verdict to across devices
    assert not verify(run).trusted and "summary.json changed after the run" in verify(run).why
    r = envkit("reproduce", str(run), env=env, timeout=120)
    assert r.returncode == 2 and "summary.json changed after the run" in r.stdout
    assert "its summary.json says device cuda" in r.stdout  # what the verdict would read, shown


# ---------------------------------------------------------------- 2. text from the folder is shown escaped


def test_control_characters_in_the_command_and_folders_are_shown_escaped(copy):
    run, env = copy
    edit_json(run / "record.json", lambda d: d.update(command=["python", "-c", "open('x')\r\x1b[2Kpython train.py\u202e"]))
    r = envkit("reproduce", str(run), env=env, timeout=120)
    assert r.returncode == 2
    assert "\x1b" not in r.stdout and "\r" not in r.stdout and "\u202e" not in r.stdout
    assert "\\r\\x1b[2Kpython train.py\\u202e'" in r.stdout, r.stdout


# ---------------------------------------------------------------- 3. bounded, regular files only, never blocking


@pytest.mark.parametrize("planted", ["sparse", "dev-zero", "fifo"])
def test_a_metrics_file_that_is_huge_a_device_or_a_fifo_is_one_line_in_every_command(copy, planted):
    run, env = copy
    path = run / "metrics.jsonl"
    path.unlink()
    if planted == "sparse":
        with open(path, "wb") as f:
            f.truncate(4 << 30)
    elif planted == "dev-zero":
        path.symlink_to("/dev/zero")
    else:
        os.mkfifo(path)
    r = envkit("reproduce", str(run), env=env, timeout=30)
    assert r.returncode == 2 and "metrics.jsonl" in one_error_line(r)
    r = envkit("reproduce", str(run), "--check", env=env, timeout=30)
    assert "metrics.jsonl" in one_error_line(r) and r.returncode == 2
    r = envkit("runs", str(run.parent.parent), env=env, timeout=30)  # `monitor` and `plot`: test_runfolder_fuzz.py
    assert "Traceback" not in r.stderr and r.returncode == 0 and run.name in r.stdout, r.stderr[-2000:]


@pytest.mark.parametrize("name", [".owner.lock", "summary.json", "heartbeat.json", "reproductions.json"])
def test_a_fifo_planted_at_any_name_hangs_no_command(copy, name):
    run, env = copy
    edit_json(run / "record.json", lambda d: d.update(note="edited"))  # asked about, so `reproduce` stops at the question
    (run / name).unlink(missing_ok=True)
    os.mkfifo(run / name)
    # `runs`, `monitor` and `plot` on each of these: test_runfolder_fuzz.py, in one process
    r = envkit("reproduce", str(run), "--check", env=env, timeout=30)  # a hang is a TimeoutExpired here
    assert "Traceback" not in r.stderr and r.returncode in (0, 1, 2), r.stderr[-2000:]
    r = envkit("reproduce", str(run), env=env, timeout=30)
    said = "summary.json is not a regular file" if name == "summary.json" else "not reproduced"  # in the snapshot, or not read
    assert r.returncode == 2 and said in one_error_line(r)


@pytest.mark.parametrize(("data", "said"), [("/proc/kmsg", "a device or kernel file"), ("/usr", "dataset.path /usr")])
def test_a_data_path_of_a_kernel_file_or_a_huge_folder_is_bounded_before_the_question(copy, data, said):
    run, env = copy
    edit_json(run / "record.json", lambda d: d.update(data=[{"key": "dataset.path", "path": data, "kind": "file"}]))
    r = envkit("reproduce", str(run), "--check", env=env, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert said in r.stdout, r.stdout


def test_a_sparse_lock_is_refused_by_its_size_before_it_is_read(copy):
    run, env = copy
    (run / "pylock.toml").unlink()
    with open(run / "pylock.toml", "wb") as f:
        f.truncate(1 << 30)
    r = envkit("reproduce", str(run), env=env, timeout=30)
    assert r.returncode == 2 and "pylock.toml is 1,073,741,824 bytes, over the" in one_error_line(r)


def test_plot_never_writes_through_a_link_in_the_run_folder(copy, tmp_path):
    run, env = copy
    target = tmp_path / "victim.txt"
    target.write_text("mine\n")
    (run / "curves.png").symlink_to(target)
    r = envkit("plot", str(run), env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert target.read_text() == "mine\n" and not (run / "curves.png").is_symlink()
    assert (run / "curves.png").read_bytes().startswith(b"\x89PNG")


def test_a_pending_record_whose_writer_is_gone_is_not_waited_for(copy):
    run, env = copy
    (run / "record.json").unlink()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (run / ".record-pending.json").write_text(json.dumps({"pid": dead.pid, "start_time": "1"}))
    t0 = time.monotonic()
    r = envkit("reproduce", str(run), env=env, timeout=60)
    assert time.monotonic() - t0 < 30  # not the 120 s wait for a live writer
    assert r.returncode == 2 and "by a process that is gone" in one_error_line(r)


def test_a_run_folder_given_through_a_link_is_refused_naming_the_folder(copy, tmp_path):
    run, env = copy
    link = tmp_path / "elsewhere" / "link"
    link.parent.mkdir()
    link.symlink_to(run, target_is_directory=True)
    r = envkit("reproduce", str(link), env=env, timeout=60)
    assert r.returncode == 2 and "is a symbolic link to a run folder" in one_error_line(r) and str(run) in one_error_line(r)
    assert not list(link.parent.glob("*-repro*")) and not list(run.parent.glob("*-repro*"))
