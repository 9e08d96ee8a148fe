"""doctor's bytecode check: a torch without bytecode in a Python that writes none is compiled from its
sources by every process (benchmarks/RESULTS.md: 14.0 s against 6.9 s of torch.compile's imports on an
H100 host). The check says so, its fix is a command, and after that command the check passes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from conftest import ROOT, envkit, load_snapshot
from envkit.checks.report import diagnose
from envkit.facts.collect import collect
from envkit.facts.runner import ReplayRunner

MODULES = ("__init__.py", "nn/__init__.py", "nn/modules/__init__.py", "nn/modules/module.py", "_dynamo/__init__.py")


@pytest.fixture
def python_with_a_torch(tmp_path):
    """A venv with a `torch` package of plain sources (no bytecode, as uv installs it), never imported."""
    return venv_with_a_torch(tmp_path / "venv")


def venv_with_a_torch(d: Path) -> str:
    venv.EnvBuilder(with_pip=False).create(d)
    python = d / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    for name in MODULES:
        path = Path(site) / "torch" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("raise ImportError('a stand-in: only its files are looked at')\n" if name == "__init__.py" else "")
    return str(python)


def bytecode_check(python: str, wrap: tuple[str, ...] = (), **env) -> tuple[dict, dict]:
    r = envkit("doctor", "--python", python, "--json", env=env, wrap=wrap)
    data = json.loads(r.stdout)
    return next(c for c in data["checks"] if c["id"] == "bytecode"), data["facts"]["torch_bytecode"]


def test_no_bytecode_and_none_written_warns_and_its_fix_makes_it_pass(python_with_a_torch, tmp_path):
    check, facts = bytecode_check(python_with_a_torch, PYTHONDONTWRITEBYTECODE="1")
    assert check["status"] == "warn", check
    assert "no bytecode and Python writes none (PYTHONDONTWRITEBYTECODE is set)" in check["message"]
    assert "14.0 s against 6.9 s" in check["message"]
    assert facts == {"folder": facts["folder"], "compiled": False, "dont_write_bytecode": True, "writable": True,
                     "compile_compiled": False, "envkit_cache": None}
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
    assert check.fix is not None and check.fix.startswith("envkit doctor --fix --python ")
    assert "or as the folder's owner: " in check.fix and check.fix.endswith("-m compileall -q -j 0 '/opt/my torch/site-packages'")


@pytest.mark.parametrize("recorded", [None, "not a dict", {"folder": "/x", "compiled": "yes"}])
def test_a_snapshot_without_the_facts_or_with_malformed_ones_skips_the_check(recorded):
    snap = load_snapshot("linux_h100")
    if recorded is None:
        snap.pop("torch_bytecode", None)
    else:
        snap["torch_bytecode"] = recorded
    check = next(c for c in diagnose(collect(ReplayRunner(snap))).checks if c.id == "bytecode")
    assert (check.status, check.message) == ("skip", "not recorded in this snapshot")


def _read_only(folder) -> tuple[str, ...]:
    """A command prefix: what follows runs with `folder` mounted read-only, in a mount namespace of its own
    (nothing outside it sees the mount): a site-packages this user may not write, for root too."""
    return ("unshare", "-m", "sh", "-c", 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" "$0" && exec "$@"', str(folder))


def _can_mount() -> bool:
    try:
        return subprocess.run([*_read_only("/tmp"), "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@pytest.mark.skipif(not _can_mount(), reason="needs a private mount namespace (root, or CAP_SYS_ADMIN)")
def test_a_read_only_site_packages_gets_torch_bytecode_in_envkits_cache_which_envkits_processes_use(python_with_a_torch, tmp_path):
    """`envkit doctor --fix` where site-packages is read-only: torch's bytecode goes into envkit's own cache,
    the check passes, the interpreter loads torch's modules from there with PYTHONDONTWRITEBYTECODE set, and
    envkit's launchers give its processes the variable (a user's own value kept)."""
    from envkit.launch.launcher import child_environ

    torch_folder = bytecode_check(python_with_a_torch, PYTHONDONTWRITEBYTECODE="1")[1]["folder"]
    site, cache = Path(torch_folder).parent, tmp_path / "cache"
    env = {"ENVKIT_CACHE_DIR": str(cache), "PYTHONDONTWRITEBYTECODE": "1"}
    check, facts = bytecode_check(python_with_a_torch, wrap=_read_only(site), **env)
    assert (check["status"], facts["writable"]) == ("warn", False), check
    assert check["fix"].startswith(f"envkit doctor --fix --python {python_with_a_torch} ")

    r = envkit("doctor", "--fix", "--python", python_with_a_torch, "--json", env=env, wrap=_read_only(site), timeout=600)
    data = json.loads(r.stdout)
    fixed = data["fixed"][0]
    assert (fixed["where"], fixed["ok"], fixed["prefix"]) == ("envkit's cache", True, str(cache / "pycache")), fixed
    assert str(site) in fixed["folders"]
    check = next(c for c in data["checks"] if c["id"] == "bytecode")
    assert check["status"] == "pass" and f"byte-compiled in envkit's cache ({cache / 'pycache'})" in check["message"], check
    assert data["facts"]["torch_bytecode"]["envkit_cache"] == str(cache / "pycache")
    assert not (site / "torch" / "__pycache__").exists()  # nothing written beside the sources
    # the standard library is there too (with a prefix, Python reads no bytecode beside the sources), its test suite not
    stdlib = subprocess.run([python_with_a_torch, "-c", "import json, os; print(os.path.dirname(json.__path__[0]))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    mirrored = cache / "pycache" / stdlib.lstrip(os.sep)  # the folder as Python names it, not resolved
    assert list((mirrored / "json").glob("__init__.*.pyc")) and not (mirrored / "test").exists()

    # the interpreter, pointed at the cache, reads torch's bytecode from there (python -v names the file)
    loaded = subprocess.run([python_with_a_torch, "-v", "-c", "import torch"], capture_output=True, text=True,
                            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": str(cache / "pycache")})
    assert f"code object from '{cache / 'pycache'}{site}/torch/__init__." in loaded.stderr, loaded.stderr[-3000:]

    # `envkit exec` of that interpreter gets the variable (a run's trainer: launcher.child_environ, below)
    shown = envkit("exec", "--profile", "cpu", "--", python_with_a_torch, "-c",
                   "import os; print('PREFIX', os.environ.get('PYTHONPYCACHEPREFIX'))", cwd=tmp_path, env={"ENVKIT_CACHE_DIR": str(cache)})
    assert shown.returncode == 0 and f"PREFIX {cache / 'pycache'}\n" in shown.stdout, shown.stderr[-2000:]

    monkeypatch_env = {"ENVKIT_CACHE_DIR": str(cache)}
    old = {k: os.environ.get(k) for k in ("ENVKIT_CACHE_DIR", "PYTHONPYCACHEPREFIX")}
    try:
        os.environ.update(monkeypatch_env)
        os.environ.pop("PYTHONPYCACHEPREFIX", None)
        assert child_environ(None, 1, python_with_a_torch)["PYTHONPYCACHEPREFIX"] == str(cache / "pycache")
        assert "PYTHONPYCACHEPREFIX" not in child_environ(None, 1, sys.executable)  # made for the other interpreter only
        os.environ["PYTHONPYCACHEPREFIX"] = "/mine"
        assert child_environ(None, 1, python_with_a_torch)["PYTHONPYCACHEPREFIX"] == "/mine"
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def test_setups_bytecode_step_compiles_in_place_where_it_may_and_then_has_nothing_to_do(python_with_a_torch, tmp_path):
    """What `envkit setup` does after its install (install/bytecode.ensure): torch without bytecode in a
    Python that writes none (PYTHONDONTWRITEBYTECODE) but whose site-packages this user may write is
    compiled in place, for every process of that interpreter; run again, it finds nothing to do."""
    code = ("import json, sys; from envkit.install.bytecode import ensure; f = ensure(sys.argv[1]); "
            "print(json.dumps(f and f.to_dict()))")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "ENVKIT_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    first = subprocess.run([sys.executable, "-c", code, python_with_a_torch], capture_output=True, text=True, env=env, timeout=300)
    fixed = json.loads(first.stdout)
    assert (fixed["where"], fixed["ok"]) == ("in place", True), first.stderr[-2000:]
    check, facts = bytecode_check(python_with_a_torch, PYTHONDONTWRITEBYTECODE="1")
    assert (check["status"], facts["compiled"], facts["envkit_cache"]) == ("pass", True, None)
    assert not (tmp_path / "cache" / "pycache").exists()  # envkit's cache is for folders it may not write
    again = subprocess.run([sys.executable, "-c", code, python_with_a_torch], capture_output=True, text=True, env=env, timeout=300)
    assert again.stdout.strip() == "null", again.stderr[-2000:]


def test_envkits_cache_takes_a_venv_that_lives_in_a_folder_named_test(tmp_path):
    """The walk into envkit's cache leaves out folders named `test` (the standard library's suite) below
    the folders it walks, never above them: a project in ~/test keeps its venv's torch."""
    python = venv_with_a_torch(tmp_path / "test" / "proj" / ".venv")
    code = ("import json, sys; from envkit.install.bytecode import fix; "
            "print(json.dumps(fix(sys.argv[1], sys.argv[2], writable=False).to_dict()))")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    env = {**os.environ, "ENVKIT_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code, python, str(Path(site) / "torch")], capture_output=True, text=True,
                         env=env, timeout=300)
    assert json.loads(out.stdout)["ok"] is True, out.stderr[-2000:]
    assert list((tmp_path / "cache" / "pycache" / site.lstrip(os.sep) / "torch").glob("__init__.*.pyc"))
