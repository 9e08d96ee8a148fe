"""`envkit lock` (PEP 751 pylock.toml) against a PyTorch-style index (per-build pages) and a
PyPI-style index on 127.0.0.1 with tiny wheels (tests/pylock_wheels.py): one lock for a Mac, a
CPU box, a CUDA box and an aarch64 CUDA box; packaging.pylock validates it and selects one torch
per target; `envkit setup --lock pylock.toml` plans and installs this machine's part exactly,
uv and pip install the same set, a tampered wheel stops the install, drift is reported."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import subprocess
import sys

import pytest

import pylock_wheels
from conftest import _EMPTY_CONFIG_DIR, SNAPSHOTS
from envkit.install.lock.resolve import uv_binary
from envkit.resources import load_toml
from localindex import LocalIndex, installed

pylock = pytest.importorskip("packaging.pylock")
FOUR = ["macos-arm64", "linux-x86_64-cpu", "linux-x86_64-cu130", "linux-aarch64-cu130"]


def run(*args, cwd, env=None, timeout=240):
    """envkit in a subprocess with none of this machine's pip, uv or envkit settings."""
    e = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "ENVKIT_", "PYTORCH_"))}
    e.update(PYTHONUNBUFFERED="1", ENVKIT_CONFIG_DIR=_EMPTY_CONFIG_DIR, PIP_CONFIG_FILE=os.devnull, **(env or {}))
    return subprocess.run([sys.executable, "-m", "envkit", *args], capture_output=True, text=True, cwd=cwd, env=e,
                          timeout=timeout)


@pytest.fixture(scope="module")
def indexes(tmp_path_factory):
    wheels = pylock_wheels.build(tmp_path_factory.mktemp("pylock-wheels"))
    with LocalIndex(wheels) as srv:
        yield srv


def lock_env(srv, tmp):
    return {"ENVKIT_PYTORCH_INDEX": f"{srv.base}/whl", "UV_CACHE_DIR": str(tmp / "uv-cache"),
            "ENVKIT_CACHE_DIR": str(tmp / "cache")}


@pytest.fixture(scope="module")
def four(indexes, tmp_path_factory):
    """The lock of the four targets, written once for the module."""
    d = tmp_path_factory.mktemp("four")
    r = run("lock", *itertools.chain.from_iterable(("--target", t) for t in FOUR), "--torch", "2.13.0", "--with", "torchvision",
            "--index-url", f"{indexes.base}/pypi/simple", cwd=d, env=lock_env(indexes, d))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "differs between targets" not in r.stderr  # the same dependency versions on every target
    return d / "pylock.toml"


def _target_select(lock, data, name, groups=None):
    from envkit.install.lock.targets import parse_target
    from packaging.tags import parse_tag

    t = parse_target(name)
    info = data["tool"]["envkit"]["targets"][name]
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"  # the lock's: the Python running envkit
    tags = [tag for s in t.tags(python) for tag in parse_tag(s)]
    env = t.marker_environment(python)
    g = groups if groups is not None else ([info["group"]] if info.get("group") else [])
    return {p.name: (str(p.version), w) for p, w in lock.select(environment=env, tags=tags, dependency_groups=g)}


