"""`envkit setup` refuses what would configure the wrong machine, and a dry run writes nothing."""

from __future__ import annotations

import subprocess
import sys

from conftest import envkit, snapshot_path
from localindex import LocalIndex, build_all


def test_profile_for_a_device_this_machine_lacks_is_refused(tmp_path):
    r = envkit("setup", "--profile", "m3-max", "--dry-run", "--yes", cwd=tmp_path)
    assert r.returncode == 2
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1 and "profile m3-max trains on mps" in line and "doctor check 'mps'" in line
    assert not (tmp_path / ".envkit").exists() and not (tmp_path / "pylock.machine.toml").exists()
    # planning for the machine that has it is fine
    r = envkit("setup", "--profile", "m3-max", "--replay", str(snapshot_path("m3_max_macos14")), "--dry-run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr


def test_dry_run_with_nothing_to_change_writes_nothing(tmp_path):
    wheels = build_all(tmp_path / "wheels")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {"ENVKIT_CACHE_DIR": str(tmp_path / "cache")}
    with LocalIndex(wheels) as srv:
        r = envkit("setup", "--yes", "--no-selftest", "--venv", str(venv), "--index-url", srv.url("json"), cwd=tmp_path, env=env)
        assert r.returncode == 0, r.stderr
        lock = tmp_path / "pylock.machine.toml"
        before = lock.read_bytes()
        lock.unlink()
        r = envkit("setup", "--dry-run", "--venv", str(venv), "--index-url", srv.url("json"), "--profile", "conservative",
                   cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert "nothing to change" in r.stdout + r.stderr and "dry run: nothing written" in r.stdout + r.stderr
    assert not lock.exists() and before


def test_a_second_setup_into_the_same_venv_is_refused_naming_the_first(tmp_path):
    """The first setup holds the venv while its torch download stalls (the index's stall mode); a
    second one into the same venv says in one line which PID holds it, exit 2, and changes nothing;
    the first finishes and the venv works."""
    import os
    import time

    from localindex import installed

    wheels = build_all(tmp_path / "wheels")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTORCH_", "ENVKIT_"))}
    env.update(ENVKIT_CACHE_DIR=str(tmp_path / "cache"), PIP_TIMEOUT="600")  # pip waits out the stall
    args = ["setup", "--yes", "--no-selftest", "--installer", "pip", "--venv", str(venv)]
    with LocalIndex(wheels, stall_seconds=600) as srv:
        first = subprocess.Popen([sys.executable, "-m", "envkit", *args, "--index-url", srv.url("stall"), "--torch", "2.7.2"],
                                 cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 120
            while not any("torch-2.7.2" in path for path, _ in srv.requests) and time.monotonic() < deadline:
                time.sleep(0.1)
            second = envkit(*args, "--index-url", srv.url("json"), "--torch", "2.6.0", cwd=tmp_path,
                            env={"ENVKIT_CACHE_DIR": str(tmp_path / "cache")}, timeout=240)
            srv.unstall.set()
            out, err = first.communicate(timeout=240)
        finally:
            if first.poll() is None:
                first.kill()
    assert second.returncode == 2, second.stdout + second.stderr
    [line] = second.stderr.strip().splitlines()
    assert f"another envkit setup (PID {first.pid}) is changing this venv" in line and str(venv) in line, line
    assert first.returncode == 0, err[-3000:]
    assert installed(venv) == {"torch": "2.7.2+cpu"}
    assert subprocess.run([str(venv / "bin/python"), "-c", "import torch; assert torch.__version__ == '2.7.2+cpu'"]).returncode == 0
