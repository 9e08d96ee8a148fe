"""`envkit reproduce`, end to end on the CPU, as a user meets it: a venv with the real torch 2.13.0
CPU wheel installed from a package index on 127.0.0.1 (tests/localindex.py) trains a run; its
folder's pylock.toml rebuilds a fresh venv (no system site-packages) and the run trained again there
gives the same losses at every logged step. An exec run in a git repository with an uncommitted
change, reproduced after the tree moved on, runs the changed code; one started from a subdirectory
with an absolute script path, an edited submodule and a large untracked file too. A run folder
unpacked under another name reproduces beside itself. A run started with the index
unreachable names its missing hashes and still reproduces. An exec run reproduced with `--steps 3`
stops after step 3; an editable local project whose tree moved on is installed again from the run's
commit; a run rewritten as an M4 Max records it is rebuilt with this machine's torch and held to a
stated tolerance. `--check` names a package added to the venv, an edited config and a changed data
file. The fresh venv is built once (the first test) and reused by the others (`reproduce` reuses a
venv only when it holds exactly the lock)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import envkit
from localindex import LocalIndex, build_wheel, refused_url

TINY = ("experiment: {name: tiny, seed: 7}\n"
        "dataset: {type: synthetic, task: teacher, input_dim: 8, num_classes: 4, num_samples: 512}\n"
        "model: {type: mlp, hidden: 16, depth: 1}\n"
        "training: {max_steps: 40, batch_size: 16, lr: 0.01}\n"
        "eval: {every_steps: 20, batches: 2}\n"
        "checkpoint: {every_steps: 0}\n"
        "logging: {every_steps: 5}\n"
        "device: {type: cpu}\n")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    d = tmp_path_factory.mktemp("real-wheels")
    r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary", ":all:", "-d", str(d), "torch==2.13.0+cpu"],
                       capture_output=True, text=True, timeout=600, check=False)
    torch = list(d.glob("torch-2.13.0+cpu-*.whl"))
    if r.returncode != 0 or not torch:
        pytest.skip("the real torch 2.13.0+cpu wheel is not reachable through pip's configuration here")
    # a build backend for the local project (pip builds it in an isolated environment from the index)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary", ":all:", "-d", str(d / "build"), "flit_core"],
                   capture_output=True, timeout=300, check=False)
    return {"cpu": torch, "pypi": [p for p in d.glob("*.whl") if p not in torch] + list(d.glob("build/flit_core-*.whl"))}


@pytest.fixture(scope="module")
def index(wheels):
    with LocalIndex(wheels) as srv:
        yield srv


@pytest.fixture(scope="module")
def world(tmp_path_factory, index):
    """The environment every command of this module runs with: pip reads the local index alone (no
    pip.conf, no find-links), envkit's cache is the module's own."""
    root = tmp_path_factory.mktemp("world")
    env = {"PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": None, "PIP_INDEX_URL": f"{index.base}/pypi/simple",
           "PIP_EXTRA_INDEX_URL": f"{index.base}/whl/cpu", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "ENVKIT_CACHE_DIR": str(root / "cache"), "ENVKIT_HOME": str(root / "no-managed-env")}
    return root, env


def _env(extra: dict) -> dict:
    out = dict(os.environ)
    for k, v in extra.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


@pytest.fixture(scope="module")
def train_venv(world, template_venv):
    """The venv the original runs train in (a copy of conftest's template, pip in it): torch 2.13.0+cpu
    and its dependencies from the local index, installed by uv (the test extra's) from the indexes pip
    is given. This venv is the ground the tests stand on, not what they test (each reproduction's
    venv is built by envkit's own install, with pip): with pip, the first test's set-up (this install
    and the first run) took 36-38 s on a 2-core box, with uv 15."""
    import shutil

    root, env = world
    venv = root / "train-venv"
    shutil.copytree(template_venv, venv, symlinks=True)
    r = subprocess.run([sys.executable, "-m", "uv", "pip", "install", "-q", "--python", str(venv / "bin/python"),
                        "--index-url", env["PIP_INDEX_URL"], "--extra-index-url", env["PIP_EXTRA_INDEX_URL"], "torch==2.13.0+cpu"],
                       env=_env(env), capture_output=True, text=True, timeout=900, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    return venv


def _run(tmp: Path, env: dict, python: Path, *extra: str, name: str = "train.yaml", text: str = TINY):
    (tmp / name).write_text(text)
    r = envkit("run", name, "--profile", "cpu", "--python", str(python), "--run-id", "orig", *extra, cwd=tmp, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return tmp / "runs" / "tiny" / "orig"


def _record(run_dir: Path) -> dict:
    """record.json, once written (an exec run's is written by a process of its own, in the background)."""
    import time

    deadline = time.monotonic() + 120
    while not (run_dir / "record.json").is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    return json.loads((run_dir / "record.json").read_text())


def _losses(run_dir: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


@pytest.fixture(scope="module")
def first_run(world, train_venv, tmp_path_factory):
    env = world[1]
    return _run(tmp_path_factory.mktemp("first"), env, train_venv / "bin/python")


@pytest.fixture(scope="module")
def fresh_venv(world):
    return world[0] / "fresh-venv"


def test_a_run_reproduced_in_a_fresh_venv_gives_identical_losses(world, first_run, fresh_venv):
    env = world[1]
    lock = (first_run / "pylock.toml").read_text()
    assert 'name = "torch"' in lock and "sha256" in lock and 'version = "2.13.0+cpu"' in lock
    assert not fresh_venv.exists()
    # reproduced from a shell that exports another thread count: the run's own count is used (on the
    # CPU it is part of the arithmetic), and said
    threads = json.loads((first_run / "environment.json").read_text())["environ"]["OMP_NUM_THREADS"]
    other = {**env, "OMP_NUM_THREADS": str(int(threads) + 1)}
    r = envkit("reproduce", str(first_run), "--venv", str(fresh_venv), "--json", env=other, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"threads as the run had them (its environment.json): OMP_NUM_THREADS={threads}" in r.stderr
    out = json.loads(r.stdout)
    assert out["outcome"] == "same" and out["venv_built"] is True, out
    again = first_run.parent / out["run"]
    assert again.name == "orig-repro1"
    original, reproduced = _losses(first_run), _losses(again)
    assert sorted(original) == list(range(5, 41, 5)) and reproduced == original
    # a fresh venv: its own site-packages only, holding the lock's torch, and the reproduction trained with it
    assert "include-system-site-packages = false" in (fresh_venv / "pyvenv.cfg").read_text()
    assert json.loads((again / "environment.json").read_text())["python"] == str(fresh_venv / "bin/python")
    assert json.loads((again / "environment.json").read_text())["environ"]["OMP_NUM_THREADS"] == threads
    assert "sha256 enforced" in r.stderr
    # the original run says how it was reproduced, and `envkit runs` shows it
    saved = json.loads((first_run / "reproductions.json").read_text())["reproductions"]
    assert [x["outcome"] for x in saved] == ["same"] and saved[0]["run"] == "orig-repro1"
    table = envkit("runs", str(first_run.parent.parent.parent), env=env)
    row = next(line for line in table.stdout.splitlines() if line.startswith("tiny") and " orig " in f" {line} ")
    assert row.split()[-1] == "same", table.stdout


def test_a_run_that_came_out_different_is_named_with_metric_and_step(world, first_run, fresh_venv, tmp_path):
    """The original's loss at step 25 nudged by 1e-4 (as a GPU's other reduction order would): exit 1,
    naming it. The folder was unpacked under another name than its experiment's: it reproduces beside
    itself, and leaves no temporary folder (its train.yaml's) behind."""
    env = world[1]
    import shutil

    copy = tmp_path / "from-bob" / "unpacked" / "orig"
    shutil.copytree(first_run, copy)
    (copy / "reproductions.json").unlink()
    rows = [json.loads(line) for line in (copy / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        if row.get("step") == 25 and "loss" in row:
            row["loss"] += 1e-4
    (copy / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    temp = tmp_path / "tmp"
    temp.mkdir()
    r = envkit("reproduce", str(copy), "--venv", str(fresh_venv), env={**env, "TMPDIR": str(temp)}, timeout=600)
    # the results are sealed with the record when the run ends: an edited metrics.jsonl is someone
    # else's data, shown and asked about (no terminal here: exit 2, nothing trained)
    assert r.returncode == 2 and "metrics.jsonl changed after the run" in r.stdout, r.stdout + r.stderr[-2000:]
    assert not (copy.parent / "orig-repro1").exists()
    r = envkit("reproduce", str(copy), "--venv", str(fresh_venv), "--yes", env={**env, "TMPDIR": str(temp)}, timeout=600)
    assert r.returncode == 1, r.stdout + r.stderr[-2000:]
    assert (copy.parent / "orig-repro1" / "metrics.jsonl").is_file() and sorted(p.name for p in copy.parent.parent.iterdir()) == ["unpacked"]
    assert list(temp.glob("envkit-reproduce-*")) == []
    assert "reusing" in r.stdout
    line = next(x for x in r.stdout.splitlines() if x.strip().startswith("loss "))
    assert "max |diff| 0.0001 at step 25 (first at step 25)" in line
    assert r.stdout.strip().splitlines()[-1].startswith("different:")


MAC_PLATFORM = {"system": "Darwin", "os": "Darwin 25.1.0", "arch": "arm64", "python": "3.11.7", "python_minor": "3.11",
                "implementation": "cpython", "device": "mps", "backend": "pypi"}  # record/envlock.py's, on an M4 Max


def _as_on_a_mac(run: Path, tmp: Path, nudge: float) -> None:
    """Make a real run folder of this machine the one an M4 Max (macOS 26.1, Python 3.11.7, torch 2.13.0
    from the index, no +cpu) would have written: its pylock.toml written by envkit's lock writer with
    the Mac's wheels (a compiled package's macOS arm64 file; pure Python wheels are the same files),
    environment.json's doctor facts from tests/snapshots/m4_max_tahoe.json, and every loss moved by
    `nudge` relative (the Mac's kernels round differently)."""
    import hashlib

    from conftest import snapshot_path
    from envkit.checks.report import diagnose
    from envkit.facts import gather
    from envkit.install.lock import toml
    from envkit.install.lock.read import read
    from envkit.install.lock.single import doc
    from envkit.record.envlock import HEADER

    lock = read(run / "pylock.toml")
    entries = []
    for pick in lock.picks():
        version, url = pick.version.replace("+cpu", ""), pick.url
        if not pick.filename.endswith("-none-any.whl"):  # a compiled wheel: the Mac has its own file
            py = pick.filename.split("-")[2]
            name = f"{pick.name.replace('-', '_')}-{version}-{py}-{'none' if pick.name == 'torch' else py}-macosx_11_0_arm64.whl"
            url = url.rsplit("/", 1)[0] + "/" + name
        sha = pick.sha256 if url == pick.url else hashlib.sha256(url.encode()).hexdigest()  # a file this machine never fetches
        entries.append({"name": pick.name, "version": version, "url": url, "sha256": sha})
    d = doc(platform=MAC_PLATFORM, profile=lock.profile, source=lock.source, env={}, entries=entries, envkit_version="0.1.0")
    d["tool"]["envkit"]["record"] = {**lock.tool["record"], "python": "/Users/me/proj/.venv/bin/python"}
    (run / "pylock.toml").write_text(toml.dumps(d, HEADER))
    snap = json.loads(snapshot_path("m4_max_tahoe").read_text())
    snap["python"]["version"], snap["packages"] = "3.11.7", {"torch": "2.13.0"}
    (tmp / "m4.json").write_text(json.dumps(snap))
    env_doc = json.loads((run / "environment.json").read_text())
    env_doc["doctor"] = diagnose(gather(str(tmp / "m4.json"), runtime=False)).to_dict()
    env_doc["packages"], env_doc["python"] = env_doc["doctor"]["facts"].get("packages"), "/Users/me/proj/.venv/bin/python"
    (run / "environment.json").write_text(json.dumps(env_doc, default=str))
    rec = json.loads((run / "record.json").read_text())
    (run / "record.json").write_text(json.dumps({**rec, "python": "/Users/me/proj/.venv/bin/python"}))
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        for key in ("loss", "val_loss"):
            if key in row:
                row[key] *= 1 + nudge
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_a_run_recorded_on_a_mac_is_rebuilt_with_this_machines_torch_and_held_to_a_stated_tolerance(world, index, first_run, tmp_path):
    import shutil

    from envkit.reproduce.metrics import read_rows

    env = {**world[1], "ENVKIT_PYTORCH_INDEX": f"{index.base}/whl"}  # PyTorch's index, as the test index serves it
    mac = tmp_path / "runs" / "tiny" / "mac"
    shutil.copytree(first_run, mac, ignore=shutil.ignore_patterns("reproductions.json"))
    _as_on_a_mac(mac, tmp_path, 2e-4)
    r = envkit("setup", "--lock", str(mac / "pylock.toml"), "--venv", str(tmp_path / "strict"), "--yes", env=env, timeout=300)
    assert r.returncode == 2 and "the lock was made on another platform" in r.stderr, r.stderr  # setup --lock stays strict
    venv = tmp_path / "here-venv"
    # rewritten after the run (as a folder from someone else): shown and refused without --yes, nothing built
    r = envkit("reproduce", str(mac), "--venv", str(venv), "--json", env=env, timeout=300)
    assert r.returncode == 2 and "not reproduced" in json.loads(r.stdout)["error"]["message"] and not venv.exists(), r.stderr
    assert "pylock.toml, record.json changed after the run" in r.stderr
    r = envkit("reproduce", str(mac), "--venv", str(venv), "--json", "--yes", env=env, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    other = out["another_machine"]
    assert out["outcome"] == "within tolerance" and out["identical_required"] is False and out["venv_built"] is True, out
    assert other["torch_recorded"] == "2.13.0" and other["torch_here"] == "2.13.0+cpu" and other["index"] == f"{index.base}/whl/cpu"
    assert other["by_version"] == ["markupsafe 3.0.4"] and "filelock" in other["kept"] and not other["added"]
    line = ("another machine: recorded on macOS arm64 mps (torch 2.13.0), reproduced here on Linux x86_64 cpu with torch 2.13.0+cpu "
            f"from {index.base}/whl/cpu")
    assert line in r.stderr and other["line"].startswith(line)
    # the tolerance is stated: 1e-3 of the largest loss, this CPU's spread being 0 (no second run trained)
    top = max(row["loss"] for row in read_rows(mac).values() if "loss" in row)
    assert out["tolerance"]["loss"] == pytest.approx(1e-3 * top) and out["spread_run"] is None
    assert "another machine" in out["tolerance_from"] and "0.001 x each metric's largest |value|" in out["tolerance_from"]
    assert f"compared within tolerance accuracy {out['tolerance']['accuracy']:.2g}" in other["line"]
    held = subprocess.run([str(venv / "bin/python"), "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    assert held.stdout.strip() == "2.13.0+cpu"
    # --check on that venv: this machine's build of the recorded torch is what a reproduction installs, a note, not drift
    r = envkit("reproduce", str(mac), "--check", "--venv", str(venv), "--json", env=env, timeout=300)
    report = json.loads(r.stdout)
    assert not [x for x in report["environment"] if "torch" in x], report
    assert any("recorded on another machine" in n and "torch 2.13.0+cpu here for 2.13.0 recorded" in n for n in report["notes"]), report
    # moved by 1% instead: beyond that tolerance, exit 1, the venv reused
    far = tmp_path / "runs" / "tiny" / "mac-far"
    shutil.copytree(first_run, far, ignore=shutil.ignore_patterns("reproductions.json"))
    _as_on_a_mac(far, tmp_path, 1e-2)
    r = envkit("reproduce", str(far), "--venv", str(venv), "--yes", env=env, timeout=600)
    assert r.returncode == 1, r.stdout + r.stderr[-2000:]
    assert "reusing" in r.stdout and r.stdout.strip().splitlines()[-1].startswith("different:")
    assert any(x.startswith(line) and "compared within tolerance" in x for x in r.stdout.splitlines())


REPO_TRAIN = "import envkit.track as track\n\nfor step in range(1, 6):\n    track.log(step=step, loss={expr})\n"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def test_an_exec_run_reproduced_after_the_tree_moved_on_runs_the_changed_code(world, train_venv, fresh_venv, tmp_path):
    env = world[1]
    repo = tmp_path / "proj"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    (repo / ".gitignore").write_text("runs/\ndata/\n")
    (repo / "data").mkdir()
    (repo / "data" / "offset.txt").write_text("0.5\n")  # ignored by git: data, linked into the restored tree
    (repo / "train.py").write_text(REPO_TRAIN.format(expr="1.0 / step"))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "one")
    first = _git(repo, "rev-parse", "HEAD").strip()
    # uncommitted: train.py edited, and a new module not yet added
    (repo / "train.py").write_text("import sys\nfrom helper import SCALE\nOFFSET = float(open(sys.argv[1]).read())\n"
                                   + REPO_TRAIN.format(expr="(SCALE + OFFSET) / step"))
    (repo / "helper.py").write_text("SCALE = 7.0\n")
    home = tmp_path / "home"
    home.mkdir()
    (home / "state.json").write_text(json.dumps({"venv": str(train_venv), "python": str(train_venv / "bin/python"), "profile": "cpu"}))
    run_env = {**env, "ENVKIT_HOME": str(home)}
    r = envkit("exec", "--profile", "cpu", "--name", "proj", "--", "python", "train.py", "data/offset.txt", cwd=repo, env=run_env,
               timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    run = next((repo / "runs" / "proj").iterdir())
    assert _losses(run) == {s: 7.5 / s for s in range(1, 6)}
    assert [d["path"] for d in _record(run)["data"]] == [str((repo / "data" / "offset.txt").resolve())]
    # the tree moves on: a new commit, the helper gone
    (repo / "train.py").write_text(REPO_TRAIN.format(expr="3.0 / step"))
    (repo / "helper.py").unlink()
    _git(repo, "commit", "-qam", "two")
    check = envkit("reproduce", str(run), "--check", "--venv", str(fresh_venv), env=env, timeout=300)
    assert check.returncode == 1 and f"the run had {first[:12]}" in check.stdout, check.stdout + check.stderr
    r = envkit("reproduce", str(run), "--venv", str(fresh_venv), "--json", env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out["outcome"] == "same" and _losses(run.parent / out["run"]) == {s: 7.5 / s for s in range(1, 6)}
    assert "with its uncommitted changes is checked out in" in r.stderr
    # the user's tree is as they left it, the temporary worktree gone
    assert (repo / "train.py").read_text() == REPO_TRAIN.format(expr="3.0 / step") and not (repo / "helper.py").exists()
    assert len(_git(repo, "worktree", "list").splitlines()) == 1


LAYOUT_TRAIN = """\
import os, sys
from pathlib import Path
import envkit.track as track
top = Path(__file__).parent.parent  # the repository the script is in (the worktree, reproduced)
sys.path.insert(0, str(top / "lib"))
from helper import SCALE  # a git submodule, edited in place
BIG = float((top / "big.bin").read_bytes().split(b"\\n")[0])  # untracked, too large for the run folder
OFFSET = float(open(sys.argv[1]).read())  # relative to the working directory, exp/
assert Path.cwd().name == "exp", Path.cwd()
for step in range(1, 4):
    track.log(step=step, loss=(SCALE + BIG + OFFSET * {k}) / step)
"""


def test_an_exec_run_from_a_subdirectory_with_an_absolute_script_a_submodule_and_a_large_file_reproduces_its_code(
        world, train_venv, fresh_venv, tmp_path):
    """`cd exp && envkit exec -- python /abs/repo/src/train.py ../src/offset.txt`: exp/ holds no tracked
    file, the script imports an edited submodule and opens a large untracked file; after the tree and
    the submodule moved on, the reproduction runs the run's code in each."""
    env = world[1]
    lib = tmp_path / "lib-origin"
    lib.mkdir()
    _git(lib, "init", "-q")
    (lib / "helper.py").write_text("SCALE = 1.0\n")
    _git(lib, "add", "-A")
    _git(lib, "-c", "user.email=t@e", "-c", "user.name=t", "commit", "-qm", "lib")
    repo = tmp_path / "proj"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    _git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "lib")
    (repo / ".gitignore").write_text("runs/\n*.log\n")
    (repo / "src").mkdir()
    (repo / "src" / "train.py").write_text(LAYOUT_TRAIN.format(k=1))
    (repo / "src" / "offset.txt").write_text("0.5\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "one")
    (repo / "src" / "train.py").write_text(LAYOUT_TRAIN.format(k=2))  # uncommitted edits: the script,
    (repo / "lib" / "helper.py").write_text("SCALE = 2.0\n")  # the submodule's code,
    (repo / "big.bin").write_bytes(b"4\n" + b"#" * (1 << 20))  # and an untracked file over 1 MiB
    (repo / "exp").mkdir()
    (repo / "exp" / "notes.log").write_text("ignored\n")  # exp/ holds no file git tracks
    run_env = _managed(tmp_path, env, train_venv)
    r = envkit("exec", "--profile", "cpu", "--name", "layout", "--runs-dir", str(repo / "runs"), "--", "python",
               str(repo / "src" / "train.py"), "../src/offset.txt", cwd=repo / "exp", env=run_env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    run = next((repo / "runs" / "layout").iterdir())
    want = {s: (2.0 + 4.0 + 1.0) / s for s in range(1, 4)}
    assert _losses(run) == want
    # the tree and the submodule move on
    (repo / "lib" / "helper.py").write_text("SCALE = 30.0\n")
    _git(repo / "lib", "-c", "user.email=t@e", "-c", "user.name=t", "commit", "-qam", "lib two")
    (repo / "src" / "train.py").write_text(LAYOUT_TRAIN.format(k=100))
    (repo / "src" / "offset.txt").write_text("9.0\n")
    _git(repo, "commit", "-qam", "two")
    r = envkit("reproduce", str(run), "--venv", str(fresh_venv), "--json", env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out["outcome"] == "same" and _losses(run.parent / out["run"]) == want, r.stderr[-3000:]
    assert "and its submodules (lib) at their commits" in r.stderr and "linked into the worktree" in r.stderr
    assert (repo / "lib" / "helper.py").read_text() == "SCALE = 30.0\n" and (repo / "big.bin").stat().st_size > 1 << 20
    assert len(_git(repo, "worktree", "list").splitlines()) == 1 and len(_git(repo / "lib", "worktree", "list").splitlines()) == 1


def test_a_run_started_offline_reproduces_with_its_missing_hashes_named(world, train_venv, fresh_venv, tmp_path):
    env = world[1]
    dead = refused_url()
    offline = {**env, "PIP_INDEX_URL": dead, "PIP_EXTRA_INDEX_URL": None, "ENVKIT_CACHE_DIR": str(tmp_path / "cache")}
    run = _run(tmp_path, offline, train_venv / "bin/python")
    rec = json.loads((run / "record.json").read_text())
    missing = rec["environment"]["missing_hashes"]
    assert "torch" in missing and dead in rec["environment"]["unreachable_indexes"]
    # the same cache (so the same key: the folder verifies as this machine's), the index reachable again
    r = envkit("reproduce", str(run), "--venv", str(fresh_venv), env={**env, "ENVKIT_CACHE_DIR": offline["ENVKIT_CACHE_DIR"]},
               timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]
    named = next(x for x in r.stdout.splitlines() if "without a wheel hash" in x)
    assert "torch" in named and f"{len(missing)} packages" in named
    assert r.stdout.strip().splitlines()[-1].startswith("same:")


DEMO = ("import envkit.track\n\n"
        "for step in range(1, 9):\n"
        "    loss = 1.0 / step\n"
        "    print(f'step {step} loss {loss:.3f}')\n"
        "    envkit.track.log(step=step, loss=loss)\n"
        "print('done')\n")


def _managed(tmp: Path, env: dict, train_venv: Path) -> dict:
    """The env of an `envkit exec` whose managed venv is the one the original runs train in."""
    home = tmp / "home"
    home.mkdir()
    (home / "state.json").write_text(json.dumps({"venv": str(train_venv), "python": str(train_venv / "bin/python"), "profile": "cpu"}))
    return {**env, "ENVKIT_HOME": str(home)}


def _exec(cwd: Path, env: dict, name: str, *command: str) -> Path:
    r = envkit("exec", "--profile", "cpu", "--name", name, "--", *command, cwd=cwd, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    run = next((cwd / "runs" / name).iterdir())
    _record(run)
    return run


def test_an_exec_run_reproduced_with_steps_stops_after_that_step(world, train_venv, fresh_venv, tmp_path):
    """docs/exec.md's train_demo.py, 8 steps: `--steps 3` ends the script once envkit.track logs step 3."""
    env = world[1]
    (tmp_path / "train_demo.py").write_text(DEMO)
    run = _exec(tmp_path, _managed(tmp_path, env, train_venv), "demo", "python", "train_demo.py")
    assert sorted(_losses(run)) == list(range(1, 9))
    r = envkit("reproduce", str(run), "--venv", str(fresh_venv), "--steps", "3", "--json", env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out["outcome"] == "same" and out["steps_compared"] == 3 and out["missing_steps"] == [], out
    again = run.parent / out["run"]
    assert _losses(again) == {s: 1.0 / s for s in (1, 2, 3)}
    log = (again / "train.log").read_text()
    assert "step 3 loss 0.333" in log and "step 4 loss" not in log and "done" not in log
    assert json.loads((again / "summary.json").read_text())["exit_code"] == 0


MYLIB = ('[build-system]\nrequires = ["flit_core>=3.4"]\nbuild-backend = "flit_core.buildapi"\n\n'
         '[project]\nname = "mylib"\nversion = "0.1"\ndescription = "the run imports it"\n')


def test_an_editable_local_project_is_installed_again_from_the_runs_commit(world, train_venv, fresh_venv, tmp_path):
    """A project installed with `pip install -e` into the venv the run trained in, its tree moved on
    after the run: the reproduction's venv gets it again, editable, from the run's commit."""
    env = world[1]
    lib = tmp_path / "mylib"
    lib.mkdir()
    _git(lib, "init", "-q")
    _git(lib, "config", "user.email", "t@example.com")
    _git(lib, "config", "user.name", "t")
    (lib / "pyproject.toml").write_text(MYLIB)
    (lib / "mylib.py").write_text("SCALE = 2.0\n")
    _git(lib, "add", "-A")
    _git(lib, "commit", "-qm", "one")
    pip = [str(train_venv / "bin/python"), "-m", "pip", "install", "-q", "--no-deps", "-e", str(lib)]
    r = subprocess.run(pip, env=_env(env), capture_output=True, text=True, timeout=300, check=False)
    if r.returncode != 0:
        pytest.skip(f"no build backend for the local project on this index: {r.stderr[-300:]}")
    try:
        work = tmp_path / "work"
        work.mkdir()
        (work / "train.py").write_text("import envkit.track\nimport mylib\n\nfor step in range(1, 6):\n"
                                       "    envkit.track.log(step=step, loss=mylib.SCALE / step)\n")
        run = _exec(work, _managed(tmp_path, env, train_venv), "lib", "python", "train.py")
        assert _losses(run) == {s: 2.0 / s for s in range(1, 6)}
        local = _record(run)["environment"]["local"]
        assert [(x["name"], x["editable"], x["folder"]) for x in local] == [("mylib", True, str(lib))]
        (lib / "mylib.py").write_text("SCALE = 5.0\n")  # the tree moves on
        _git(lib, "commit", "-qam", "two")
        r = envkit("reproduce", str(run), "--venv", str(fresh_venv), "--json", env=env, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        out = json.loads(r.stdout)
        assert out["outcome"] == "same" and out["local"] == ["mylib"], out
        again = run.parent / out["run"]
        assert _losses(again) == {s: 2.0 / s for s in range(1, 6)}
        # installed editable, from the run's commit in a temporary worktree, and gone from the venv afterwards
        assert "local: mylib 0.1 installed editable from " in r.stderr and "has moved on" in r.stderr
        mine = next(x for x in _record(again)["environment"]["local"] if x["name"] == "mylib")
        assert mine["editable"] and mine["folder"] != str(lib) and not Path(mine["folder"]).exists()
        left = subprocess.run([str(fresh_venv / "bin/python"), "-m", "pip", "show", "mylib"], capture_output=True, check=False)
        assert left.returncode != 0
        assert (lib / "mylib.py").read_text() == "SCALE = 5.0\n" and len(_git(lib, "worktree", "list").splitlines()) == 1
        # a venv of the user's, given with --venv: reproduce neither reinstalls nor uninstalls their project
        r = envkit("reproduce", str(run), "--venv", str(train_venv), env=env, timeout=600)
        assert "mylib: used as installed in " in r.stderr + r.stdout, r.stderr[-2000:]
        kept = subprocess.run([str(train_venv / "bin/python"), "-m", "pip", "show", "mylib"], capture_output=True, text=True, check=False)
        assert kept.returncode == 0 and f"Editable project location: {lib}" in kept.stdout, kept.stdout
    finally:
        subprocess.run([str(train_venv / "bin/python"), "-m", "pip", "uninstall", "-q", "-y", "mylib"], capture_output=True, check=False)


TEXT = ("experiment: {name: tiny, seed: 3}\n"
        "dataset: {type: text, path: corpus.txt, level: char}\n"
        "model: {type: gpt, n_layer: 1, n_head: 2, n_embd: 16, block_size: 16}\n"
        "training: {max_steps: 5, batch_size: 8, lr: 0.01}\n"
        "eval: {every_steps: 0, batches: 1}\n"
        "checkpoint: {every_steps: 0}\n"
        "logging: {every_steps: 5}\n"
        "device: {type: cpu}\n")


def test_check_names_an_added_package_an_edited_config_and_changed_data(world, train_venv, tmp_path):
    """Last in the module: it adds a package to the venv the other runs trained in."""
    env = world[1]
    (tmp_path / "corpus.txt").write_text("the quick brown fox jumps over the lazy dog. " * 40)
    run = _run(tmp_path, env, train_venv / "bin/python", text=TEXT)
    r = envkit("reproduce", str(run), "--check", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    (tmp_path / "extra").mkdir()
    extra = build_wheel(tmp_path / "extra", "tinyextra", "1.0", tag="py3-none-any")
    subprocess.run([str(train_venv / "bin/python"), "-m", "pip", "install", "-q", "--no-deps", str(extra)], check=True,
                   env=_env(env), capture_output=True)
    r = envkit("reproduce", str(run), "--check", env=env)
    assert r.returncode == 1 and "environment: tinyextra 1.0 is installed but not in the lock" in r.stdout, r.stdout
    (tmp_path / "train.yaml").write_text(TEXT.replace("lr: 0.01", "lr: 0.02"))
    r = envkit("reproduce", str(run), "--check", env=env)
    assert r.returncode == 1 and "config: training.lr is 0.02 in train.yaml, the run had 0.01" in r.stdout, r.stdout
    (tmp_path / "corpus.txt").write_text("the quick brown fox jumps over the lazy cat. " * 40)
    r = envkit("reproduce", str(run), "--check", "--json", env=env)
    assert r.returncode == 2, r.stdout
    data = json.loads(r.stdout)["data"]
    assert len(data) == 1 and "corpus.txt: content changed (sha256)" in data[0]
    r = envkit("reproduce", str(run), env=env)
    assert r.returncode == 2 and r.stdout == "" and "the run's data changed" in r.stderr, r.stderr


def test_thread_counts_from_a_received_run_folder_are_applied_only_when_they_are_counts(tmp_path, monkeypatch):
    """reproduce trains with the run's recorded OMP_NUM_THREADS and friends; a run folder may come from
    someone else, so a value that is not a count is named and left out, never put in the environment."""
    from envkit.reproduce.plan import make
    from envkit.runfolder.snapshot import RunSnapshot

    run = tmp_path / "runs" / "exp" / "orig"
    run.mkdir(parents=True)
    (run / "config.json").write_text("{}")
    (run / "record.json").write_text(json.dumps({"kind": "exec", "command": ["python", "t.py"], "cwd": str(tmp_path),
                                                 "code": [], "data": []}))
    (run / "pylock.toml").write_text('lock-version = "1.0"\ncreated-by = "test"\npackages = []\n')
    (run / "environment.json").write_text(json.dumps({"environ": {
        "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "$(touch pwned)", "OPENBLAS_NUM_THREADS": "0", "HOME": "/elsewhere",
        "NUMEXPR_NUM_THREADS": "999999"}}))
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    folder = RunSnapshot.take(run)
    plan = make(folder, venv=None, steps=None, device=None)
    plan.close()
    folder.close()
    cores = str(os.cpu_count())  # never more threads than this machine has cores
    assert {k: v for k, v in plan.env.items() if k.endswith("_THREADS")} == {"OMP_NUM_THREADS": "1", "NUMEXPR_NUM_THREADS": cores}
    assert "HOME" not in plan.env
    assert plan.threads_notes == ["not applied, not a thread count: MKL_NUM_THREADS", "not applied, not a thread count: OPENBLAS_NUM_THREADS",
                                  f"NUMEXPR_NUM_THREADS=999999 capped at this machine's {cores} cores"]
