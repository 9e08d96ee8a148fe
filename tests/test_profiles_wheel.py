"""The wheel ships the profiles and the env templates: build it, install it into a fresh venv
(--no-deps), and list them from there."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow

CODE = r"""
import importlib.resources as ir, json, os
from pathlib import Path
import envkit
from envkit.profiles import list_profiles
from envkit.profiles.envscripts import render
infos = list_profiles()
print(json.dumps({
    "envkit": str(Path(envkit.__file__).parent),
    "resources": sorted(p.name for p in ir.files("envkit._profiles").iterdir() if p.name.endswith(".toml")),
    "listed": {i.name: [i.origin, str(i.path)] for i in infos},
    "templates": sorted(p.name for p in ir.files("envkit._templates").joinpath("env").iterdir()),
    "script": render("bash", {"A": "1"}, profile_name="cpu"),
}))
"""


def test_wheel_ships_profiles_and_env_templates(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in ("envkit", "profiles", "templates"):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    dist = tmp_path / "dist"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(src)],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    (wheel,) = dist.glob("envkit-*.whl")
    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "-q", str(wheel)],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    cfg = tmp_path / "config"
    r = subprocess.run([str(py), "-c", CODE], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                       env={"ENVKIT_CONFIG_DIR": str(cfg), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["envkit"].startswith(str(venv))  # the installed copy, not the checkout
    shipped = sorted(p.name for p in (ROOT / "profiles").glob("*.toml"))
    assert d["resources"] == shipped
    assert sorted(f"{n}.toml" for n in d["listed"]) == shipped
    assert all(origin == "shipped" and path.startswith(str(venv)) for origin, path in d["listed"].values())
    assert {"activate.sh", "activate.fish", "dotenv", "envrc"} <= set(d["templates"])
    assert "export A=1" in d["script"]
