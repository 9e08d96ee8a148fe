"""What users install: the sdist and the wheel, built as a release would be, the wheel installed into
a fresh venv with no checkout on sys.path, and every command run from another folder.

An editable install hides packaging bugs (a submodule import that only its import hook provided, a
data file left out of the wheel), so this is the one test that runs envkit the way `pip install
envkit` gives it to people."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT
from envkit.cli import COMMANDS  # every command the CLI lists

pytestmark = pytest.mark.slow



def _clean_env(venv: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME") and not k.startswith(("PYTORCH_", "ENVKIT_"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONWARNINGS"] = "default"  # a warning envkit causes must show, not be filtered away
    return env


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> dict[str, Path]:
    """`python -m build`: the sdist first, then the wheel built from the unpacked sdist, so a file the
    sdist forgets breaks the wheel too."""
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (sdist,) = out.glob("envkit-*.tar.gz")
    (wheel,) = out.glob("envkit-*.whl")
    return {"sdist": sdist, "wheel": wheel}


@pytest.fixture(scope="module")
def installed(dists, tmp_path_factory) -> dict:
    """A fresh venv holding the wheel and the CPU torch, and an empty folder to work in."""
    base = tmp_path_factory.mktemp("user")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    # --no-compile: pip's byte-compiling of torch's 2,000+ modules is pip's work, not what this tests (~20 s of CPU)
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile", str(dists["wheel"]), "torch==2.13.0"],
                         capture_output=True, text=True, timeout=900)
    assert pip.returncode == 0, pip.stderr[-3000:]
    work = base / "project"
    work.mkdir()
    return {"venv": venv, "work": work, "env": _clean_env(venv)}


def _run(installed, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(installed["venv"] / "bin" / "envkit"), *args], cwd=installed["work"],
                          env=installed["env"], capture_output=True, text=True, timeout=timeout)


def _ok(proc: subprocess.CompletedProcess, what: str) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{what}: exit {proc.returncode}\n{out[-3000:]}"
    assert "Traceback" not in out, f"{what}:\n{out[-3000:]}"
    return out


def test_sdist_holds_what_builds_and_tests(dists):
    with tarfile.open(dists["sdist"]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for needed in ("pyproject.toml", "README.md", "envkit/cli.py", "envkit/data/gates.toml", "profiles/m3-max.toml",
                   "templates/train/gpt_quick_test.yaml", "templates/env/activate.sh", "tests/conftest.py",
                   "tests/localindex.py", "tests/project/test_packaging.py", "tests/snapshots/real_h100.json", "docs/knowledge/mps.md"):
        assert needed in names, f"{needed} missing from the sdist"
    assert not any("__pycache__" in n for n in names)


def test_wheel_ships_profiles_templates_and_data(dists):
    names = set(zipfile.ZipFile(dists["wheel"]).namelist())
    for needed in ("envkit/_profiles/m3-max.toml", "envkit/_profiles/base.toml", "envkit/_templates/train/gpt_quick_test.yaml",
                   "envkit/_templates/env/activate.fish", "envkit/data/gates.toml", "envkit/data/peaks.toml",
                   "envkit/selftest/probes_numeric.py"):
        assert needed in names, f"{needed} missing from the wheel"
    assert not any(n.startswith(("tests/", "profiles/", "templates/")) for n in names)


def test_installed_wheel_uses_its_own_files(installed):
    code = ("import envkit, envkit.resources as r; "
            "print(envkit.__file__); print(r.shipped_dir('profiles')); print(r.shipped_dir('templates'))")
    proc = subprocess.run([str(installed["venv"] / "bin" / "python"), "-c", code], cwd=installed["work"],
                          env=installed["env"], capture_output=True, text=True, timeout=60)
    lines = _ok(proc, "import").split()
    site = str(installed["venv"])
    assert all(line.startswith(site) for line in lines), lines
    assert not any(line.startswith(str(ROOT)) for line in lines)


def test_every_command_from_the_installed_wheel(installed):
    """The walk-through of a new user, from a folder that is not the checkout."""
    top = _ok(_run(installed, "--help"), "envkit --help")
    for name in COMMANDS:
        assert name in top
        assert "Usage: envkit " + name in _ok(_run(installed, name, "--help"), f"envkit {name} --help")
    same = subprocess.run([str(installed["venv"] / "bin" / "python"), "-m", "envkit", "--help"], cwd=installed["work"],
                          env=installed["env"], capture_output=True, text=True, timeout=60)
    assert _ok(same, "python -m envkit --help").replace("python -m envkit", "envkit") == top

    doctor = _run(installed, "doctor", "--json")
    _ok(doctor, "doctor --json")
    report = json.loads(doctor.stdout)
    assert report["profile"] and {c["id"] for c in report["checks"]} >= {"os", "python-version", "torch"}
    assert "gates hold" in _ok(_run(installed, "check"), "check")
    assert "m3-max" in _ok(_run(installed, "profile", "list"), "profile list")
    assert "PYTORCH_ENABLE_MPS_FALLBACK" in _ok(_run(installed, "profile", "show", "m3-max"), "profile show m3-max")
    assert "_ENVKIT_PROFILE" in _ok(_run(installed, "env"), "env")

    _ok(_run(installed, "init", "train.yaml"), "init")
    assert "valid" in _ok(_run(installed, "validate", "train.yaml"), "validate")
    assert "the device works" in _ok(_run(installed, "selftest", "--quick"), "selftest --quick")
    trained = _ok(_run(installed, "run", "train.yaml", "--set", "training.max_steps=12", "--run-id", "wheel"), "run")
    assert "completed: 12/12 steps" in trained
    assert "completed" in _ok(_run(installed, "runs"), "runs")
    planned = _ok(_run(installed, "setup", "--dry-run"), "setup --dry-run")
    assert "torch" in planned
    assert not (installed["work"] / ".envkit").exists(), "a dry run wrote files"
    # nothing the walk-through needed came from the checkout
    assert str(ROOT) not in trained + planned


PROFILES_CODE = r"""
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


def test_wheel_ships_profiles_and_env_templates(installed, tmp_path):
    """The profiles and the env templates come from the installed package (importlib.resources),
    not from the checkout: the same wheel as above, listed from its venv."""
    cfg = tmp_path / "config"
    r = subprocess.run([str(installed["venv"] / "bin" / "python"), "-c", PROFILES_CODE], capture_output=True, text=True,
                       timeout=60, cwd=installed["work"], env={"ENVKIT_CONFIG_DIR": str(cfg), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    venv = installed["venv"]
    assert d["envkit"].startswith(str(venv))  # the installed copy, not the checkout
    shipped = sorted(p.name for p in (ROOT / "profiles").glob("*.toml"))
    assert d["resources"] == shipped
    assert sorted(f"{n}.toml" for n in d["listed"]) == shipped
    assert all(origin == "shipped" and path.startswith(str(venv)) for origin, path in d["listed"].values())
    assert {"activate.sh", "activate.fish", "dotenv", "envrc"} <= set(d["templates"])
    assert "export A=1" in d["script"]
