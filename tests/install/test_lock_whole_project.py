"""`envkit lock` locks the project, not only torch: its [project] dependencies, an extra, a PEP 735
dependency group (with an include-group) and a requirements file, named in [tool.envkit.lock],
resolved with torch for this machine's CPU build and for a Mac, one torch per target (a project
package that requires torch gets the build envkit picked, never another from the index); uv
installs the lock and `check --lock` names a locked package that is missing. With pip reading a
local mirror (find-links), the lock carries the index's URLs, never this machine's file:// ones,
and a wheel only the mirror has is said in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envkit.install.lock.resolve import uv_binary
from envkit.resources import load_toml
from localindex import LocalIndex, build_wheel
from pylock_wheels import build as pylock_wheels
from conftest import _EMPTY_CONFIG_DIR
from test_pylock import _target_select, lock_env, run

pylock = pytest.importorskip("packaging.pylock")

PYPROJECT = """\
[project]
name = "mlproj"
version = "0.1"
dependencies = ["tqdm>=4", "needs-torch", "torch>=2.12"]

[project.optional-dependencies]
train = ["extra-pkg"]

[dependency-groups]
dev = ["devpkg", {include-group = "lint"}]
lint = ["lintpkg"]

[tool.envkit.lock]
extras = ["train"]
groups = ["dev"]
requirements = ["requirements.txt"]
"""
OWN = {"tqdm": "4.67.1", "needs-torch": "1.0", "extra-pkg": "2.0", "devpkg": "0.3", "lintpkg": "0.4", "reqpkg": "1.0"}


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    d = tmp_path_factory.mktemp("project-wheels")
    wheels = pylock_wheels(d)
    own = [build_wheel(d, name, version, "py3-none-any", requires=["torch>=2"] if name == "needs-torch" else None)
           for name, version in OWN.items()]
    wheels["pypi"] = wheels["pypi"] + own + [build_wheel(d, "reqpkg", "1.1", "py3-none-any"), build_wheel(d, "stray", "1.0", "py3-none-any")]
    with LocalIndex(wheels) as srv:
        yield srv


def _project(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(PYPROJECT)
    (folder / "requirements.txt").write_text("# pinned for the paper\nreqpkg==1.0  # not 1.1\n")
    return folder


def test_the_project_its_extra_group_and_requirements_are_locked_with_torch_for_two_targets(index, venv, tmp_path):
    proj = _project(tmp_path / "proj")
    r = run("lock", "--target", "linux-x86_64-cpu", "--target", "macos-arm64", "--torch", "2.13.0",
            "--index-url", f"{index.base}/pypi/simple", cwd=proj, env=lock_env(index, tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "locking the project with torch: [project] dependencies, extra train, group dev, requirements.txt" in r.stderr
    data = load_toml(proj / "pylock.toml")
    lock = pylock.Pylock.from_dict(data)  # PEP 751 valid, as packaging reads it
    for target, torch in (("linux-x86_64-cpu", "2.13.0+cpu"), ("macos-arm64", "2.13.0")):
        got = _target_select(lock, data, target)
        assert {name: got[name][0] for name in OWN} == OWN, (target, sorted(got))
        assert got["torch"][0] == torch  # needs-torch's requirement met by envkit's build, not another torch
        assert "nvidia-cuda-runtime" not in got
    assert "file://" not in (proj / "pylock.toml").read_text()

    linux = {name: v for name, (v, _w) in _target_select(lock, data, "linux-x86_64-cpu").items()}

    # envkit setup --lock (pip, hashes enforced) and uv install the same set: the lock's for this machine
    r = run("setup", "--lock", "pylock.toml", "--yes", "--no-selftest", "--venv", str(venv), cwd=proj,
            env={"ENVKIT_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stdout + r.stderr
    assert _installed(venv) == linux
    uv, other = uv_binary(), tmp_path / "uv-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(other)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))} | {"UV_CACHE_DIR": str(tmp_path / "uvc")}
    p = subprocess.run([uv, "pip", "install", "--python", str(other / "bin/python"), "-r", "pylock.toml"], cwd=proj,
                       capture_output=True, text=True, env=env)
    assert p.returncode == 0 and _installed(other) == linux, p.stderr

    # a package the lock does not name is kept, and said, unless --sync is asked for
    subprocess.run([uv, "pip", "install", "--python", str(venv / "bin/python"), "--index-url", f"{index.base}/pypi/simple",
                    "stray==1.0"], check=True, capture_output=True, env=env)
    r = run("setup", "--lock", "pylock.toml", "--dry-run", "--json", "--venv", str(venv), cwd=proj,
            env={"ENVKIT_CACHE_DIR": str(tmp_path / "cache")})
    plan = json.loads(r.stdout)
    assert r.returncode == 0 and plan["kept"] == ["stray"] and plan["nothing_to_do"] and not plan["changes"], r.stdout + r.stderr
    r = run("setup", "--lock", "pylock.toml", "--sync", "--yes", "--no-selftest", "--venv", str(venv), cwd=proj,
            env={"ENVKIT_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 0 and "stray" not in _installed(venv), r.stdout + r.stderr
    r = run("check", "--lock", "pylock.toml", "--python", str(venv / "bin/python"), "--json", cwd=proj)
    assert r.returncode == 0, r.stdout + r.stderr
    subprocess.run([uv, "pip", "uninstall", "--python", str(venv / "bin/python"), "tqdm"], check=True, capture_output=True, env=env)
    r = run("check", "--lock", "pylock.toml", "--python", str(venv / "bin/python"), cwd=proj)
    assert r.returncode == 1 and "tqdm 4.67.1 is in the lock but not installed" in r.stdout, r.stdout


def _installed(venv: Path) -> dict[str, str]:
    out = subprocess.run([str(venv / "bin/python"), "-I", "-c", "import json; from importlib import metadata as m; "
                          "print(json.dumps({d.metadata['Name'].lower(): d.version for d in m.distributions()}))"],
                         capture_output=True, text=True, check=True).stdout
    return {k: v for k, v in json.loads(out).items() if k not in ("pip", "setuptools")}


def test_a_name_the_project_does_not_have_is_one_line(index, tmp_path):
    proj = _project(tmp_path / "proj")
    for args, words in ((("--extra", "gpu"), "the project has no extra 'gpu' (it has: train)"),
                        (("--group", "docs"), "the project has no dependency group 'docs' (it has: dev, lint)")):
        r = run("lock", "--target", "linux-x86_64-cpu", "--torch", "2.13.0", "--index-url", f"{index.base}/pypi/simple", *args,
                cwd=proj, env=lock_env(index, tmp_path))
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and words in lines[0], r.stderr
    (proj / "pyproject.toml").write_text(PYPROJECT.replace('"torch>=2.12"', '"torch<2.13"'))
    r = run("lock", "--target", "linux-x86_64-cpu", "--torch", "2.13.0", "--index-url", f"{index.base}/pypi/simple",
            cwd=proj, env=lock_env(index, tmp_path))
    assert r.returncode == 2 and "the project asks for torch<2.13, and linux-x86_64-cpu would get torch 2.13.0+cpu" in r.stderr


def test_a_local_mirror_never_puts_a_file_url_in_the_lock(index, tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "pyproject.toml").write_text('[project]\nname = "p"\nversion = "0"\ndependencies = ["tqdm", "mirror-only"]\n')
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    tqdm = next(p for p in index.wheels["pypi"] if p.name.startswith("tqdm-"))
    shutil.copy(tqdm, mirror / tqdm.name)  # the same file as the index's (same sha256), as a mirror holds it
    build_wheel(mirror, "mirror-only", "1.0", "py3-none-any")
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nindex-url = {index.base}/pypi/simple\nfind-links = {mirror}\n")
    e = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "ENVKIT_", "PYTORCH_"))}
    e.update(lock_env(index, tmp_path), ENVKIT_CONFIG_DIR=_EMPTY_CONFIG_DIR, PIP_CONFIG_FILE=str(conf))
    r = subprocess.run([sys.executable, "-m", "envkit", "lock", "--target", "linux-x86_64-cpu", "--target", "macos-arm64",
                        "--torch", "2.13.0"], cwd=proj, env=e, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    text = (proj / "pylock.toml").read_text()
    urls = [w.url for p in pylock.Pylock.from_dict(load_toml(proj / "pylock.toml")).packages for w in p.wheels or []
            if p.name in ("tqdm", "mirror-only")]
    assert any(u.startswith(index.base) and "tqdm" in u for u in urls) and text.count("file://") == len([u for u in urls if "mirror_only" in u])
    assert "note: this lock installs only on this machine: 1 wheel(s) come from a folder here that no index serves " \
           "(mirror_only-1.0-py3-none-any.whl)" in r.stderr


def test_a_build_no_source_has_offline_is_not_told_to_pick_one_of_none(index, tmp_path):
    env = {**lock_env(index, tmp_path), "ENVKIT_PYTORCH_INDEX": "http://127.0.0.1:9/whl"}  # PyTorch's index unreachable
    r = run("lock", "--target", "linux-x86_64-cu130", "--torch", "2.13.0", "--no-project", "--index-url", f"{index.base}/pypi/simple",
            cwd=tmp_path, env=env)
    line = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 2 and "(unreachable: " in line and "ask for one of those" not in line, line
    assert line.endswith("(fix: reach PyTorch's index for that build (the network, or ENVKIT_PYTORCH_INDEX at a mirror of it), then lock again)")
