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
    assert not (tmp_path / ".envkit").exists() and not (tmp_path / "envkit.lock").exists()
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
        lock = tmp_path / "envkit.lock"
        before = lock.read_bytes()
        lock.unlink()
        r = envkit("setup", "--dry-run", "--venv", str(venv), "--index-url", srv.url("json"), "--profile", "conservative",
                   cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert "nothing to change" in r.stdout + r.stderr and "dry run: nothing written" in r.stdout + r.stderr
    assert not lock.exists() and before
