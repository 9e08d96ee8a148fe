"""A project envkit did not write, in its own layout: a GPT-style `train.py` that reads a config
file, whose data is chosen by a config value and gitignored (data/<name>/train.bin, meta.pkl),
that writes its checkpoint into the clone and only prints its losses, with envkit's runs folder
inside the clone. `exec` records the printed metrics and the data it read; `reproduce` says same
without writing into the clone; a changed data byte is named before anything trains; a sweep of
the script over its arguments; the reproduction cannot write through the links to the user's files."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import envkit

TRAIN = """\
import os, pickle, sys
config = {"seed": 0, "lr": 0.1}
exec(open(sys.argv[1]).read(), config)             # config/train_tiny.py, as nanoGPT's configurator does
for arg in sys.argv[2:]:                           # --key=value overrides
    key, value = arg[2:].split("=")
    config[key] = type(config[key])(value)
data_dir = os.path.join("data", config["dataset"])
meta = pickle.load(open(os.path.join(data_dir, "meta.pkl"), "rb"))
data = open(os.path.join(data_dir, "train.bin"), "rb").read()
w = float(config["seed"])
for it in range(6):
    x = data[(it * 7) % len(data)] / 255.0
    w += config["lr"] * (x - w)
    loss = (1.0 - w) ** 2 + meta["vocab_size"] * 1e-4
    if it % 2 == 0:
        print(f"iter {it}: loss {loss:.4f}, time 1.00ms", flush=True)
print(f"step 6: train loss {loss:.4f}, val loss {loss * 1.1:.4f}", flush=True)
os.makedirs(config["out_dir"], exist_ok=True)
with open(os.path.join(config["out_dir"], "ckpt.pt"), "wb") as fh:
    fh.write(repr(w).encode())
