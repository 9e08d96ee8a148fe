"""pylock.machine.toml: format (a PEP 751 lock of one machine), secrets, drift, an envkit.lock in the old
format still read, and the real torch 2.13.0 (from this disk through pip's configuration)
installed by `envkit setup`, locked, and rebuilt from the lock into a second venv."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import TESTS, envkit
from envkit.errors import EnvkitError
from envkit.install.act.interp import Interpreter
from envkit.install.lock import record, single
from envkit.install.lock.drift import compare, drift_report
from envkit.install.lock.machine import platform_differences
from envkit.install.lock.read import read
from envkit.resources import load_toml

OLD_LOCK = TESTS / "locks" / "envkit-v1.lock"  # the envkit.lock this repository tracked (git history)
TORCH_URL = "https://download.pytorch.org/whl/cpu/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl"


def _doc(**kw):
    base = dict(platform={"system": "Linux", "arch": "x86_64", "python_minor": "3.11"}, profile={"name": "cpu", "sha256": "ab"},
                source={"torch": "stable", "index_urls": []}, env={"PYTORCH_X": "1", "HF_TOKEN": "secret", "MY_API_KEY": "k"},
                entries=[{"name": "torch", "version": "2.13.0+cpu", "sha256": "0" * 64, "url": TORCH_URL},
                         {"name": "numpy", "version": "2.2.6"}],
                envkit_version="0.1.0")
    base.update(kw)
    return single.doc(**base)


def test_roundtrip_atomic_and_no_secrets(tmp_path):
    path = tmp_path / "pylock.machine.toml"
    assert record.write(path, _doc()) is True
    text = path.read_text()
    assert "HF_TOKEN" not in text and "MY_API_KEY" not in text and "secret" not in text
    # the header names the file, and says where numpy (no wheel recorded) is kept and what pip and uv make of it
    assert text.startswith("# pylock.machine.toml: written by `envkit setup`") and "`pip install -r pylock.machine.toml`" in text
    assert "# 1 package(s) have no wheel recorded" in text and "under [tool.envkit] versions-only only" in text
    data = load_toml(path)  # PEP 751's shape, read without envkit
    assert data["lock-version"] == "1.0" and data["requires-python"] == "==3.11.*"
    assert data["environments"] == ["sys_platform == 'linux' and platform_machine == 'x86_64'"]
    assert data["packages"] == [{"name": "torch", "version": "2.13.0+cpu",
                                 "wheels": [{"url": TORCH_URL, "hashes": {"sha256": "0" * 64}}]}]
    assert data["tool"]["envkit"]["versions-only"] == [{"name": "numpy", "version": "2.2.6"}]  # no wheel recorded
    back = read(path)
    assert back.versions == {"torch": "2.13.0+cpu", "numpy": "2.2.6"} and back.env == {"PYTORCH_X": "1"}
    assert record.write(path, back.data) is False  # same content: not rewritten
    assert not list(tmp_path.glob(".pylock.machine.toml.*"))


def test_corrupt_and_foreign_locks(tmp_path):
    for text, needle in (("lock_version = [\n", "not a valid lock"), ("lock_version = 7\n", "version 1"),
                         ('lock_version = 1\n[[package]]\nname = "numpy"\nversion = "1"\n', "names no torch"),
                         ('lock-version = "1.0"\n', "not a valid PEP 751 lock")):
        (tmp_path / "x.lock").write_text(text)
        with pytest.raises(EnvkitError) as exc:
            read(tmp_path / "x.lock")
        assert needle in exc.value.one_line()
    diffs = platform_differences({"system": "Darwin", "arch": "arm64", "python_minor": "3.12"},
                                 {"system": "Linux", "arch": "x86_64", "python_minor": "3.11"})
    assert diffs == ["OS Darwin in the lock, Linux here", "architecture arm64 in the lock, x86_64 here",
                     "Python 3.12 in the lock, 3.11 here"]


def test_drift_compare():
    d = compare({"torch": "2.13.0+cpu", "numpy": "2.2.6"}, {"torch": "2.12.0+cpu", "requests": "2.0", "pip": "24"})
    assert d["changed"] and d["changed_versions"] == {"torch": {"lock": "2.13.0+cpu", "installed": "2.12.0+cpu"}}
    assert d["added"] == {"requests": "2.0"} and d["removed"] == {"numpy": "2.2.6"} and len(d["lines"]) == 3


def test_drift_counts_setuptools_when_the_lock_holds_it():
    """torch requires setuptools, so a lock holds it: another version installed is drift; pip, which
    no lock holds, is not."""
    d = compare({"torch": "2.13.0+cpu", "setuptools": "80.9.0"}, {"torch": "2.13.0+cpu", "setuptools": "65.5.0", "pip": "24"})
    assert d["changed_versions"] == {"setuptools": {"lock": "80.9.0", "installed": "65.5.0"}} and d["added"] == {}


def test_drift_report_reads_the_whole_installed_set_of_the_checked_interpreter(tmp_path):
    record.write(tmp_path / "l.lock", _doc())
    facts = SimpleNamespace(python=SimpleNamespace(executable=sys.executable, version="3.11.0", machine="x86_64", implementation="CPython"),
                            os=SimpleNamespace(system="Linux", name=None, version=None), chip=SimpleNamespace(name=None), gpus=[],
                            packages={"torch": "x"})
    rep = drift_report(tmp_path / "l.lock", facts)
    # envkit's own dependencies are read too (not only torch and numpy): the lock names no project, so what
    # the editable envkit pulled in is the project's, outside the lock's scope
    assert rep["changed"] and "click" in rep["project"]["packages"]


def test_build_takes_hashes_from_report_and_skips_bootstrap():
    t = Interpreter(python="p", version="3.11.0", dists={"torch": {"name": "torch", "version": "2.13.0+cpu"},
                                                         "pip": {"name": "pip", "version": "24"},
                                                         "mine": {"name": "mine", "version": "1", "editable": True}})
    doc = record.build(t, platform={}, profile={}, source={}, env={},
                       report={"torch": {"version": "2.13.0+cpu", "sha256": "f" * 64, "url": TORCH_URL}},
                       previous=None, cached={}, envkit_version="0")
    assert doc["packages"] == [{"name": "torch", "version": "2.13.0+cpu",
                                "wheels": [{"url": TORCH_URL, "hashes": {"sha256": "f" * 64}}]}]


def test_an_old_envkit_lock_is_still_read_and_says_how_to_rewrite_it(venv, tmp_path):
    """The envkit.lock this repository tracked before the lock became a pylock (lock_version = 1),
    checked against an empty venv: every package it names is missing, named canonically, and
    one line on stderr says it is the old format and how to rewrite it."""
    (tmp_path / "envkit.lock").write_bytes(OLD_LOCK.read_bytes())
    names = re.findall(r'\[\[package\]\]\nname = "([^"]+)"\nversion = "([^"]+)"', OLD_LOCK.read_text())
    assert len(names) == 21  # the file's own [[package]] tables, read without envkit
    r = envkit("check", "--lock", "envkit.lock", "--python", str(venv / "bin/python"), "--pyproject", "none.toml", "--json",
               cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    removed = json.loads(r.stdout)["drift"]["removed"]
    assert removed == {re.sub(r"[-_.]+", "-", n).lower(): v for n, v in names}  # Jinja2 -> jinja2, typing_extensions -> typing-extensions
    assert r.stderr.splitlines() == [
        "note: envkit.lock is in envkit's old lock format (lock_version = 1), read as before; `envkit setup` writes "
        "pylock.machine.toml, a pylock of this one machine, `envkit lock --from envkit.lock` converts it to pylock.toml"]


def _set(venv: Path) -> dict:
    out = subprocess.run([str(venv / "bin/python"), "-I", "-c",
                          "import json; from importlib import metadata as m; "
                          "print(json.dumps({d.metadata['Name'].lower(): d.version for d in m.distributions()}))"],
                         capture_output=True, text=True, check=True).stdout
    return {k: v for k, v in json.loads(out).items() if k not in ("pip", "setuptools", "wheel")}


@pytest.mark.slow
def test_real_torch_setup_lock_and_rebuild(tmp_path):
    """The real CPU wheel of torch 2.13.0 (pip finds it through its configuration: find-links on
    this disk; the CPU index elsewhere), verified and locked whole. Bytecode is written for what
    `import torch` loads, not for all of torch (pip's byte-compiling of every module was two thirds of
    the install's CPU), where Python itself writes none too (PYTHONDONTWRITEBYTECODE, as this
    project's machines set it)."""
    env = {"ENVKIT_CACHE_DIR": str(tmp_path / "cache"), "PYTHONDONTWRITEBYTECODE": "1"}
    r = envkit("setup", "--yes", "--no-selftest", "--torch", "2.13.0", cwd=tmp_path, env=env, timeout=1500)  # ~150 s under a loaded suite: 10x
    assert r.returncode == 0, r.stdout + r.stderr
    assert "-m pip install --no-compile --report" in r.stderr
    (site,) = (tmp_path / ".envkit/venv/lib").glob("python3*/site-packages")
    tag = sys.implementation.cache_tag
    assert (site / "torch" / "__pycache__" / f"__init__.{tag}.pyc").is_file()  # imported: compiled once, here
    assert (site / "torch" / "nn" / "modules" / "__pycache__" / f"module.{tag}.pyc").is_file()
    assert (site / "torch" / "testing" / "_internal" / "common_utils.py").is_file()  # torch's test harness: no training imports it
    assert not (site / "torch" / "testing" / "_internal" / "__pycache__" / f"common_utils.{tag}.pyc").exists()
    first = _set(tmp_path / ".envkit/venv")
    assert first["torch"] == "2.13.0+cpu" and first.get("numpy"), first  # numpy beside torch by default
    assert "Warning" not in r.stdout + r.stderr  # envkit's own checks add no warning noise
    assert "envkit init train.yaml" in r.stdout  # no train.yaml here: the next step names init
    lock = load_toml(tmp_path / "pylock.machine.toml")
    versions = {p["name"]: p["version"] for p in lock["packages"]}
    assert versions["torch"] == "2.13.0+cpu" and lock["tool"]["envkit"]["platform"]["backend"] == "cpu"
    assert versions["numpy"] == first["numpy"]
    assert "versions-only" not in lock["tool"]["envkit"] and all(p["wheels"][0]["hashes"]["sha256"] for p in lock["packages"])
    state = json.loads((tmp_path / ".envkit/state.json").read_text())
    assert state["torch"] == "2.13.0+cpu"

    r = envkit("setup", "--yes", "--no-selftest", "--torch", "2.13.0", cwd=tmp_path, env=env, timeout=120)
    assert r.returncode == 0 and "nothing to change" in r.stdout + r.stderr

    # The lock holds the real closure whole: checked against the venv it was written from, nothing drifts.
    # (Rebuilding a venv from a lock is test_setup.py's, with small wheels; a real torch from a lock, test_pylock_real.py's.)
    r = envkit("check", "--lock", "pylock.machine.toml", "--python", str(tmp_path / ".envkit/venv/bin/python"), "--json", cwd=tmp_path,
               env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    drift = json.loads(r.stdout)["drift"]
    assert (drift["changed"], drift["lines"]) == (False, []), drift


def test_a_lock_with_torch_leaves_bytecode_to_the_verification_and_one_without_torch_to_pip():
    """`setup --lock` and `reproduce` install a lock with pip: with torch, `--no-compile` (the verification
    that follows writes the bytecode of what `import torch` loads; pip's compiling all of torch was two thirds
    of the install); without torch nothing is verified after pip, so pip compiles as it always does."""
    from envkit.install.lock.install import install_command

    def pick(name):
        return SimpleNamespace(name=name, version="1.0", sha256="a" * 64, has_file=True, cached=False)

    lock = SimpleNamespace(index_urls=[])
    with_torch, _ = install_command("/v/bin/python", SimpleNamespace(picks=[pick("numpy"), pick("torch")]), lock)
    without, _ = install_command("/v/bin/python", SimpleNamespace(picks=[pick("numpy")]), lock)
    # --isolated: only the checked files (pip's own find-links would offer others: test_pylock.py)
    assert with_torch == ["/v/bin/python", "-m", "pip", "--isolated", "install", "--no-compile", "--no-deps", "--require-hashes",
                          "--no-index"]
    assert without == ["/v/bin/python", "-m", "pip", "--isolated", "install", "--no-deps", "--require-hashes", "--no-index"]
