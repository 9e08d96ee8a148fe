"""Offline and wrong, told apart, in one source order for `envkit setup` and `envkit lock`: PyTorch's
index for the build, else (when it cannot be reached) pip's configured sources, said in one line.
A version that is on none of them says so, with the versions they have (exit 2); sources that
cannot be reached at all say that (offline?).

PyTorch's index is a closed port on 127.0.0.1 (ENVKIT_PYTORCH_INDEX); pip's configuration is a
pip.conf (PIP_CONFIG_FILE) pointing at a real index on 127.0.0.1 (tests/localindex.py) and a folder
of wheels, with none of this machine's PIP_* variables."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

import pylock_wheels
from conftest import _EMPTY_CONFIG_DIR
from envkit.resources import load_toml
from localindex import LocalIndex, refused_url

PY = f"{sys.version_info[0]}.{sys.version_info[1]}"


def run(*args, cwd, pip_conf=None, env=None, timeout=240):
    """envkit with pip configured by `pip_conf` alone (a pip.conf's [global] lines), PyTorch's index
    unreachable unless `env` says otherwise."""
    e = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "ENVKIT_", "PYTORCH_"))}
    conf = cwd / "pip.conf"
    conf.write_text("[global]\n" + "".join(f"{k} = {v}\n" for k, v in (pip_conf or {}).items()))
    e.update(PYTHONUNBUFFERED="1", ENVKIT_CONFIG_DIR=_EMPTY_CONFIG_DIR, PIP_CONFIG_FILE=str(conf),
             ENVKIT_PYTORCH_INDEX=refused_url().removesuffix("/simple") + "/whl", ENVKIT_CACHE_DIR=str(cwd / "cache"),
             UV_CACHE_DIR=str(cwd / "uv-cache"), **(env or {}))
    return subprocess.run([sys.executable, "-m", "envkit", *args], capture_output=True, text=True, cwd=cwd, env=e,
                          timeout=timeout)


def one_line(r) -> str:
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_setup_a_missing_version_is_not_offline_and_a_real_pin_falls_back(server, venv, tmp_path):
    pip_index = server.url("json")
    common = ("setup", "--venv", str(venv), "--installer", "pip", "--dry-run")
    r = run(*common, "--torch", "9.9", cwd=tmp_path, pip_conf={"index-url": pip_index})
    line = one_line(r)
    assert r.returncode == 2, r.stderr
    assert "torch 9.9 (a +cpu build) is on none of: http://127.0.0.1:" in line
    assert f"/whl/cpu (unreachable: the connection was refused), {pip_index}; they have 2.5.1+cpu, 2.6.0+cpu (fix:" in line
    assert "does not resolve" not in line and "cannot reach" not in line

    r = run(*common, "--torch", "2.5.1", "--json", cwd=tmp_path, pip_conf={"index-url": pip_index})
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["versions"] == {"torch": "2.5.1+cpu"} and plan["sources"] == [pip_index]
    said = [n for n in plan["notes"] if "pip's configured sources" in n and "unreachable" in n]
    assert len(said) == 1 and said[0].endswith(f"torch from pip's configured sources ({pip_index})"), plan["notes"]

    # the plan's index line names every source pip is configured with (pip.conf and PIP_* variables: pip
    # installs torch's dependencies from any of them), not only the one torch was found on
    links, extra = tmp_path / "wheels", server.url("html")
    links.mkdir()
    r = run(*common[:-1], "--torch", "2.5.1", "--dry-run", cwd=tmp_path, pip_conf={"index-url": pip_index, "find-links": str(links)},
            env={"PIP_EXTRA_INDEX_URL": extra})
    assert r.returncode == 0, r.stderr
    assert f"  index     pip configured sources: {links}, {pip_index}, {extra} (torch from {pip_index}, {extra})  [" in r.stdout

    # offline: pip's sources cannot be reached either; that is what it says, not "on none of"
    down = refused_url()
    r = run(*common, "--torch", "2.5.1", cwd=tmp_path, pip_conf={"index-url": down})
    line = one_line(r)
    assert r.returncode == 2 and "cannot reach the package index http://127.0.0.1:" in line
    assert f"nor pip's configured sources ({down}: the connection was refused" in line and "none of" not in line


@pytest.fixture(scope="module")
def pylock_index(tmp_path_factory):
    """A PyPI-style index (macOS torch, the dependencies) and a folder of the +cpu builds: pip's
    configuration on a CPU box that has torch's CPU wheels on its disk (find-links)."""
    pytest.importorskip("packaging.pylock")
    wheels = pylock_wheels.build(tmp_path_factory.mktemp("pylock-wheels"))
    folder = tmp_path_factory.mktemp("find-links")
    for w in wheels["cpu"]:
        shutil.copy(w, folder)
    with LocalIndex(wheels) as srv:
        yield srv, folder


def test_lock_falls_back_as_setup_does_and_a_missing_version_says_what_there_is(pylock_index, tmp_path):
    srv, folder = pylock_index
    conf = {"index-url": f"{srv.base}/pypi/simple", "find-links": str(folder)}
    r = run("lock", "--json", cwd=tmp_path, pip_conf=conf)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["targets"]["linux-x86_64-cpu"]["torch"] == "2.13.0+cpu"
    said = [ln for ln in r.stderr.splitlines() if "pip's configured sources" in ln]
    assert len(said) == 1 and "/whl/cpu is unreachable (the connection was refused" in said[0], r.stderr
    assert said[0].endswith(f"torch from pip's configured sources ({folder})")
    torch = next(p for p in load_toml(tmp_path / "pylock.toml")["packages"] if p["name"] == "torch")
    assert torch["wheels"][0]["url"] == (folder / f"torch-2.13.0+cpu-cp{PY.replace('.', '')}-cp{PY.replace('.', '')}-"
                                         "manylinux_2_28_x86_64.whl").as_uri()

    r = run("lock", "--torch", "9.9", cwd=tmp_path, pip_conf=conf)
    line = one_line(r)
    assert r.returncode == 2
    assert "torch 9.9 (a +cpu build for linux-x86_64-cpu) is on none of: http://127.0.0.1:" in line
    assert f"/whl/cpu (unreachable: the connection was refused), {folder}, {srv.base}/pypi/simple; " \
           "they have 2.12.0+cpu, 2.13.0+cpu (fix:" in line


def test_lock_from_an_envkit_lock_finds_unrecorded_wheels_through_pip_sources(pylock_index, tmp_path):
    """An envkit.lock (the machine lock's name before pylock.machine.toml, still read) written after
    setup fell back names no index (pip's sources were used); the packages it recorded without a
    wheel are looked up where pip looks."""
    from envkit.install.lock import record, single

    srv, folder = pylock_index
    cpu = next(p for p in srv.wheels["cpu"] if "2.13.0" in p.name and p.name.startswith("torch-"))

    def write(typing_version):
        record.write(tmp_path / "envkit.lock", single.doc(
            platform={"system": "Linux", "arch": "x86_64", "python_minor": PY, "backend": "cpu", "device": "cpu"},
            profile={"name": "cpu"}, source={"torch": "stable", "index_urls": []}, env={},
            entries=[{"name": "torch", "version": "2.13.0+cpu", "url": (folder / cpu.name).as_uri(),
                      "sha256": hashlib.sha256(cpu.read_bytes()).hexdigest()},
                     {"name": "typing_extensions", "version": typing_version}], envkit_version="0.1.0"))

    conf = {"index-url": f"{srv.base}/pypi/simple", "find-links": str(folder)}
    write("4.9.0")
    r = run("lock", "--from", "envkit.lock", cwd=tmp_path, pip_conf=conf)
    assert r.returncode == 0, r.stderr
    assert {p["name"]: p["version"] for p in load_toml(tmp_path / "pylock.toml")["packages"]} == {
        "torch": "2.13.0+cpu", "typing-extensions": "4.9.0"}
    said = [ln for ln in r.stderr.splitlines() if "pip's configured sources" in ln]
    assert said == [f"note: the lock names no index for typing-extensions 4.9.0: found on pip's configured sources "
                    f"({srv.base}/pypi/simple)"], r.stderr

    write("4.0.1")
    r = run("lock", "--from", "envkit.lock", cwd=tmp_path, pip_conf=conf)
    line = one_line(r)
    assert r.returncode == 2
    assert f"typing-extensions 4.0.1 is on none of: {folder}, {srv.base}/pypi/simple; they have " \
           "typing-extensions 4.9.0, 4.12.2 (fix:" in line
