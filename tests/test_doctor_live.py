"""Doctor and check on this machine, for real: with torch, without torch, with a torch that crashes."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from conftest import envkit


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> str:
    """A fresh venv with no torch at all."""
    d = tmp_path_factory.mktemp("bare") / "venv"
    venv.EnvBuilder(with_pip=False).create(d)
    return str(d / "bin" / "python")


def test_doctor_on_this_machine_with_torch():
    r = envkit("doctor", "--json")
    assert r.returncode in (0, 1), r.stderr
    data = json.loads(r.stdout)
    f = data["facts"]
    assert f["python"]["version"].startswith(f"{sys.version_info.major}.{sys.version_info.minor}")
    assert f["memory_bytes"] and f["memory_bytes"] > 2**30
    assert f["torch"]["version"], "torch is installed in the test environment"
    assert f["runtime"]["ok"] is True
    checks = {c["id"]: c for c in data["checks"]}
    assert checks["torch"]["status"] == "pass"
    assert data["profile"] in ("cpu", "cuda", "cuda-hopper")


def test_doctor_plain_output_is_readable():
    r = envkit("doctor")
    assert "envkit doctor:" in r.stdout
    assert "profile:" in r.stdout
    assert "\x1b[" not in r.stdout  # no colour codes when not a terminal


def test_doctor_without_torch(bare_python):
    r = envkit("doctor", "--python", bare_python, "--json")
    assert r.returncode == 1, r.stderr
    checks = {c["id"]: c for c in json.loads(r.stdout)["checks"]}
    assert checks["torch"]["status"] == "fail"
    assert "envkit setup" in checks["torch"]["fix"]


def test_check_without_torch(bare_python):
    r = envkit("check", "--python", bare_python, "--require", "torch>=2.0", "--require", "python>=3.10")
    assert r.returncode == 1
    assert "FAIL torch>=2.0: torch is not installed" in r.stdout
    assert "ok   python>=3.10" in r.stdout


def test_torch_that_crashes_on_import_is_reported(tmp_path, bare_python):
    site = subprocess.run([bare_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "torch").mkdir()
    (Path(site) / "torch" / "__init__.py").write_text("import os\nos.abort()\n")
    try:
        r = envkit("doctor", "--python", bare_python, "--json")
        assert r.returncode == 1
        checks = {c["id"]: c for c in json.loads(r.stdout)["checks"]}
        assert checks["torch"]["status"] == "fail"
        assert "SIGABRT" in checks["torch"]["message"]
    finally:
        (Path(site) / "torch" / "__init__.py").unlink()
        (Path(site) / "torch").rmdir()


def test_record_then_replay_gives_the_same_diagnosis(tmp_path):
    snap = tmp_path / "me.json"
    home = tmp_path / "home"  # a home directory that is not "/" (as it is for root in some containers), and a path under it
    home.mkdir()
    env = {"PYTORCH_MPS_FAST_MATH": "1", "MY_API_TOKEN": "s3cret", "AWS_SECRET_ACCESS_KEY": "x", "DB_PASSWORD": "pw",
           "HOME": str(home), "PYTORCH_KERNEL_CACHE_PATH": f"{home}/.cache/torch/kernels"}
    live = envkit("doctor", "--record", str(snap), "--json", env=env)
    assert live.returncode in (0, 1), live.stderr
    text = snap.read_text()
    data = json.loads(text)
    assert data["envkit_snapshot"] == 1
    assert data["env"].get("PYTORCH_MPS_FAST_MATH") == "1"
    assert "s3cret" not in text and "MY_API_TOKEN" not in text and "DB_PASSWORD" not in text
    assert str(home) not in text
    assert data["env"]["PYTORCH_KERNEL_CACHE_PATH"] == "~/.cache/torch/kernels"  # the home directory written as ~
    replay = envkit("doctor", "--replay", str(snap), "--json")
    a, b = json.loads(live.stdout), json.loads(replay.stdout)
    for key in ("os", "chip", "memory_bytes", "gpus", "torch"):
        assert a["facts"][key] == b["facts"][key], key
    assert [(c["id"], c["status"]) for c in a["checks"]] == [(c["id"], c["status"]) for c in b["checks"]]
    assert a["profile"] == b["profile"]


@pytest.mark.parametrize("content,needle", [
    (None, "snapshot file not found"),
    ("{oops", "not valid JSON (line 1"),
    ('{"hello": 1}', "not an envkit snapshot"),
    ('{"envkit_snapshot": 9}', "version 9 is not supported"),
    ('{"envkit_snapshot": 1, "commands": []}', '"commands" must be an object'),
])
def test_bad_snapshot_is_one_line_exit_2(tmp_path, content, needle):
    path = tmp_path / "snap.json"
    if content is not None:
        path.write_text(content)
    r = envkit("doctor", "--replay", str(path))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and needle in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_debug_shows_traceback(tmp_path):
    r = envkit("--debug", "doctor", "--replay", str(tmp_path / "missing.json"))
    assert r.returncode != 0 and "Traceback" in r.stderr


def test_help_does_not_import_torch():
    code = ("import sys\nfrom envkit.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip().endswith("NO-TORCH"), r.stdout + r.stderr
    assert "doctor" in r.stdout and "check" in r.stdout


def test_doctor_examines_the_managed_environment(tmp_path, bare_python):
    """A project set up by `envkit setup` has .envkit/state.json: doctor looks at that Python."""
    (tmp_path / ".envkit").mkdir()
    (tmp_path / ".envkit" / "state.json").write_text(json.dumps({"python": bare_python, "profile": "cpu"}))
    sub = tmp_path / "src"
    sub.mkdir()
    r = envkit("doctor", "--json", "--no-runtime", cwd=sub)
    data = json.loads(r.stdout)
    assert data["facts"]["python"]["executable"] == bare_python
    assert {c["id"]: c["status"] for c in data["checks"]}["torch"] == "fail"
