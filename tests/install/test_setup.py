"""`envkit setup` end to end: a real local index (tests/localindex.py), real venvs, real pip;
plans for other machines through doctor's snapshots; bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import pytest

from conftest import envkit, snapshot_path
from localindex import build_wheel, installed, refused_url


def run_setup(tmp_path, *args, env=None):
    """pip, explicitly: `auto` would take uv where it is installed (tests/install/test_setup_uv.py covers uv)."""
    e = {"ENVKIT_CACHE_DIR": str(tmp_path / "cache"), **(env or {})}
    installer = [] if "--installer" in args else ["--installer", "pip"]
    return envkit("setup", "--yes", "--no-selftest", *installer, *args, cwd=tmp_path, env=e, timeout=240)


def test_install_rerun_and_failed_upgrade_rolled_back(server, venv, tmp_path):
    r = run_setup(tmp_path, "--venv", str(venv), "--index-url", server.url("json"), "--with", "torchvision")
    assert r.returncode == 0, r.stderr
    assert "torch 2.6.0+cpu" in r.stdout and "torchvision 0.21.0+cpu" in r.stdout
    assert installed(venv) == {"torch": "2.6.0+cpu", "torchvision": "0.21.0+cpu"}
    lock = (tmp_path / "pylock.machine.toml").read_text()
    assert 'name = "torch"' in lock and 'version = "2.6.0+cpu"' in lock and "sha256 = " in lock
    state = json.loads((tmp_path / ".envkit/state.json").read_text())
    assert state["venv"] == str(venv) and state["torch"] == "2.6.0+cpu"

    # again: nothing to change, nothing rewritten
    mtime = (tmp_path / "pylock.machine.toml").stat().st_mtime_ns
    r = run_setup(tmp_path, "--venv", str(venv), "--index-url", server.url("json"), "--with", "torchvision")
    assert r.returncode == 0, r.stderr
    assert "nothing to change" in r.stdout + r.stderr and "installing" not in r.stderr
    assert (tmp_path / "pylock.machine.toml").stat().st_mtime_ns == mtime

    # a package installed by hand since: the next setup changes nothing in the venv, and says which lock
    # entries it adds and why (not a bare "wrote pylock.machine.toml")
    (tmp_path / "wheels").mkdir()
    subprocess.run([str(venv / "bin/python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    str(build_wheel(tmp_path / "wheels", "hand-made", "1.0", "py3-none-any"))], check=True, capture_output=True)
    r = run_setup(tmp_path, "--venv", str(venv), "--index-url", server.url("json"), "--with", "torchvision")
    assert r.returncode == 0 and "nothing to change" in r.stdout + r.stderr, r.stderr
    assert "updated pylock.machine.toml to what the venv holds now: 1 added: hand-made 1.0" in r.stderr
    assert 'name = "hand-made"' in (tmp_path / "pylock.machine.toml").read_text()
    mtime = (tmp_path / "pylock.machine.toml").stat().st_mtime_ns

    # upgrade to a torch whose import raises: verification fails, the exact previous set comes back
    r = run_setup(tmp_path, "--venv", str(venv), "--index-url", server.url("broken"))
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()[-1]
    assert "verification failed" in err and "import torch failed" in err and "put back exactly" in err
    assert installed(venv) == {"torch": "2.6.0+cpu", "torchvision": "0.21.0+cpu", "hand-made": "1.0"}
    assert subprocess.run([str(venv / "bin/python"), "-c", "import torch; assert torch.__version__ == '2.6.0+cpu'"]).returncode == 0
    assert not (venv / ".envkit-rollback").exists()
    assert (tmp_path / "pylock.machine.toml").stat().st_mtime_ns == mtime

    # drift: envkit check --lock sees nothing, then a changed version
    r = envkit("check", "--python", str(venv / "bin/python"), "--lock", "pylock.machine.toml", "--json", "--pyproject", "none.toml", cwd=tmp_path)
    drift = json.loads(r.stdout)["drift"]
    assert drift["changed"] is False, drift
    subprocess.run([str(venv / "bin/python"), "-m", "pip", "install", "-q", "--no-deps", "--index-url", server.url("json"),
                    "torch==2.5.1+cpu"], check=True, capture_output=True)
    r = envkit("check", "--python", str(venv / "bin/python"), "--lock", "pylock.machine.toml", "--pyproject", "none.toml", cwd=tmp_path)
    assert r.returncode == 1 and "DRIFT torch: 2.6.0+cpu in the lock, 2.5.1+cpu installed" in r.stdout

    # rebuild from the lock puts the locked set back (hashes enforced)
    r = run_setup(tmp_path, "--venv", str(venv), "--lock", "pylock.machine.toml", env={"ENVKIT_INDEX_URL": server.url("json")})
    assert r.returncode == 0, r.stderr
    assert installed(venv) == {"torch": "2.6.0+cpu", "torchvision": "0.21.0+cpu", "hand-made": "1.0"}


def _freeze(venv) -> list[str]:
    out = subprocess.run([str(venv / "bin/python"), "-m", "pip", "freeze"], capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def test_a_venv_rebuilt_from_its_lock_freezes_the_same(server, venv, tmp_path):
    """The check users make first: `pip freeze` of a venv built from the lock shows the same lines as
    the venv the lock was taken from (pip recorded each checked wheel named by path as `torch @
    file:///<envkit's cache>/...`)."""
    r = run_setup(tmp_path, "--venv", str(venv), "--index-url", server.url("json"), "--with", "torchvision")
    assert r.returncode == 0, r.stderr
    second = tmp_path / "rebuilt"
    r = run_setup(tmp_path, "--venv", str(second), "--lock", "pylock.machine.toml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "sha256 enforced" in r.stdout  # still installed from the checked files, hashes required
    original, rebuilt = _freeze(venv), _freeze(second)
    assert "torch==2.6.0+cpu" in original and not any("@" in line for line in rebuilt), rebuilt
    assert rebuilt == original


def test_the_lock_is_a_pylock_by_name_and_an_envkit_lock_of_before_still_installs(server, venv, tmp_path):
    """setup writes its lock as pylock.machine.toml, PEP 751's name (pip and uv take a file for a lock
    by its name; pylock.toml stays `envkit lock`'s), and packaging's Pylock accepts it. An envkit.lock
    of before, in this format or the old one (lock_version = 1), still installs through `setup
    --lock`; a setup beside one writes pylock.machine.toml from it and leaves it as it was."""
    from envkit.resources import load_toml

    pylock = pytest.importorskip("packaging.pylock")
    r = run_setup(tmp_path, "--venv", str(venv), "--index-url", server.url("json"))
    assert r.returncode == 0, r.stderr
    lock = tmp_path / "pylock.machine.toml"
    assert "wrote pylock.machine.toml" in r.stderr and not list(tmp_path.glob("*.lock"))
    assert not (tmp_path / "pylock.toml").exists()
    data = load_toml(lock)
    pylock.Pylock.from_dict(data)
    (torch,) = data["packages"]
    assert (torch["name"], torch["version"]) == ("torch", "2.6.0+cpu")

    old = tmp_path / "envkit.lock"
    machine = data["tool"]["envkit"]["platform"]
    wheel = torch["wheels"][0]
    v1 = (f'lock_version = 1\nenvkit = "0.1.0"\n\n[platform]\nsystem = "{machine["system"]}"\narch = "{machine["arch"]}"\n'
          f'python_minor = "{machine["python_minor"]}"\nbackend = "cpu"\n\n[profile]\nname = "cpu"\n\n[source]\ntorch = "stable"\n'
          f'index_urls = []\n\n[env]\n\n[[package]]\nname = "torch"\nversion = "2.6.0+cpu"\n'
          f'sha256 = "{wheel["hashes"]["sha256"]}"\nurl = "{wheel["url"]}"\n')
    for what, text in (("this format", lock.read_text()), ("lock_version = 1", v1)):
        old.write_text(text)
        rebuilt = tmp_path / f"rebuilt-{len(what)}"
        r = run_setup(tmp_path, "--venv", str(rebuilt), "--lock", "envkit.lock")
        assert r.returncode == 0, (what, r.stdout + r.stderr)
        assert installed(rebuilt) == {"torch": "2.6.0+cpu"}, what
    assert "note: envkit.lock is in envkit's old lock format (lock_version = 1)" in r.stderr

    # the first setup after the rename, beside the envkit.lock: pylock.machine.toml from it, envkit.lock untouched
    lock.unlink()
    before = old.read_bytes()
    r = run_setup(tmp_path, "--venv", str(venv), "--index-url", server.url("json"))
    assert r.returncode == 0, r.stderr
    assert "wrote pylock.machine.toml, against envkit.lock: the same 1 versions" in r.stderr
    assert "note: pylock.machine.toml is the lock's name now" in r.stderr
    assert old.read_bytes() == before and load_toml(lock)["packages"] == data["packages"]


def test_nightly_pinned_test_and_specifier_into_fresh_venvs(server, venv, tmp_path):
    r = run_setup(tmp_path, "--venv", str(venv), "--index-url", server.url("html"), "--torch", "nightly")
    assert r.returncode == 0, r.stderr
    assert installed(venv) == {"torch": "2.8.0.dev20250101+cpu"}
    cached = list((tmp_path / "cache/wheels").glob("torch-2.8.0.dev20250101*.whl"))
    assert cached, "a nightly wheel is kept in envkit's cache"
    assert f'cached = "{cached[0].name}"' in (tmp_path / "pylock.machine.toml").read_text()
    for req, want in (("2.5.1", "2.5.1+cpu"), (">=2.5,<2.6", "2.5.1+cpu"), ("test", "2.7.0rc1+cpu")):
        r = run_setup(tmp_path, "--venv", str(venv), "--index-url", server.url("json"), "--torch", req, "--dry-run", "--json")
        plan = json.loads(r.stdout)
        assert r.returncode == 0 and plan["versions"] == {"torch": want}, r.stderr
        assert plan["changes"] == [{"name": "torch", "from": "2.8.0.dev20250101+cpu", "to": want}]
    r = run_setup(tmp_path, "--venv", str(venv), "--index-url", server.url("json"), "--torch", "2.5.1")
    assert r.returncode == 0, r.stderr
    assert installed(venv) == {"torch": "2.5.1+cpu"}


def test_folder_of_wheels_as_index_is_find_links(server, venv, tmp_path):
    """pip rejects a plain folder as --index-url: it goes in as --no-index --find-links, from a
    relative path or a file:// URL, for the install and for the rebuild from the lock."""
    folder = tmp_path / "wheels"
    folder.mkdir()
    for w in server.wheels["good"]:
        shutil.copy(w, folder)
    r = run_setup(tmp_path, "--venv", str(venv), "--index-url", folder.as_uri(), "--torch", "2.5.1", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["versions"] == {"torch": "2.5.1+cpu"}
    assert f"--no-index --find-links {folder} " in plan["commands"][-1] and "--index-url" not in plan["commands"][-1]

    r = run_setup(tmp_path, "--venv", str(venv), "--index-url", "wheels")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "-m pip install --no-compile --report" in r.stderr and f"--no-index --find-links {folder} " in r.stderr
    assert installed(venv) == {"torch": "2.6.0+cpu"}
    lock = (tmp_path / "pylock.machine.toml").read_text()
    assert f'index_urls = ["{folder}"]' in lock and "sha256 = " in lock and 'installer = "pip"' in lock

    subprocess.run([str(venv / "bin/python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--find-links", str(folder),
                    "torch==2.5.1+cpu"], check=True, capture_output=True)
    r = run_setup(tmp_path, "--venv", str(venv), "--lock", "pylock.machine.toml")
    assert r.returncode == 0, r.stdout + r.stderr
    # the locked files (from the folder), checked, then installed by pip reading no index at all
    assert "--require-hashes --no-index -r" in r.stdout and "sha256 enforced" in r.stdout
    assert installed(venv) == {"torch": "2.6.0+cpu"}


@pytest.mark.parametrize("how", ["refused", "garbage", "slow"])
def test_index_problems_one_line_exit_2_nothing_created(server, tmp_path, how):
    url = refused_url() if how == "refused" else server.url(how)
    t0 = time.monotonic()
    r = run_setup(tmp_path, "--index-url", url, env={"ENVKIT_INDEX_TIMEOUT": "0.5"})
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert {"refused": "connection was refused", "garbage": "not a package index page", "slow": "did not answer within 0.5 s"}[how] in r.stderr
    assert time.monotonic() - t0 < 10
    assert not (tmp_path / ".envkit").exists() and not (tmp_path / "pylock.machine.toml").exists()


def test_nightly_offline_from_pytorch_says_so(tmp_path):
    """The real default: download.pytorch.org, unreachable on an offline machine (a closed port stands in)."""
    r = run_setup(tmp_path, "--torch", "nightly", "--dry-run", env={"ENVKIT_INDEX_URL": refused_url()})
    assert r.returncode == 2 and "cannot reach the package index" in r.stderr


def _replay(tmp_path, name, *args):
    return envkit("setup", "--replay", str(snapshot_path(name)), "--dry-run", "--json", *args, cwd=tmp_path, timeout=60)


def test_replay_plans_for_other_machines(tmp_path):
    plan = json.loads(_replay(tmp_path, "m3_max_macos14", "--torch", "nightly").stdout)
    assert plan["device"] == "mps" and plan["index_url"] == "https://download.pytorch.org/whl/nightly/cpu"
    assert plan["resolved"] is False and "nightly" in plan["spec"] and "--pre" in plan["commands"][-1]

    r = _replay(tmp_path, "m1_pro_macos12", "--torch", "2.9")
    assert r.returncode == 2 and "macOS 14" in r.stderr and "fix:" in r.stderr and "<2.5" in r.stderr
    plan = json.loads(_replay(tmp_path, "m1_pro_macos12").stdout)
    assert plan["limit"] == "<2.5" and plan["index_url"] == "https://pypi.org/simple"

    plan = json.loads(_replay(tmp_path, "intel_mac").stdout)
    assert plan["limit"] == "<=2.2.2" and any("2.2.2" in n for n in plan["notes"])
    assert _replay(tmp_path, "intel_mac", "--torch", "nightly").returncode == 2

    plan = json.loads(_replay(tmp_path, "linux_h100").stdout)
    # driver 550: no CUDA 13 (needs 580), and stable (2.14) ships no cu128: cu126
    assert plan["device"] == "cuda" and plan["backend"] == "cu126"
    assert plan["index_url"] == "https://download.pytorch.org/whl/cu126"

    plan = json.loads(_replay(tmp_path, "linux_old_driver").stdout)
    assert plan["backend"] == "cu118" and plan["limit"] == "<2.8"  # driver 470: only CUDA 11.8 builds
    r = _replay(tmp_path, "linux_old_driver", "--torch", "nightly")
    assert r.returncode == 1 and "driver" in r.stderr and "fix:" in r.stderr  # the machine, not the input: exit 1
    assert not (tmp_path / ".envkit").exists()


def test_replay_resolves_against_a_given_index(server, tmp_path):
    plan = json.loads(_replay(tmp_path, "linux_no_gpu", "--index-url", server.url("json")).stdout)
    assert plan["versions"] == {"torch": "2.6.0+cpu"} and plan["resolved"] is True


MAC_LOCK = ('lock_version = 1\nenvkit = "0.1.0"\n[platform]\nsystem = "Darwin"\narch = "arm64"\npython_minor = "3.12"\n'
            '[profile]\nname = "m3-max"\n[source]\ntorch = "stable"\n[env]\n[[package]]\nname = "torch"\nversion = "2.9.1"\n')


def test_bad_input_one_line_exit_2_nothing_changed(tmp_path):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "corrupt.lock").write_text("lock_version = [unclosed\n")
    (tmp_path / "mac.lock").write_text(MAC_LOCK)
    before = sorted((p.name, p.stat().st_mtime_ns) for p in tmp_path.iterdir())
    cases = {
        ("--profile", "no-such-profile"): "no-such-profile",
        ("--torch", ">>2"): "is not a version",
        ("--lock", "corrupt.lock"): "corrupt.lock: not a valid lock",
        ("--lock", "mac.lock"): "another platform",
        ("--venv", "afile"): "is a file",
        ("--with", "numpy"): "pairs only",
    }
    for args, needle in cases.items():
        r = run_setup(tmp_path, *args, "--dry-run" if args[0] != "--lock" else "--yes")
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr, (args, r.stderr)
    assert sorted((p.name, p.stat().st_mtime_ns) for p in tmp_path.iterdir()) == before


@pytest.mark.skipif(sys.platform != "linux", reason="the lock is for macOS on arm64: only off macOS is its OS another one")
def test_a_lock_from_another_os_names_the_difference(tmp_path):
    (tmp_path / "mac.lock").write_text(MAC_LOCK)
    r = run_setup(tmp_path, "--lock", "mac.lock")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "the lock was made on another platform: OS Darwin in the lock, Linux here;" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mac.lock"]  # nothing made: no venv, no cache


def test_index_password_never_printed_or_written(server, venv, tmp_path):
    """An index URL with credentials installs (pip gets the real URL) but the plan, the installer
    lines, the lock, state.json and the env scripts carry it without user and password."""
    url = server.url("json").replace("://", "://bob:PASSWORD9@", 1)
    r = run_setup(tmp_path, "--venv", str(venv), "--index-url", url)
    assert r.returncode == 0, r.stderr
    assert installed(venv)["torch"] == "2.6.0+cpu"
    assert "PASSWORD9" not in r.stdout + r.stderr and "bob" not in r.stdout + r.stderr
    assert server.url("json") in r.stdout  # still names the index
    written = [tmp_path / "pylock.machine.toml", *(p for p in (tmp_path / ".envkit").rglob("*") if p.is_file())]
    for path in written:
        assert "PASSWORD9" not in path.read_text(errors="replace"), path
    # the lock names the bare index; rebuilding with the credentialed URL in PIP_INDEX_URL works
    second = tmp_path / "second"
    r = run_setup(tmp_path, "--lock", "pylock.machine.toml", "--venv", str(second), env={"PIP_INDEX_URL": url})
    assert r.returncode == 0, r.stderr
    assert "PASSWORD9" not in r.stdout + r.stderr
    assert installed(second)["torch"] == "2.6.0+cpu"
