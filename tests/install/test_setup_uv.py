"""`envkit setup --installer uv` end to end against the local index (tests/localindex.py): install,
re-run, a failed upgrade rolled back, the lock (hashes from the index, since uv has no --report)
rebuilt with hashes enforced, nightly with --prerelease allow, a pin, a folder of wheels, `auto`
picking uv, and the switch to pip when torch comes from pip's configured sources.

Skipped where uv is missing; the `test` extra installs it (`pip install uv` puts it beside the
interpreter, where envkit looks as well as on PATH)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import envkit
from envkit.install.act.execute import which_uv
from envkit.resources import load_toml
from localindex import installed, build_wheel, refused_url

UV = which_uv()
pytestmark = pytest.mark.skipif(UV is None, reason="uv is not installed (`pip install -e .[test]` installs it)")


def installer_of(venv: Path, name: str) -> str:
    """What the dist-info's INSTALLER file says: proof of which tool installed it."""
    out = subprocess.run([str(venv / "bin/python"), "-I", "-c",
                          f"from importlib import metadata as m; print((m.distribution({name!r}).read_text('INSTALLER') or '').strip())"],
                         capture_output=True, text=True, check=True).stdout
    return out.strip()


def run_setup(tmp_path, *args, env=None):
    e = {"ENVKIT_CACHE_DIR": str(tmp_path / "cache"), "UV_CACHE_DIR": str(tmp_path / "uv-cache"), **(env or {})}
    return envkit("setup", "--yes", "--no-selftest", *args, cwd=tmp_path, env=e, timeout=120)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_uv_install_rerun_rollback_and_lock_rebuilt_with_hashes(server, venv, tmp_path):
    r = run_setup(tmp_path, "--installer", "uv", "--venv", str(venv), "--index-url", server.url("json"), "--with", "torchvision")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"installing: {UV} pip install --python {venv}/bin/python --index-url {server.url('json')}" in r.stderr
    assert installed(venv) == {"torch": "2.6.0+cpu", "torchvision": "0.21.0+cpu"}
    assert installer_of(venv, "torch") == "uv"

    # the lock says uv made it; its hashes are the index's, which are those of the files served
    lock = load_toml(tmp_path / "pylock.machine.toml")
    assert lock["tool"]["envkit"]["source"]["installer"] == "uv"
    files = {w.name: w for w in server.wheels["good"]}
    want = {"torch": sha(files[f"torch-2.6.0+cpu-py3-none-{_plat()}.whl"]),
            "torchvision": sha(files[f"torchvision-0.21.0+cpu-py3-none-{_plat()}.whl"])}
    assert {p["name"]: p["wheels"][0]["hashes"]["sha256"] for p in lock["packages"]} == want

    # again: nothing to change
    mtime = (tmp_path / "pylock.machine.toml").stat().st_mtime_ns
    r = run_setup(tmp_path, "--installer", "uv", "--venv", str(venv), "--index-url", server.url("json"), "--with", "torchvision")
    assert r.returncode == 0 and "nothing to change" in r.stdout + r.stderr and "installing" not in r.stderr, r.stderr

    # an upgrade by uv whose verification fails is undone exactly
    r = run_setup(tmp_path, "--installer", "uv", "--venv", str(venv), "--index-url", server.url("broken"))
    assert r.returncode == 2, r.stdout + r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert "verification failed" in last and "import torch failed" in last and "put back exactly" in last
    assert installed(venv) == {"torch": "2.6.0+cpu", "torchvision": "0.21.0+cpu"}
    assert subprocess.run([str(venv / "bin/python"), "-c", "import torch; assert torch.__version__ == '2.6.0+cpu'"]).returncode == 0
    assert not (venv / ".envkit-rollback").exists()
    assert (tmp_path / "pylock.machine.toml").stat().st_mtime_ns == mtime

    # drift, then the lock puts the set back with --require-hashes: the uv-made hashes are right
    subprocess.run([UV, "pip", "install", "--python", str(venv / "bin/python"), "--index-url", server.url("json"),
                    "torch==2.5.1+cpu"], check=True, capture_output=True, env=_uv_env(tmp_path))
    r = run_setup(tmp_path, "--venv", str(venv), "--lock", "pylock.machine.toml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "sha256 enforced" in r.stdout and "--require-hashes" in r.stdout
    assert installed(venv) == {"torch": "2.6.0+cpu", "torchvision": "0.21.0+cpu"}


def test_uv_nightly_pin_and_auto(server, venv, tmp_path):
    # auto picks uv (found beside this interpreter or on PATH); nightly: --prerelease allow
    r = run_setup(tmp_path, "--installer", "auto", "--venv", str(venv), "--index-url", server.url("html"), "--torch", "nightly")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "installer uv" in r.stdout and "--prerelease allow" in r.stderr
    assert installed(venv) == {"torch": "2.8.0.dev20250101+cpu"} and installer_of(venv, "torch") == "uv"
    cached = list((tmp_path / "cache/wheels").glob("torch-2.8.0.dev20250101*.whl"))
    assert cached
    lock = load_toml(tmp_path / "pylock.machine.toml")
    (torch,) = [p for p in lock["packages"] if p["name"] == "torch"]
    assert torch["tool"]["envkit"]["cached"] == cached[0].name and torch["wheels"][0]["hashes"]["sha256"] == sha(cached[0])
    assert lock["tool"]["envkit"]["source"]["installer"] == "uv"

    r = run_setup(tmp_path, "--installer", "uv", "--venv", str(venv), "--index-url", server.url("json"), "--torch", "2.5.1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "--prerelease" not in r.stderr
    assert installed(venv) == {"torch": "2.5.1+cpu"}


def test_uv_from_a_folder_of_wheels_into_a_new_venv(server, tmp_path):
    """A plain folder is not an index: uv gets --no-index --find-links; the venv is created too.
    torch here depends on another package: the lock hashes it too (looked up where uv found it)."""
    folder = tmp_path / "wheels"
    folder.mkdir()
    for w in server.wheels["good"]:
        shutil.copy(w, folder)
    build_wheel(folder, "torch", "2.6.0+cpu", requires=["envkit-testdep"])  # replaces the copied one
    dep = build_wheel(folder, "envkit-testdep", "1.0", tag="py3-none-any")
    venv = tmp_path / "new-venv"
    r = run_setup(tmp_path, "--installer", "uv", "--venv", str(venv), "--index-url", "wheels", "--with", "torchvision")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"pip install --python {venv}/bin/python --no-index --find-links {folder}" in r.stderr
    assert "--index-url" not in r.stderr.split("installing:", 1)[1].splitlines()[0]
    assert installed(venv) == {"torch": "2.6.0+cpu", "torchvision": "0.21.0+cpu", "envkit-testdep": "1.0"}
    assert (venv / "bin/pip").exists()  # the venv has pip (setup --lock rebuilds with it)
    lock = load_toml(tmp_path / "pylock.machine.toml")
    assert lock["tool"]["envkit"]["source"]["index_urls"] == [str(folder)]
    hashes = {p["name"]: p["wheels"][0]["hashes"]["sha256"] for p in lock["packages"]}
    assert hashes["envkit-testdep"] == sha(dep) and "versions-only" not in lock["tool"]["envkit"], hashes


def test_uv_with_pip_configured_sources_switches_to_pip(server, tmp_path, monkeypatch):
    """PyTorch's index unreachable and none named: torch comes from pip's configuration, which uv
    does not read, so setup installs with pip and says so."""
    from click.testing import CliRunner

    from envkit.commands.setup import setup
    from envkit.install.index import pip_config
    from envkit.install.choice import model

    unreachable = refused_url()
    monkeypatch.setattr(model, "index_for", lambda backend, channel: unreachable)
    monkeypatch.setattr(pip_config, "pip_sources", lambda python: ([server.url("json")], []))
    monkeypatch.setenv("ENVKIT_INDEX_TIMEOUT", "0.5")
    monkeypatch.delenv("ENVKIT_INDEX_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(setup, ["--installer", "uv", "--dry-run", "--json", "--venv", str(tmp_path / "v"), "--profile", "conservative"])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output[r.output.index("{"):])
    assert plan["installer"] == "pip" and plan["index_url"] is None and plan["versions"] == {"torch": "2.6.0+cpu"}
    assert plan["commands"][-1].split()[1:4] == ["-m", "pip", "install"]
    assert any("--installer uv: switching to pip" in n and "uv does not read" in n for n in plan["notes"]), plan["notes"]
    assert not (tmp_path / "v").exists()


def _plat() -> str:
    from localindex import PLATFORM

    return PLATFORM


def _uv_env(tmp_path) -> dict:
    import os

    return {**os.environ, "UV_CACHE_DIR": str(tmp_path / "uv-cache")}
