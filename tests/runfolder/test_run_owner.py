"""One owner per run folder, no orphans: while `envkit run` trains, a second `envkit run` of the
same config refuses in one line naming the owner's PID and how to watch or stop it; SIGKILL of
`envkit run` takes its trainer process with it. Real processes, polled with generous deadlines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from conftest import envkit, share_of_cores
from processes import LONG, alive as _alive, checkpointed, wait_for as _wait_for



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
        assert _wait_for(lambda: _trainer_pid(run) is not None and checkpointed(run))
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


# A run whose step 15 takes SLOW_STEP (300 s) more, once per run folder (ENVKIT_TRAIN_INJECT slow@15): a kill or
# a signal lands inside a step far longer than any wait below. Checkpoints every 10 steps: step 10 is kept.
SHORT = LONG.replace("max_steps: 10000000", "max_steps: 30").replace("every_steps: 50, keep_last: 2", "every_steps: 10, keep_last: 2")
GONE_WITHIN = 30.0  # seconds: generous for a loaded machine, a tenth of the step the trainer is in


def _start_slow(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    (tmp_path / "train.yaml").write_text(SHORT)
    run = tmp_path / "runs" / "own" / "r"
    proc = subprocess.Popen([sys.executable, "-m", "envkit", "run", "train.yaml", "--profile", "cpu", "--run-id", "r", *args],
                            cwd=tmp_path, env={**_env(), "ENVKIT_TRAIN_INJECT": "slow@15"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    # inside step 15: the injection is recorded as it starts its sleep
    assert _wait_for(lambda: '"slow@15"' in _read(run / "faults.jsonl") and _trainer_pid(run) is not None), _read(run / "train.log")
    return proc, run


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def test_sigkill_of_envkit_run_mid_step_a_refusal_names_the_held_trainer_which_then_ends_at_once_and_the_run_resumes(tmp_path):
    """While the trainer is held (SIGSTOP) it still holds the folder after `envkit run` is killed: a
    second `envkit run` names the trainer's PID, the one to wait for or kill, not the dead one's.
    Let go, the trainer finds its supervisor gone and gives up its long step at once; the run resumes."""
    from envkit.runfolder.owner import owner_lock_state

    first, run = _start_slow(tmp_path)
    trainer = _trainer_pid(run)
    try:
        os.kill(trainer, signal.SIGSTOP)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
        second = envkit("run", "train.yaml", "--profile", "cpu", "--run-id", "r", cwd=tmp_path, timeout=180)
    finally:
        os.kill(trainer, signal.SIGCONT)
        if first.poll() is None:
            first.kill()
    assert second.returncode == 2, second.stderr[-2000:]
    [line] = [x for x in second.stderr.splitlines() if x.startswith("envkit: error")]
    assert f"(PID {trainer})" in line and f"kill {trainer})" in line and f"PID {first.pid}, gone" in line, line
    assert _wait_for(lambda: not _alive(trainer), seconds=GONE_WITHIN), f"trainer {trainer} still in its long step"
    assert owner_lock_state(run) == "free"
    assert "given up unfinished" in _read(run / "train.log")
    again = envkit("run", "train.yaml", "--profile", "cpu", "--run-id", "r", cwd=tmp_path, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    s = json.loads((run / "summary.json").read_text())
    assert (s["status"], s["steps"], s["resumed_from"]) == ("completed", 30, "step_00000010.pt")


def test_sigterm_to_envkit_run_mid_step_ends_the_whole_run_promptly_with_143(tmp_path):
    """`timeout 120 envkit run`, `kill PID`: the step under way is given up after its grace
    (checkpoint.sigterm_grace_seconds, here 1 s of the default 10), not finished (300 s); exit 128 + SIGTERM,
    and the run resumes."""
    first, run = _start_slow(tmp_path, "--set", "checkpoint.sigterm_grace_seconds=1")
    trainer = _trainer_pid(run)
    try:
        first.send_signal(signal.SIGTERM)
        rc = first.wait(timeout=GONE_WITHIN + 10)  # past the grace: TimeoutExpired if the step is waited for
    finally:
        if first.poll() is None:
            first.kill()
    assert rc == 128 + signal.SIGTERM, first.stderr.read()[-2000:]
    assert not _alive(trainer)
    s = json.loads((run / "summary.json").read_text())
    assert (s["status"], s["signal"]) == ("interrupted", "SIGTERM")
    assert s["error"].startswith("SIGTERM 1 s ago: step ") and "the newest checkpoint holds step 10" in s["error"]


def test_ctrl_c_checkpoints_says_so_exits_130_and_the_run_resumes(tmp_path):
    """Ctrl-C reaches the terminal's whole process group (envkit run and its trainer): the trainer
    checkpoints and says so, and `envkit run` exits 130, so `envkit run train.yaml && next` stops."""
    from conftest import default_sigint

    (tmp_path / "train.yaml").write_text(LONG.replace("every_steps: 50, keep_last: 2", "every_steps: 10, keep_last: 2"))
    run = tmp_path / "runs" / "own" / "r"
    proc = subprocess.Popen([sys.executable, "-m", "envkit", "run", "train.yaml", "--profile", "cpu", "--run-id", "r"],
                            cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=default_sigint)
    try:
        assert _wait_for(lambda: checkpointed(run))
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    s = json.loads((run / "summary.json").read_text())
    assert (s["status"], s["signal"]) == ("interrupted", "SIGINT")
    step = s["steps"]
    assert f"interrupted at step {step} (SIGINT); checkpoint written; `envkit run` again resumes" in out, out[-2000:]
    assert (run / "checkpoints" / f"step_{step:08d}.pt").is_file()
    again = envkit("run", "train.yaml", "--profile", "cpu", "--run-id", "r", "--stop-after", str(step + 2), cwd=tmp_path, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    s = json.loads((run / "summary.json").read_text())
    assert (s["status"], s["steps"], s["resumed_from"]) == ("stopped", step + 2, f"step_{step:08d}.pt")
