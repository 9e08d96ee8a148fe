"""doctor's bytecode check: a torch without bytecode in a Python that writes none is compiled from its
sources by every process (benchmarks/RESULTS.md: 14.0 s against 6.9 s of torch.compile's imports on an
H100 host). The check says so, its fix is a command, and after that command the check passes."""

from __future__ import annotations

import json
import subprocess
import venv
from pathlib import Path

import pytest

from conftest import envkit, load_snapshot
from envkit.checks.report import diagnose
from envkit.facts.collect import collect
from envkit.facts.runner import ReplayRunner

MODULES = ("__init__.py", "nn/__init__.py", "nn/modules/__init__.py", "nn/modules/module.py", "_dynamo/__init__.py")


@pytest.fixture
def python_with_a_torch(tmp_path):
    """A venv with a `torch` package of plain sources (no bytecode, as uv installs it), never imported."""
    d = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(d)
    python = d / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    for name in MODULES:
        path = Path(site) / "torch" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("raise ImportError('a stand-in: only its files are looked at')\n" if name == "__init__.py" else "")
    return str(python)


def bytecode_check(python: str, **env) -> tuple[dict, dict]:
    r = envkit("doctor", "--python", python, "--json", env=env)
    data = json.loads(r.stdout)
    return next(c for c in data["checks"] if c["id"] == "bytecode"), data["facts"]["torch_bytecode"]


def test_no_bytecode_and_none_written_warns_and_its_fix_makes_it_pass(python_with_a_torch, tmp_path):
    check, facts = bytecode_check(python_with_a_torch, PYTHONDONTWRITEBYTECODE="1")
    assert check["status"] == "warn", check
    assert "no bytecode and Python writes none (PYTHONDONTWRITEBYTECODE is set)" in check["message"]
    assert "14.0 s against 6.9 s" in check["message"]
    assert facts == {"folder": facts["folder"], "compiled": False, "dont_write_bytecode": True, "writable": True,
                     "compile_compiled": False}
    assert check["fix"] == f"{python_with_a_torch} -m compileall -q -j 0 {Path(facts['folder']).parent}"  # site-packages
    fixed = subprocess.run(["bash", "-c", check["fix"]], capture_output=True, text=True)
    assert fixed.returncode == 0, fixed.stderr
    check, facts = bytecode_check(python_with_a_torch, PYTHONDONTWRITEBYTECODE="1")
    assert (check["status"], check["message"], facts["compiled"]) == ("pass", "torch's modules are byte-compiled", True)


def test_bytecode_for_what_import_torch_loads_and_none_for_torch_compile_is_said_as_such(python_with_a_torch):
    """What `envkit setup` leaves on a machine that does not compile by default (its verification's
    import writes the bytecode of what `import torch` loads): torch is byte-compiled; torch.compile's
    modules are not, which matters only where Python writes none."""
    import py_compile

    _, facts = bytecode_check(python_with_a_torch, PYTHONDONTWRITEBYTECODE="1")
    for name in ("__init__.py", "nn/modules/module.py"):
        py_compile.compile(str(Path(facts["folder"]) / name), doraise=True)
    check, facts = bytecode_check(python_with_a_torch, PYTHONDONTWRITEBYTECODE=None)
    assert (facts["compiled"], facts["compile_compiled"]) == (True, False)
    assert (check["status"], check["message"]) == ("pass", "torch's modules are byte-compiled; torch.compile's get theirs at "
                                                           "its first use (once)")
    check, _ = bytecode_check(python_with_a_torch, PYTHONDONTWRITEBYTECODE="1")
    assert check["status"] == "warn", check
    assert check["message"].startswith("torch's modules are byte-compiled, torch.compile's are not and Python writes none "
                                       "(PYTHONDONTWRITEBYTECODE is set): every process that compiles compiles their sources again")
    assert subprocess.run(["bash", "-c", check["fix"]], capture_output=True).returncode == 0
    check, facts = bytecode_check(python_with_a_torch, PYTHONDONTWRITEBYTECODE="1")
    assert (check["status"], check["message"], facts["compile_compiled"]) == ("pass", "torch's modules are byte-compiled", True)


def test_no_bytecode_where_python_writes_it_passes_and_says_the_first_import_will(python_with_a_torch):
    check, facts = bytecode_check(python_with_a_torch, PYTHONDONTWRITEBYTECODE=None)
    assert check["status"] == "pass" and "the first import writes it" in check["message"], check
    assert (facts["compiled"], facts["dont_write_bytecode"]) == (False, False)


def test_a_folder_this_user_cannot_write_is_named_and_the_fix_asks_for_its_owner():
    snap = load_snapshot("linux_h100")
    snap["torch_bytecode"] = {"folder": "/opt/my torch/site-packages/torch", "compiled": False,
                              "dont_write_bytecode": False, "writable": False}
    check = next(c for c in diagnose(collect(ReplayRunner(snap))).checks if c.id == "bytecode")
    assert check.status == "warn" and "/opt/my torch/site-packages/torch is not writable for this user" in check.message
    assert check.fix is not None and check.fix.endswith("-m compileall -q -j 0 '/opt/my torch/site-packages' (as the folder's owner)")


@pytest.mark.parametrize("recorded", [None, "not a dict", {"folder": "/x", "compiled": "yes"}])
def test_a_snapshot_without_the_facts_or_with_malformed_ones_skips_the_check(recorded):
    snap = load_snapshot("linux_h100")
    if recorded is None:
        snap.pop("torch_bytecode", None)
    else:
        snap["torch_bytecode"] = recorded
    check = next(c for c in diagnose(collect(ReplayRunner(snap))).checks if c.id == "bytecode")
    assert (check.status, check.message) == ("skip", "not recorded in this snapshot")
