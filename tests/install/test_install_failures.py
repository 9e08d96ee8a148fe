"""What goes wrong during an install, for real: pip's own configuration read through pip, a
downloaded wheel whose sha256 differs, pip failing half-way, Ctrl-C during the install (each
must leave the previous environment working), and the gates that refuse before anything starts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import default_sigint, envkit, snapshot_path
from envkit.errors import EnvkitError
from localindex import installed


def _pip_env(tmp_path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "home"), **extra)
    return env


def test_pip_sources_follow_pips_own_precedence(tmp_path, monkeypatch):
    """`pip config list` through the real pip: a PIP_* variable beats the config file, [install]
    beats [global], and a multi-line extra-index-url is several indexes."""
    from envkit.install.index.pip_config import pip_sources

    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://global.invalid/simple\n"
                    "[install]\nindex-url = https://install.invalid/simple\n"
                    "extra-index-url =\n    https://x.invalid/simple\n    https://y.invalid/simple\n"
                    "find-links = /srv/wheels\n")
    for k in [k for k in os.environ if k.startswith("PIP_")]:
        monkeypatch.delenv(k)
    for k, v in _pip_env(tmp_path, PIP_CONFIG_FILE=str(conf)).items():
        monkeypatch.setenv(k, v)
    assert pip_sources(sys.executable) == (["https://install.invalid/simple", "https://x.invalid/simple", "https://y.invalid/simple"],
                                           ["/srv/wheels"])
    monkeypatch.setenv("PIP_INDEX_URL", "https://env.invalid/simple")
    monkeypatch.setenv("PIP_FIND_LINKS", "/a /b")
    assert pip_sources(sys.executable) == (["https://env.invalid/simple", "https://x.invalid/simple", "https://y.invalid/simple"],
                                           ["/a", "/b"])
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # pip reads no file at all
    monkeypatch.delenv("PIP_INDEX_URL")
    assert pip_sources(sys.executable)[0] == ["https://pypi.org/simple"]


def test_a_downloaded_wheel_whose_sha256_differs_is_refused_and_not_cached(tmp_path, monkeypatch):
    from envkit.install.act import execute

    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "cache"))
    wheel = tmp_path / "torch-2.8.0.dev20250101+cpu-py3-none-any.whl"
    wheel.write_bytes(b"PK\x03\x04 not really a wheel, but bytes with a known hash")
    with pytest.raises(EnvkitError) as err:
        execute.fetch_wheel(wheel.as_uri(), wheel.name, "0" * 64)
    assert "torch-2.8.0.dev20250101+cpu-py3-none-any.whl does not match the sha256" in err.value.one_line()
    assert not any((tmp_path / "cache").rglob("*.whl*"))  # neither the file nor a partial download stays
    import hashlib

    good = execute.fetch_wheel(wheel.as_uri(), wheel.name, hashlib.sha256(wheel.read_bytes()).hexdigest())
    assert good.read_bytes() == wheel.read_bytes()


def _setup(tmp_path, *args, **kw):
    return envkit("setup", "--yes", "--no-selftest", "--installer", "pip", *args, cwd=tmp_path,
                  env={"ENVKIT_CACHE_DIR": str(tmp_path / "cache")}, timeout=240, **kw)


def test_a_pip_failure_half_way_and_a_ctrl_c_during_the_install_each_put_the_previous_environment_back(server, venv, tmp_path):
    """One environment (torch 2.6.0), two installs that do not finish: a wheel whose bytes differ from
    the index's sha256 (pip fails half-way), then a download Ctrl-C interrupts. After each, the
    environment is exactly what it was."""
    assert _setup(tmp_path, "--venv", str(venv), "--index-url", server.url("json"), "--torch", "2.6.0").returncode == 0
    before = installed(venv)
    r = _setup(tmp_path, "--venv", str(venv), "--index-url", server.url("tampered"), "--torch", "2.7.1")
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()[-1]
    assert "put back exactly" in err and "Traceback" not in r.stderr
    assert installed(venv) == before == {"torch": "2.6.0+cpu"}
    assert subprocess.run([str(venv / "bin/python"), "-c", "import torch; assert torch.__version__ == '2.6.0+cpu'"]).returncode == 0
    assert not (venv / ".envkit-rollback").exists()

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTORCH_", "ENVKIT_"))}
    env.update(ENVKIT_CACHE_DIR=str(tmp_path / "cache"), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "envkit", "setup", "--yes", "--no-selftest", "--installer", "pip",
                             "--venv", str(venv), "--index-url", server.url("stall"), "--torch", "2.7.2"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=default_sigint)
    try:
        # wait until pip is downloading the stalled wheel, as a person watching the terminal would
        deadline = time.monotonic() + 120
        while not any("torch-2.7.2" in path for path, _ in server.requests) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.poll() is None
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground group: envkit and pip
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert "interrupted; the environment was put back exactly as it was" in err, err[-2000:]
    assert installed(venv) == before
    assert not (venv / ".envkit-rollback").exists()


def test_a_python_too_old_for_torch_fails_doctor_with_the_fix(tmp_path):
    snap = json.loads(snapshot_path("linux_no_gpu").read_text())
    snap["python"]["version"] = "3.8.18"
    path = tmp_path / "old_python.json"
    path.write_text(json.dumps(snap))
    r = envkit("doctor", "--replay", str(path), "--json")
    assert r.returncode == 1
    (check,) = [c for c in json.loads(r.stdout)["checks"] if c["id"] == "python-version"]
    assert check["status"] == "fail" and "3.8.18" in check["message"] and check["fix"]


def test_package_gates_hold_or_fail_with_what_was_found():
    snap = str(snapshot_path("linux_no_gpu"))  # numpy 2.2.6 recorded
    r = envkit("check", "--replay", snap, "--require", "numpy>=2", "--require", "numpy<3", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["ok"] is True
    r = envkit("check", "--replay", snap, "--require", "numpy>=2.3", "--require", "notapackage>=1", "--json")
    assert r.returncode == 1
    res = {x["requirement"]: x for x in json.loads(r.stdout)["results"]}
    assert res["numpy>=2.3"]["ok"] is False and res["numpy>=2.3"]["found"] == "2.2.6"
    assert res["notapackage>=1"]["ok"] is False and res["notapackage>=1"]["found"] is None
