"""The README's set-up, in miniature, leaves `envkit check --lock` green: a project installed editable
(`pip install -e .`), `envkit setup` (torch, and the lock), then the project's test extra
(`pip install -e '.[test]'`). The lock records the project and its optional groups; what is
installed for them is the project's own, not drift, and `setup --lock` leaves it alone. A real
drift (a locked package upgraded behind the lock's back, a package nothing asked for) is still
reported.

The project builds with a PEP 517 backend of its own (no build requirements: pip installs it
offline) and its dependencies come from a real index on 127.0.0.1 (tests/localindex.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import _EMPTY_CONFIG_DIR
from localindex import LocalIndex, build_all, build_wheel, installed

BACKEND = '''"""A PEP 517/660 backend that builds this one project, with no build requirements."""
import base64, hashlib, os, zipfile

METADATA = """Metadata-Version: 2.1
Name: proj
Version: 1.0
Requires-Dist: dep-a
Requires-Dist: dep-t; extra == "test"
Requires-Dist: dep-u; extra == "other"
Provides-Extra: test
Provides-Extra: other
"""


def _wheel(directory, files):
    name = "proj-1.0-py3-none-any.whl"
    files = dict(files)
    files["proj-1.0.dist-info/METADATA"] = METADATA
    files["proj-1.0.dist-info/WHEEL"] = "Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
    record = []
    with zipfile.ZipFile(os.path.join(directory, name), "w") as zf:
        for path, text in files.items():
            data = text.encode()
            zf.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{path},sha256={digest},{len(data)}")
        record.append("proj-1.0.dist-info/RECORD,,")
        zf.writestr("proj-1.0.dist-info/RECORD", "\\n".join(record) + "\\n")
    return name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, {"proj/__init__.py": ""})


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, {"proj.pth": os.path.dirname(os.path.abspath(__file__)) + "\\n"})
'''

PYPROJECT = """[build-system]
requires = []
build-backend = "backend"
backend-path = ["."]

[project]
name = "proj"
version = "1.0"
dependencies = ["dep-a"]