print(f"saving checkpoint to {config['out_dir']}", flush=True)
"""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@e", "-c", "user.name=t", *args], check=True,
                          capture_output=True, text=True).stdout


@pytest.fixture
def clone(tmp_path):
    """The project as its users have it: a git clone with its data prepared and an earlier checkpoint."""
    repo = tmp_path / "gpt"
    (repo / "config").mkdir(parents=True)
    (repo / "data" / "tiny").mkdir(parents=True)
    _git(repo, "init", "-q")
    (repo / "train.py").write_text(TRAIN)
    (repo / "config" / "train_tiny.py").write_text('dataset = "tiny"\nout_dir = "out-tiny"\n')
    (repo / ".gitignore").write_text("data/*/*.bin\ndata/*/*.pkl\nout-*/\n")  # runs/ is not in it
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "gpt")
    (repo / "data" / "tiny" / "train.bin").write_bytes(bytes(range(256)) * 8)
    (repo / "data" / "tiny" / "meta.pkl").write_bytes(pickle.dumps({"vocab_size": 65}))
    (repo / "out-tiny").mkdir()
    (repo / "out-tiny" / "ckpt.pt").write_bytes(b"the user's own checkpoint")
    return repo, {"ENVKIT_CACHE_DIR": str(tmp_path / "cache"), "ENVKIT_HOME": str(tmp_path / "no-managed-env")}


def test_an_unedited_project_is_recorded_reproduced_same_and_never_written_to(clone):
    repo, env = clone
    r = envkit("exec", "--", sys.executable, "train.py", "config/train_tiny.py", cwd=repo, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    (run,) = (repo / "runs" / "train").iterdir()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [0, 2, 4, 6] and rows[-1]["val_loss"] > rows[-1]["train_loss"]
    data = json.loads((run / "data.json").read_text())
    assert sorted(Path(f["path"]).relative_to(repo).as_posix() for f in data["files"]) == ["data/tiny/meta.pkl", "data/tiny/train.bin"]
    assert all(len(f["files"][0]["sha256"]) == 64 for f in data["files"])  # read by the config's choice, not named on the command line
    assert (repo / "runs" / ".gitignore").is_file() and _git(repo, "status", "--porcelain") == ""  # nothing of envkit's for git

    ckpt = repo / "out-tiny" / "ckpt.pt"
    before = (ckpt.read_bytes(), ckpt.stat().st_mtime_ns)
    r = envkit("reproduce", str(run), "--venv", sys.prefix, "--json", "--yes", env=env, timeout=300)
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["outcome"] == "same" and out["steps_compared"] == 4, r.stderr[-2000:]
    assert (ckpt.read_bytes(), ckpt.stat().st_mtime_ns) == before  # the reproduction wrote its checkpoint into its worktree
    assert "the reproduction writes there, never into your tree" in r.stderr
    assert _git(repo, "status", "--porcelain") == "" and len(_git(repo, "worktree", "list").splitlines()) == 1

    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "note": "edited"}))  # someone else's results now: asked first
    r = envkit("reproduce", str(run), "--venv", sys.prefix, env=env, timeout=300)
    shown = r.stdout + r.stderr  # the plan it would carry out, then the one-line refusal: no terminal, no --yes
    assert r.returncode == 2 and f"data checked before training: {repo / 'data' / 'tiny' / 'meta.pkl'}, " in shown, shown
    assert "linked read-only into the worktree:" in shown and len(list((repo / "runs" / "train").iterdir())) == 2
    (run / "summary.json").write_text(json.dumps(summary))

    blob = bytearray((repo / "data" / "tiny" / "train.bin").read_bytes())
    blob[100] ^= 1
    (repo / "data" / "tiny" / "train.bin").write_bytes(bytes(blob))
    made = set((repo / "runs" / "train").iterdir())
    r = envkit("reproduce", str(run), "--venv", sys.prefix, "--yes", env=env, timeout=300)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "the run's data changed" in lines[0], r.stderr
    assert f"{repo / 'data' / 'tiny' / 'train.bin'} (read by the run): content changed (sha256)" in lines[0]
    assert set((repo / "runs" / "train").iterdir()) == made  # refused before anything trained


def test_a_sweep_of_the_script_over_its_arguments(clone):
    repo, env = clone
    r = envkit("sweep", "--grid", "lr=0.1,0.3", "--grid", "seed=0,1", "--json", "--",
               sys.executable, "train.py", "config/train_tiny.py", "--lr={lr}", "--seed={seed}", cwd=repo, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert [x["run_dir"] for x in out["runs"]] == [str(repo / "runs" / "train" / n) for n in
                                                   ("lr-0.1_seed-0", "lr-0.1_seed-1", "lr-0.3_seed-0", "lr-0.3_seed-1")]
    assert [(g["group"], g["completed"]) for g in out["groups"]] == [("lr=0.1", 2), ("lr=0.3", 2)]
    finals = {Path(x["run_dir"]).name: x["final_loss"] for x in out["runs"]}
    assert len(set(finals.values())) == 4  # each combination trained with its own values
    r = envkit("sweep", "--grid", "lr=0.1,0.3", "--grid", "seed=0,1", "--",
               sys.executable, "train.py", "config/train_tiny.py", "--lr={lr}", "--seed={seed}", cwd=repo, env=env, timeout=300)
    assert r.returncode == 0 and r.stdout.count("skip    ") == 4 and "lr=0.3  2/2" in r.stdout, r.stdout
    r = envkit("sweep", "--grid", "lr=0.1", "--grid", "wd=1,2", "--", sys.executable, "train.py", "--lr={lr}", cwd=repo, env=env)
    assert r.returncode == 2 and "grid key wd is not used by the command" in r.stderr, r.stderr


def _child(code: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    from envkit.exec.environment import track_path

    full = {**os.environ, **env, "PYTHONPATH": str(track_path())}
    return subprocess.run([sys.executable, "-c", code], env=full, cwd=cwd, capture_output=True, text=True, timeout=60)


def test_a_reproduction_cannot_write_through_a_link_to_the_users_files(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "cache"))
    mine, tree, run = tmp_path / "mine", tmp_path / "worktree", tmp_path / "run"
    for d in (mine, tree, run):
        d.mkdir()
    (mine / "ckpt.pt").write_bytes(b"mine")
    (tree / "ckpt.pt").symlink_to(mine / "ckpt.pt")
    code = ("import os\nprint(open('ckpt.pt', 'rb').read().decode())\n"
            "open(os.path.join(os.environ['ENVKIT_RUN_DIR'], 'metrics.jsonl'), 'a').write('{}\\n')\n"
            "open('new.txt', 'w').write('ok')\n"
            "for how in (lambda: open('ckpt.pt', 'wb'), lambda: os.open('ckpt.pt', os.O_WRONLY | os.O_TRUNC)):\n"
            "    try:\n        how()\n        print('written')\n    except PermissionError as exc:\n        print('refused', exc.filename)\n")
    r = _child(code, {"ENVKIT_READ_ONLY": str(mine), "ENVKIT_RUN_DIR": str(run)}, tree)
    assert r.returncode == 0 and r.stdout.split() == ["mine", "refused", "ckpt.pt", "refused", "ckpt.pt"], r.stdout + r.stderr
    assert (mine / "ckpt.pt").read_bytes() == b"mine" and (tree / "new.txt").read_text() == "ok"
    assert (run / "metrics.jsonl").read_text() == "{}\n"  # the reproduction's own run folder is written


def test_the_files_a_command_opens_are_recorded_once_and_its_writes_apart(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "cache"))
    run, work = tmp_path / "run", tmp_path / "work"
    run.mkdir()
    work.mkdir()
    (work / "a.bin").write_bytes(b"a")
    (work / "b.json").write_text("{}")
    code = ("import json, os, pathlib, pickle\nopen('a.bin', 'rb').read(); open('a.bin', 'rb').read()\n"
            "os.close(os.open('b.json', os.O_RDONLY)); pathlib.Path('out.txt').write_text('x')\n"
            "import email.mime.text\n")  # a module of the standard library: not data
    r = _child(code, {"ENVKIT_RUN_DIR": str(run)}, work)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in (run / "opened.jsonl").read_text().splitlines()]
    assert rows == [{"path": str(work / "a.bin"), "write": False}, {"path": str(work / "b.json"), "write": False},
                    {"path": str(work / "out.txt"), "write": True}]
    r = _child("open('a.bin', 'rb').read()", {"ENVKIT_RUN_DIR": str(run), "ENVKIT_RECORD_OPENED": "0"}, work)
    assert r.returncode == 0 and len((run / "opened.jsonl").read_text().splitlines()) == 3  # recording off: nothing added