def test_one_lock_validates_and_selects_one_torch_per_target(four, indexes):
    data = load_toml(four)
    lock = pylock.Pylock.from_dict(data)  # PEP 751 valid, as packaging reads it
    assert data["dependency-groups"] == ["cpu", "cu130"] and data["default-groups"] == ["cpu"]
    files = {p.name: p for group in indexes.wheels.values() for p in group}
    want = {"macos-arm64": ("2.13.0", "macosx_11_0_arm64"), "linux-x86_64-cpu": ("2.13.0+cpu", "manylinux_2_28_x86_64"),
            "linux-x86_64-cu130": ("2.13.0+cu130", "manylinux_2_28_x86_64"),
            "linux-aarch64-cu130": ("2.13.0+cu130", "manylinux_2_28_aarch64")}
    for name, (version, platform) in want.items():
        got = _target_select(lock, data, name)
        assert got["torch"][0] == version and got["torch"][1].filename.endswith(f"{platform}.whl"), (name, got["torch"])
        # the companion released with it (torchvision 0.28 goes with torch 2.13), of the same build
        assert got["torchvision"][0] == version.replace("2.13.0", "0.28.0"), (name, got["torchvision"])
        # torch's dependencies, resolved for that platform (sympy pulled mpmath in; an extra's requirement never)
        assert {"filelock", "typing-extensions", "sympy", "mpmath", "numpy"} <= set(got), (name, sorted(got))
        assert got["typing-extensions"][0] == "4.12.2" and got["mpmath"][0] == "1.3.0" and "opt-einsum" not in got
        assert ("nvidia-cuda-runtime" in got) == ("cu130" in name)
        for _pkg, (_v, wheel) in got.items():  # every file as served: its size and sha256
            served = files[wheel.filename]
            assert wheel.size == served.stat().st_size and wheel.hashes["sha256"] == hashlib.sha256(served.read_bytes()).hexdigest()
            assert wheel.url.startswith(indexes.base)
        assert data["tool"]["envkit"]["targets"][name]["torch"] == version
    assert data["tool"]["envkit"]["targets"]["linux-x86_64-cu130"]["min-driver"] == "580.65.06"
    for p in data["packages"]:
        assert p["marker"] and p["index"].startswith(indexes.base) and p["version"]
    # disjoint markers: on every platform, with any combination of groups, one entry per name at most
    # (packaging raises on two), and naming cu130 on top of the default still gives the CUDA build
    # (on x86_64 Linux the groups choose the build; macOS and aarch64 Linux have one build each)
    picked = {(name, tuple(groups)): _target_select(lock, data, name, groups)["torch"][0]
              for name in want for groups in ([], ["cpu"], ["cu130"], ["cpu", "cu130"])}
    x86 = {(): "2.13.0+cpu", ("cpu",): "2.13.0+cpu", ("cu130",): "2.13.0+cu130", ("cpu", "cu130"): "2.13.0+cu130"}
    assert picked == {**{("macos-arm64", g): "2.13.0" for g in x86}, **{("linux-aarch64-cu130", g): "2.13.0+cu130" for g in x86},
                      **{(n, g): v for n in ("linux-x86_64-cpu", "linux-x86_64-cu130") for g, v in x86.items()}}