[project.optional-dependencies]
test = ["dep-t"]
other = ["dep-u"]
"""


def clean_env(**extra) -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "ENVKIT_", "PYTORCH_"))}
    e.update(PYTHONUNBUFFERED="1", ENVKIT_CONFIG_DIR=_EMPTY_CONFIG_DIR, PIP_CONFIG_FILE=os.devnull, **extra)
    return e


def envkit(*args, cwd, timeout=240):
    return subprocess.run([sys.executable, "-m", "envkit", *args], capture_output=True, text=True, cwd=cwd,
                          env=clean_env(ENVKIT_CACHE_DIR=str(Path(cwd) / "cache")), timeout=timeout)


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    d = tmp_path_factory.mktemp("project-wheels")
    wheels = build_all(d)
    wheels["good"] = wheels["good"] + [
        build_wheel(d, "dep-a", "1.0", "py3-none-any"), build_wheel(d, "dep-a", "1.1", "py3-none-any"),
        build_wheel(d, "dep-t", "1.0", "py3-none-any", requires=["dep-t2"]),
        build_wheel(d, "dep-t2", "1.0", "py3-none-any"), build_wheel(d, "dep-u", "1.0", "py3-none-any"),
        build_wheel(d, "stray", "1.0", "py3-none-any")]
    with LocalIndex(wheels) as srv:
        yield srv


def pip(venv: Path, *args: str, cwd: Path) -> None:
    r = subprocess.run([str(venv / "bin/python"), "-m", "pip", "install", "-q", *args], capture_output=True, text=True,
                       cwd=cwd, env=clean_env(), timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr


def check(lock: str, venv: Path, cwd: Path) -> tuple[int, dict]:
    r = envkit("check", "--lock", lock, "--python", str(venv / "bin/python"), "--require", "python>=3.8", "--json", cwd=cwd)
    return r.returncode, json.loads(r.stdout)["drift"]


def test_the_readme_setup_leaves_check_green_and_real_drift_still_shows(index, venv):
    pytest.importorskip("packaging.pylock")  # envkit lock --from writes a pylock.toml
    proj = venv.parent / "proj"
    proj.mkdir()
    (proj / "pyproject.toml").write_text(PYPROJECT)
    (proj / "backend.py").write_text(BACKEND)
    url = index.url("json")
    # 1. pip install -e . && envkit setup
    pip(venv, "--index-url", url, "-e", ".", "dep-a==1.0", cwd=proj)
    r = envkit("setup", "--venv", str(venv), "--index-url", url, "--installer", "pip", "--torch", "2.5.1", "--yes",
               "--no-selftest", cwd=proj)
    assert r.returncode == 0, r.stderr
    # 2. pip install -e '.[test]'
    pip(venv, "--index-url", url, "-e", ".[test]", cwd=proj)
    assert installed(venv) == {"proj": "1.0", "dep-a": "1.0", "dep-t": "1.0", "dep-t2": "1.0", "torch": "2.5.1+cpu"}
    r = envkit("lock", "--from", "pylock.machine.toml", cwd=proj)
    assert r.returncode == 0, r.stderr

    for lock in ("pylock.machine.toml", "pylock.toml"):
        rc, drift = check(lock, venv, proj)
        assert (rc, drift["lines"]) == (0, []), drift
        assert drift["project"] == {"name": "proj", "extras": ["test"], "packages": {"dep-t": "1.0", "dep-t2": "1.0"}}
        r = envkit("check", "--lock", lock, "--python", str(venv / "bin/python"), "--require", "python>=3.8", cwd=proj)
        assert r.returncode == 0 and "DRIFT" not in r.stdout, r.stdout
        assert "2 packages installed for the project proj[test] are not in the lock (not drift)" in r.stdout
        r = envkit("setup", "--venv", str(venv), "--lock", lock, "--dry-run", "--json", cwd=proj)
        plan = json.loads(r.stdout)
        assert r.returncode == 0 and plan["nothing_to_do"] is True and plan["changes"] == [], r.stderr
        assert not [c for c in plan["commands"] if "uninstall" in c]

    # a lock written outside the project (it names none): the project installed editable here, and what
    # its installed extras pulled in, are still outside the lock's scope; the last line says the verdict once
    outside = venv.parent / "outside"
    outside.mkdir()
    text = (proj / "pylock.machine.toml").read_text()
    start = text.index("[tool.envkit.project]")
    end = text.find("\n[", start + 1)
    (outside / "pylock.machine.toml").write_text(text[:start] + (text[end + 1:] if end != -1 else ""))
    r = envkit("check", "--lock", "pylock.machine.toml", "--python", str(venv / "bin/python"), "--require", "python>=3.8", cwd=outside)
    assert r.returncode == 0 and "DRIFT" not in r.stdout, r.stdout
    assert "2 packages installed for the project proj[test] are not in the lock (not drift)" in r.stdout
    assert r.stdout.splitlines()[-1] == "1/1 gates hold; the environment matches pylock.machine.toml"

    # a real drift: a locked package upgraded behind the lock's back, and a package nothing asked for
    pip(venv, "--index-url", url, "-U", "dep-a", "stray", cwd=proj)
    for lock in ("pylock.machine.toml", "pylock.toml"):
        rc, drift = check(lock, venv, proj)
        assert rc == 1 and drift["lines"] == ["dep-a: 1.0 in the lock, 1.1 installed",
                                              "stray 1.0 is installed but not in the lock"], drift
    r = envkit("check", "--lock", "pylock.machine.toml", "--python", str(venv / "bin/python"), "--require", "python>=3.8", cwd=proj)
    assert r.stdout.splitlines()[-1] == "1/1 gates hold; 2 differences from pylock.machine.toml (DRIFT above): FAILED", r.stdout
    r = envkit("setup", "--venv", str(venv), "--lock", "pylock.machine.toml", "--sync", "--yes", "--no-selftest", cwd=proj)
    assert r.returncode == 0, r.stdout + r.stderr
    assert installed(venv) == {"proj": "1.0", "dep-a": "1.0", "dep-t": "1.0", "dep-t2": "1.0", "torch": "2.5.1+cpu"}
