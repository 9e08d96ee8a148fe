"""One owner per run folder, no orphans: while `envkit run` trains, a second `envkit run` of the
same config refuses in one line naming the owner's PID and how to watch or stop it; SIGKILL of
`envkit run` takes its trainer process with it. Real processes, polled with generous deadlines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import envkit, share_of_cores
from processes import LONG, alive as _alive, wait_for as _wait_for



def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTORCH_", "ENVKIT_"))}
    env["PYTHONUNBUFFERED"] = "1"
    return share_of_cores(env)


def _trainer_pid(run: Path) -> int | None:
    try:
        beat = json.loads((run / "heartbeat.json").read_text())
    except (OSError, ValueError):
        return None
    return beat.get("pid") if isinstance(beat.get("step"), int) and beat["step"] > 0 else None


def test_a_second_run_refuses_and_sigkill_leaves_no_trainer(tmp_path):
    (tmp_path / "train.yaml").write_text(LONG)
    run = tmp_path / "runs" / "own" / "r"
    first = subprocess.Popen([sys.executable, "-m", "envkit", "run", "train.yaml", "--profile", "cpu", "--run-id", "r"],
                             cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert _wait_for(lambda: _trainer_pid(run) is not None and (run / "checkpoints" / "step_00000050.pt").is_file())
        trainer = _trainer_pid(run)
        assert trainer != first.pid and _alive(trainer)

        second = envkit("run", "train.yaml", "--profile", "cpu", "--run-id", "r", cwd=tmp_path, timeout=180)
        assert second.returncode == 2, second.stderr[-2000:]
        errors = [line for line in second.stderr.splitlines() if line.startswith("envkit: error")]
        assert len(errors) == 1 and "Traceback" not in second.stderr, second.stderr
        assert f"PID {first.pid}" in errors[0] and f"envkit monitor {run}" in errors[0] and "envkit stop" in errors[0], errors[0]
        # and without --run-id (resume auto picks the same unfinished folder): refused too
        third = envkit("run", "train.yaml", "--profile", "cpu", cwd=tmp_path, timeout=180)
        assert third.returncode == 2 and f"PID {first.pid}" in third.stderr, third.stderr[-2000:]

        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
        assert _wait_for(lambda: not _alive(trainer), seconds=120), f"trainer {trainer} outlived envkit run"
    finally:
        if first.poll() is None:
            first.kill()
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines() if '"loss"' in line]
    assert len(steps) == len(set(steps))  # one writer: no step twice