def test_setup_plans_this_machines_build_and_refuses_other_machines(four, tmp_path):
    (tmp_path / "pylock.toml").write_bytes(four.read_bytes())
    r = run("setup", "--lock", "pylock.toml", "--dry-run", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["target"] == "linux-x86_64-cpu" and plan["group"] == "cpu" and plan["versions"]["torch"] == "2.13.0+cpu"
    assert "nvidia-cuda-runtime" not in plan["versions"] and not (tmp_path / ".envkit/venv").exists()
    # a new venv lacks every locked package: said in one line, not a line per package
    r = run("setup", "--lock", "pylock.toml", "--dry-run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    changes = [line for line in r.stdout.splitlines() if line.startswith("  change:")]
    assert changes == [f"  change: a new venv, all {len(plan['versions'])} packages of the lock to install"], r.stdout
    # an H100 box whose driver (550) is older than cu130 needs: refused, never a silent CPU build
    r = run("setup", "--lock", "pylock.toml", "--replay", str(SNAPSHOTS / "linux_h100.json"), cwd=tmp_path)
    assert r.returncode == 2 and "linux-x86_64-cu130 needs driver 580.65.06+" in r.stderr and "550.54.15" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_lock_without_this_machine_is_refused_naming_its_targets(indexes, tmp_path):
    r = run("lock", "--target", "macos-arm64", "--target", "linux-aarch64-cu130", "--torch", "2.13.0", "--no-numpy",
            "--index-url", f"http://bob:s3cret@{indexes.base.split('//')[1]}/pypi/simple", "--output", "pylock.mac.toml",
            cwd=tmp_path, env=lock_env(indexes, tmp_path))
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "pylock.mac.toml").read_text()
    assert "s3cret" not in text and "bob" not in text and "numpy" not in text
    r = run("setup", "--lock", "pylock.mac.toml", "--dry-run", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip() == ("envkit: error: pylock.mac.toml: the lock has no entry for this machine (linux-x86_64); "
                                "it has macos-arm64, linux-aarch64-cu130 (fix: lock this machine too: envkit lock "
                                "--target this --target ... (the targets you need))")


def test_missing_build_is_one_line_exit_1_naming_the_versions_that_have_it(indexes, tmp_path):
    env = lock_env(indexes, tmp_path)
    pypi = f"{indexes.base}/pypi/simple"
    r = run("lock", "--target", "linux-x86_64-cu129", "--target", "linux-x86_64-cpu", "--torch", "2.13.0", "--index-url", pypi,
            cwd=tmp_path, env=env)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "linux-x86_64-cu129 has no torch 2.13.0" in r.stderr and "its build exists for 2.12.0" in r.stderr
    assert "linux-x86_64-cpu" not in r.stderr.split("(fix")[0] and not (tmp_path / "pylock.toml").exists()
    # linux-x86_64-cuda: the newest CUDA build the version has (cu130 for 2.13.0); `this` is the CPU build
    # here; ROCm's triton comes from its build's page; three builds of one platform, three groups
    r = run("lock", "--target", "linux-x86_64-cuda", "--target", "this", "--target", "linux-x86_64-rocm6.4", "--torch", "2.13.0",
            "--no-numpy", "--index-url", pypi, "--json", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert {n: t["torch"] for n, t in out["targets"].items()} == {
        "linux-x86_64-cu130": "2.13.0+cu130", "linux-x86_64-cpu": "2.13.0+cpu", "linux-x86_64-rocm6.4": "2.13.0+rocm6.4"}
    assert out["targets"]["linux-x86_64-rocm6.4"]["packages"]["pytorch-triton-rocm"] == "3.5.0"
    data = load_toml(tmp_path / "pylock.toml")
    lock = pylock.Pylock.from_dict(data)
    assert data["default-groups"] == ["cpu"] and sorted(data["dependency-groups"]) == ["cpu", "cu130", "rocm6.4"]
    triton = next(p for p in data["packages"] if p["name"] == "pytorch-triton-rocm")
    assert triton["index"] == f"{indexes.base}/whl/rocm6.4"
    for groups, want in (([], "2.13.0+cpu"), (["cu130"], "2.13.0+cu130"), (["rocm6.4"], "2.13.0+rocm6.4")):
        got = _target_select(lock, data, "linux-x86_64-cpu", groups)
        assert got["torch"][0] == want and ("pytorch-triton-rocm" in got) == ("rocm" in want)
    for bad, needle in ((("--target", "linux-x86_64-cu13"), "not a target envkit knows"),
                        (("--target", "linux-aarch64-rocm6.4"), "for Linux x86_64 only"),
                        (("--output", "lock.toml"), "pylock.NAME.toml"), (("--python", "3"), "not a Python version")):
        r = run("lock", *bad, "--index-url", pypi, cwd=tmp_path, env=env)
        assert r.returncode == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def _plain(venv):
    return {k: v for k, v in installed(venv).items()}


def test_setup_lock_installs_the_checked_file_whatever_pips_own_find_links_offer(four, indexes, venv, tmp_path):
    """A folder in PIP_FIND_LINKS holding another file of the locked torch (this kind of machine's own
    +cpu build, with a tag pip ranks above the lock's): `setup --lock` installs the lock's file, hashes
    enforced, never the other."""
    from localindex import build_wheel

    decoys = tmp_path / "decoys"
    decoys.mkdir()
    build_wheel(decoys, "torch", "2.13.0+cpu", f"{pylock_wheels.PY}-{pylock_wheels.PY}-manylinux_2_31_x86_64",
                module="DECOY = True\n")  # glibc 2.31 ranks above the lock's manylinux_2_28 on any newer system
    (tmp_path / "pylock.toml").write_bytes(four.read_bytes())
    r = run("setup", "--lock", "pylock.toml", "--yes", "--no-selftest", "--venv", str(venv), cwd=tmp_path,
            env={"ENVKIT_CACHE_DIR": str(tmp_path / "cache"), "PIP_FIND_LINKS": str(decoys)})
    assert r.returncode == 0, r.stdout + r.stderr
    site = next(venv.glob("lib/python*/site-packages"))
    assert "DECOY" not in (site / "torch" / "__init__.py").read_text()


def test_envkit_uv_and_pip_install_the_same_set_and_drift_is_reported(four, indexes, venv, template_venv, tmp_path):
    (tmp_path / "pylock.toml").write_bytes(four.read_bytes())
    r = run("setup", "--lock", "pylock.toml", "--yes", "--no-selftest", "--venv", str(venv), cwd=tmp_path,
            env={"ENVKIT_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stdout + r.stderr
    got = _plain(venv)
    assert got == {"torch": "2.13.0+cpu", "torchvision": "0.28.0+cpu", "filelock": "3.16.1", "typing-extensions": "4.12.2", "sympy": "1.14.0",
                   "mpmath": "1.3.0", "numpy": "2.2.6"}
    r = run("check", "--lock", "pylock.toml", "--python", str(venv / "bin/python"), "--pyproject", "none.toml", "--json",
            cwd=tmp_path)
    assert json.loads(r.stdout)["drift"]["changed"] is False, r.stdout
    subprocess.run([str(venv / "bin/python"), "-m", "pip", "install", "-q", "--no-deps", "--index-url",
                    f"{indexes.base}/pypi/simple", "typing-extensions==4.9.0"], check=True, capture_output=True,
                   env={k: v for k, v in os.environ.items() if not k.startswith("PIP_")})
    r = run("check", "--lock", "pylock.toml", "--python", str(venv / "bin/python"), "--pyproject", "none.toml", cwd=tmp_path)
    assert r.returncode == 1 and "DRIFT typing-extensions: 4.12.2 in the lock, 4.9.0 installed" in r.stdout

    uv = uv_binary()  # envkit lock needs it too: the lock above was resolved with it
    other = tmp_path / "uv-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(other)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    p = subprocess.run([uv, "pip", "install", "--python", str(other / "bin/python"), "-r", "pylock.toml", "--group", "cpu"],
                       cwd=tmp_path, capture_output=True, text=True, env={**env, "UV_CACHE_DIR": str(tmp_path / "uvc")})
    assert p.returncode == 0, p.stderr
    assert _plain(other) == got
    # and the CUDA box's group, named: its build and its CUDA runtime instead (selection only, nothing installed)
    p = subprocess.run([uv, "pip", "install", "--python", str(other / "bin/python"), "-r", "pylock.toml", "--group", "cu130",
                        "--dry-run"], cwd=tmp_path, capture_output=True, text=True, env={**env, "UV_CACHE_DIR": str(tmp_path / "uvc")})
    assert p.returncode == 0 and "+ torch==2.13.0+cu130" in p.stderr and "+ nvidia-cuda-runtime==13.0.96" in p.stderr, p.stderr
    pip_venv = tmp_path / "pip26"
    shutil.copytree(template_venv, pip_venv, symlinks=True)  # a fresh venv, without paying ensurepip again
    up = subprocess.run([str(pip_venv / "bin/python"), "-m", "pip", "install", "-q", "pip>=26.1"], capture_output=True, text=True)
    if up.returncode != 0:
        pytest.skip("pip 26.1+ (pylock.toml support) cannot be installed from the registry here")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    p = subprocess.run([str(pip_venv / "bin/python"), "-m", "pip", "install", "-r", "pylock.toml"], cwd=tmp_path,
                       capture_output=True, text=True, env={**env, "PIP_CONFIG_FILE": os.devnull})
    assert p.returncode == 0, p.stdout + p.stderr
    assert _plain(pip_venv) == got


def test_a_tampered_wheel_stops_the_install_naming_the_file(four, indexes, venv, tmp_path):
    (tmp_path / "pylock.toml").write_bytes(four.read_bytes())
    target = next(p for p in indexes.wheels["pypi"] if p.name.startswith("sympy-"))
    original = target.read_bytes()
    before = _plain(venv)
    try:
        target.write_bytes(original[:100] + bytes([original[100] ^ 1]) + original[101:])
        r = run("setup", "--lock", "pylock.toml", "--yes", "--no-selftest", "--venv", str(venv), cwd=tmp_path,
                env={"ENVKIT_CACHE_DIR": str(tmp_path / "cache")})
    finally:
        target.write_bytes(original)
    assert r.returncode == 2
    assert "the wheel sympy-1.14.0-py3-none-any.whl downloaded from" in r.stderr and "sha256" in r.stderr
    assert "nothing was installed" in r.stderr and _plain(venv) == before


def test_the_machine_picks_the_newest_build_its_driver_runs(four):
    """Which target a machine is (pure, from its facts): the newest CUDA build the driver runs,
    the CPU build without a GPU, the Mac's on a Mac; a driver too old for every CUDA build is
    refused rather than given the CPU build."""
    from types import SimpleNamespace

    from envkit.errors import EnvkitError
    from envkit.install.lock.select import machine_target

    data = load_toml(four)["tool"]["envkit"]["targets"]

    def facts(system, machine, drivers=()):
        return SimpleNamespace(os=SimpleNamespace(system=system), python=SimpleNamespace(machine=machine),
                               gpus=[SimpleNamespace(driver=d) for d in drivers])

    assert machine_target(data, facts("Linux", "x86_64", ["580.95.05"]), "l")[0] == "linux-x86_64-cu130"
    assert machine_target(data, facts("Linux", "x86_64"), "l")[0] == "linux-x86_64-cpu"
    assert machine_target(data, facts("Linux", "aarch64", ["590.1"]), "l")[0] == "linux-aarch64-cu130"
    assert machine_target(data, facts("Darwin", "arm64"), "l")[0] == "macos-arm64"
    for f, needle in ((facts("Linux", "x86_64", ["550.54.15"]), "needs driver 580.65.06+"),
                      (facts("Linux", "aarch64"), "no NVIDIA GPU"), (facts("Windows", "AMD64"), "no entry for this machine")):
        with pytest.raises(EnvkitError) as exc:
            machine_target(data, f, "l")
        assert needle in exc.value.one_line() and "it has macos-arm64, linux-x86_64-cpu" in exc.value.one_line()


def test_a_machine_lock_converts_to_a_pylock_with_the_same_versions(indexes, tmp_path):
    """`envkit lock --from pylock.machine.toml`: the wheels the lock recorded (URL and sha256), and for a
    package it recorded without them, that exact version's wheel on the lock's index."""
    from envkit.install.lock import record, single

    cpu = next(p for p in indexes.wheels["cpu"] if "2.13.0" in p.name)
    served = f"{indexes.base}/files/{cpu.name.replace('+', '%2B')}"
    record.write(tmp_path / "pylock.machine.toml", single.doc(
        platform={"system": "Linux", "arch": "x86_64", "python_minor": f"{sys.version_info[0]}.{sys.version_info[1]}",
                  "backend": "cpu", "device": "cpu"},
        profile={"name": "cpu"}, source={"torch": "2.13.0", "index_urls": [f"{indexes.base}/pypi/simple"]}, env={},
        entries=[{"name": "torch", "version": "2.13.0+cpu", "url": served,
                  "sha256": hashlib.sha256(cpu.read_bytes()).hexdigest()},
                 {"name": "typing_extensions", "version": "4.9.0"}], envkit_version="0.1.0"))
    r = run("lock", "--from", "pylock.machine.toml", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    data = load_toml(tmp_path / "pylock.toml")
    pylock.Pylock.from_dict(data)
    assert {p["name"]: p["version"] for p in data["packages"]} == {"torch": "2.13.0+cpu", "typing-extensions": "4.9.0"}
    assert all(w["size"] > 0 for p in data["packages"] for w in p["wheels"])
    r = run("setup", "--lock", "pylock.toml", "--dry-run", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["versions"] == {"torch": "2.13.0+cpu", "typing-extensions": "4.9.0"}
    (tmp_path / "pylock.machine.toml").write_text((tmp_path / "pylock.machine.toml").read_text().replace('"4.9.0"', '"4.0.1"'))
    r = run("lock", "--from", "pylock.machine.toml", "--index-url", f"{indexes.base}/pypi/simple", cwd=tmp_path)
    assert r.returncode == 2 and (f"typing-extensions 4.0.1 is on none of: {indexes.base}/pypi/simple; they have "
                                  "typing-extensions 4.9.0, 4.12.2") in r.stderr


@pytest.mark.skipif(sys.version_info.micro == 0, reason="needs an interpreter past X.Y.0 to tell X.Y from X.Y.Z")
def test_a_requires_python_with_a_patch_level_holds_for_the_locked_interpreter(indexes, tmp_path):
    """A package whose requires-python has a patch level (`>=3.11.5`) is judged against the locked
    interpreter's full version (3.11.7), not its X.Y (read as 3.11.0): the lock converts."""
    from envkit.install.lock import record, single
    from localindex import build_wheel

    full = ".".join(map(str, sys.version_info[:3]))
    cpu = next(p for p in indexes.wheels["cpu"] if "2.13.0" in p.name)
    (tmp_path / "wheels").mkdir()
    wheel = build_wheel(tmp_path / "wheels", "envkit-test-patchlevel", "1.0.0", "py3-none-any", requires_python=f">={full}")
    with LocalIndex({"pypi": [wheel]}) as srv:
        record.write(tmp_path / "pylock.machine.toml", single.doc(
            platform={"system": "Linux", "arch": "x86_64", "python": full, "python_minor": full.rsplit(".", 1)[0],
                      "backend": "cpu", "device": "cpu"},
            profile={"name": "cpu"}, source={"torch": "2.13.0", "index_urls": [f"{srv.base}/pypi/simple"]}, env={},
            entries=[{"name": "torch", "version": "2.13.0+cpu", "url": f"{indexes.base}/files/{cpu.name.replace('+', '%2B')}",
                      "sha256": hashlib.sha256(cpu.read_bytes()).hexdigest()},
                     {"name": "envkit-test-patchlevel", "version": "1.0.0"}], envkit_version="0.1.0"))
        # --index-url: this index alone, never pip's configured sources (a public index)
        r = run("lock", "--from", "pylock.machine.toml", "--index-url", f"{srv.base}/pypi/simple", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert {p["name"]: p["version"] for p in load_toml(tmp_path / "pylock.toml")["packages"]} == {"torch": "2.13.0+cpu",
                                                                                                  "envkit-test-patchlevel": "1.0.0"}


def test_a_dependency_resolved_differently_per_target_is_said():
    from envkit.install.lock.flow import differing_versions
    from envkit.install.lock.model import Locked, TargetLock, Wheel
    from envkit.install.lock.targets import parse_target

    def tl(target, **versions):
        out = TargetLock(parse_target(target), "i")
        out.packages = {n.replace("_", "-"): Locked(n, v, "i", Wheel("u", "s", 1, "f")) for n, v in versions.items()}
        return out

    locks = [tl("macos-arm64", torch="2.13.0", numpy="2.2.6", filelock="3.16.1"),
             tl("linux-x86_64-cpu", torch="2.13.0+cpu", numpy="2.3.0", filelock="3.16.1")]
    assert differing_versions(locks) == ["numpy differs between targets: 2.2.6 on macos-arm64, 2.3.0 on linux-x86_64-cpu"]
