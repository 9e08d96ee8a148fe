"""A pylock.toml that envkit wrote, installed as written by the real pip (26.1+, `pip install -r
pylock.toml`) and the real uv into fresh venvs, from a local index on 127.0.0.1 whose torch
requires setuptools (as torch 2.13.0 does: `setuptools>=77.0.3`) and a package only Windows
needs: each tool installs exactly the lock's versions, setuptools included, the Windows package
left out. The lock comes from `envkit lock`, from `envkit setup`'s pylock.machine.toml through
`envkit lock --from pylock.machine.toml`, or is that pylock.machine.toml itself (PEP 751's name:
pip and uv take it for a lock by its name). And the files meant for sharing are created as any other
tool creates them: 0666 less the umask (0644 under the usual 022), not mkstemp's private 0600."""

from __future__ import annotations

import json
import os
import platform
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import _EMPTY_CONFIG_DIR
from envkit.install.lock.resolve import uv_binary
from envkit.resources import load_toml
from localindex import PY, LocalIndex, build_wheel

pytest.importorskip("packaging.pylock")
X86 = "manylinux_2_28_x86_64"
TORCH_REQUIRES = ["filelock", "setuptools>=70", 'pywin-helper>=1; sys_platform == "win32"',
                  'opt-einsum>=3.3; extra == "opt-einsum"']
on_linux_x86 = pytest.mark.skipif(not (sys.platform == "linux" and platform.machine() == "x86_64"),
                                  reason="the locked wheels are Linux x86_64 ones: pip and uv install them only there")


def run(*args, cwd, env=None, umask=0o022, timeout=300):
    """envkit in a subprocess with none of this machine's pip, uv or envkit settings, under `umask`."""
    e = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "ENVKIT_", "PYTORCH_"))}
    e.update(PYTHONUNBUFFERED="1", ENVKIT_CONFIG_DIR=_EMPTY_CONFIG_DIR, PIP_CONFIG_FILE=os.devnull, **(env or {}))
    return subprocess.run([sys.executable, "-m", "envkit", *args], capture_output=True, text=True, cwd=cwd, env=e,
                          timeout=timeout, preexec_fn=lambda: os.umask(umask))


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    d = tmp_path_factory.mktemp("interop-wheels")
    torch = build_wheel(d, "torch", "2.13.0+cpu", f"{PY}-{PY}-{X86}", requires=TORCH_REQUIRES)
    pypi = [build_wheel(d, "filelock", "3.16.1", "py3-none-any"),
            build_wheel(d, "setuptools", "69.5.1", "py3-none-any"),
            build_wheel(d, "setuptools", "80.9.0", "py3-none-any"),
            build_wheel(d, "pywin-helper", "1.0", "py3-none-any"),
            build_wheel(d, "opt-einsum", "3.4.0", "py3-none-any"),
            build_wheel(d, "numpy", "2.2.6", f"{PY}-{PY}-{X86}")]
    with LocalIndex({"cpu": [torch], "pypi": pypi, "good": [torch] + pypi}) as srv:
        yield srv


def envs(srv, tmp: Path) -> dict:
    return {"ENVKIT_PYTORCH_INDEX": f"{srv.base}/whl", "UV_CACHE_DIR": str(tmp / "uv-cache"),
            "ENVKIT_CACHE_DIR": str(tmp / "cache")}


def write_lock(how: str, srv, tmp: Path, umask: int = 0o022) -> Path:
    """The lock in `tmp`: pylock.toml written by `envkit lock` or converted from the pylock.machine.toml
    of a setup, or that pylock.machine.toml itself."""
    setup = ("setup", "--yes", "--no-selftest", "--installer", "pip", "--torch", "2.13.0", "--index-url", srv.url("json"),
             "--venv", str(tmp / "setup-venv"))
    steps = {"envkit lock": [("lock", "--target", "linux-x86_64-cpu", "--torch", "2.13.0", "--index-url",
                              f"{srv.base}/pypi/simple")],
             "envkit lock --from pylock.machine.toml": [setup, ("lock", "--from", "pylock.machine.toml")],
             "envkit setup": [setup]}[how]
    for args in steps:
        r = run(*args, cwd=tmp, env=envs(srv, tmp), umask=umask)
        assert r.returncode == 0, r.stdout + r.stderr
    return tmp / ("pylock.machine.toml" if how == "envkit setup" else "pylock.toml")


def versions_in(venv: Path) -> dict[str, str]:
    """{name: version} of every distribution in the venv, pip itself left out (it installs; the lock
    does not hold it), read with importlib.metadata inside it."""
    out = subprocess.run([str(venv / "bin/python"), "-I", "-c",
                          "import json; from importlib import metadata as m; "
                          "print(json.dumps({d.metadata['Name'].lower(): d.version for d in m.distributions()}))"],
                         capture_output=True, text=True, check=True).stdout
    return {k: v for k, v in json.loads(out).items() if k != "pip"}


@pytest.fixture(scope="module")
def new_pip(tmp_path_factory):
    """A pip that reads pylock.toml (26.1+): this venv's, else one installed from the registry into
    a throw-away venv."""
    from packaging.version import Version

    import pip

    if Version(pip.__version__) >= Version("26.1"):
        return [sys.executable, "-m", "pip"]
    v = tmp_path_factory.mktemp("pip-26") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(v)], check=True)
    up = subprocess.run([str(v / "bin/python"), "-m", "pip", "install", "-q", "pip>=26.1"], capture_output=True, text=True,
                        timeout=300)
    if up.returncode != 0:
        pytest.skip(f"no pip 26.1+ (pylock.toml support) can be installed from the registry here: {up.stderr.strip()[-300:]}")
    return [str(v / "bin/python"), "-m", "pip"]


@on_linux_x86
@pytest.mark.parametrize("how", ["envkit lock", "envkit lock --from pylock.machine.toml", "envkit setup"])
def test_pip_and_uv_install_the_lock_as_written(how, index, new_pip, tmp_path):
    lock = write_lock(how, index, tmp_path)
    data = load_toml(lock)
    locked = {p["name"]: p["version"] for p in data["packages"]}

    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    by_pip = tmp_path / "by-pip"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(by_pip)], check=True)
    p = subprocess.run([*new_pip, "--python", str(by_pip / "bin/python"), "install", "-r", str(lock)], cwd=tmp_path,
                       capture_output=True, text=True, env={**clean, "PIP_CONFIG_FILE": os.devnull}, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr  # pip checks the closure: setuptools must be in the lock
    assert locked == {"torch": "2.13.0+cpu", "filelock": "3.16.1", "setuptools": "80.9.0", "numpy": "2.2.6"}
    assert versions_in(by_pip) == locked

    by_uv = tmp_path / "by-uv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(by_uv)], check=True)
    p = subprocess.run([uv_binary(), "pip", "install", "--python", str(by_uv / "bin/python"), "-r", str(lock)], cwd=tmp_path,
                       capture_output=True, text=True, env={**clean, "UV_CACHE_DIR": str(tmp_path / "uvc")}, timeout=300)
    assert p.returncode == 0, p.stderr
    assert versions_in(by_uv) == locked


@on_linux_x86
@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o027, 0o640)])
@pytest.mark.parametrize("how", ["envkit lock", "envkit lock --from pylock.machine.toml"])
def test_lock_files_are_created_for_sharing_under_the_umask(how, umask, mode, index, tmp_path):
    lock = write_lock(how, index, tmp_path, umask=umask)
    written = [lock] + ([tmp_path / "pylock.machine.toml"] if how.endswith("pylock.machine.toml") else [])
    assert {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in written} == {p.name: oct(mode) for p in written}
