"""`envkit stop` on a run folder whose heartbeat.json has a PID but no start time (an older run, or
one written by another tool): the PID alone proves nothing (it may have been given to another
program), so the folder's owner lock decides. Free: nothing trains there, one line, exit 1. Held:
the holder is signalled when the lock file identifies it (PID and start time of a live process),
else one line, exit 1. A `sleep` holds the stale PID in every case and must never be signalled.
And a real `envkit run`, whose heartbeat records its start time, is still stopped by SIGINT to its
trainer. Real processes, polled with generous deadlines (no timing assertions)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import envkit
from processes import LONG, alive, checkpointed, wait_for

# Another program holding the folder's owner lock the way envkit's supervisors take it. It forks
# away from the test so that, once signalled, it is reaped (a child pytest never waits for would
# stay a zombie, which a PID check counts as alive), and takes SIGINT as a terminal's process does,
# also when the tests run in a background job (which starts with SIGINT ignored).
HOLDER = """\
import os, signal, sys, time
from envkit.runfolder.owner import take_owner_lock
if os.fork():
    os._exit(0)
signal.signal(signal.SIGINT, signal.default_int_handler)
lock = take_owner_lock(sys.argv[1], "another tool")
open(sys.argv[2], "w").write(str(os.getpid()))
time.sleep(600)
"""


def _folder(tmp_path: Path, stale_pid: int) -> Path:
    run = tmp_path / "runs" / "old" / "r"
    run.mkdir(parents=True)
    (run / "config.json").write_text("{}")
    (run / "heartbeat.json").write_text(json.dumps({"status": "running", "step": 5, "max_steps": 100, "pid": stale_pid,
                                                    "host": os.uname().nodename, "updated_at": time.time()}))
    return run


def _one_error(res) -> str:
    assert res.returncode == 1, (res.returncode, res.stdout, res.stderr[-2000:])
    errors = [line for line in res.stderr.splitlines() if line.startswith("envkit: error")]
    assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr
    return errors[0]


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(["sleep", "300"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def holder(tmp_path):
    """Start a process holding RUN/.owner.lock: holder(run) -> its PID, once the lock is taken."""
    pids = []

    def start(run: Path) -> int:
        flag = tmp_path / "holder.pid"
        subprocess.run([sys.executable, "-c", HOLDER, str(run), str(flag)], check=True, timeout=60)
        assert wait_for(lambda: flag.is_file() and flag.read_text().isdigit()), "the holder never took the lock"
        pids.append(int(flag.read_text()))
        return pids[-1]

    yield start
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_free_owner_lock_means_nothing_runs_there(tmp_path, sleeper):
    run = _folder(tmp_path, sleeper.pid)
    (run / ".owner.lock").write_text(json.dumps({"pid": sleeper.pid, "command": "envkit run"}))  # nobody holds it
    line = _one_error(envkit("stop", str(run), "--grace", "5", cwd=tmp_path))
    assert "nothing sent" in line and str(run) in line, line
    time.sleep(1.0)  # anything sent would have landed
    assert sleeper.poll() is None


def test_a_held_lock_whose_file_identifies_the_holder_stops_the_holder_not_the_stale_pid(tmp_path, sleeper, holder):
    run = _folder(tmp_path, sleeper.pid)
    owner = holder(run)
    res = envkit("stop", str(run), "--grace", "60", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"sending SIGINT to pid {owner}" in res.stderr and "SIGTERM" not in res.stderr, res.stderr
    assert wait_for(lambda: not alive(owner))
    assert sleeper.poll() is None


def test_a_held_lock_without_an_identifiable_holder_sends_nothing(tmp_path, sleeper, holder):
    run = _folder(tmp_path, sleeper.pid)
    owner = holder(run)
    # the lock stays held (flock is on the open file, not its text), but what it says is no proof:
    # a PID without a start time, here the sleeper's
    (run / ".owner.lock").write_text(json.dumps({"pid": sleeper.pid, "command": "another tool"}))
    line = _one_error(envkit("stop", str(run), "--grace", "5", cwd=tmp_path))
    assert "nothing sent" in line and "owner lock" in line and "start time" in line, line
    assert f"fuser {run / '.owner.lock'}" in line, line
    time.sleep(1.0)
    assert sleeper.poll() is None and alive(owner)


def test_without_an_owner_lock_a_pid_without_start_time_is_not_trusted(tmp_path, sleeper):
    run = _folder(tmp_path, sleeper.pid)
    line = _one_error(envkit("stop", str(run), "--grace", "5", cwd=tmp_path))
    assert f"cannot tell whether PID {sleeper.pid}" in line and "no start time" in line and "nothing sent" in line, line
    time.sleep(1.0)
    assert sleeper.poll() is None




def test_stop_sends_sigint_to_the_trainer_of_a_running_envkit_run(tmp_path):
    """Its heartbeat records the trainer's PID with its start time: the trainer itself gets SIGINT,
    checkpoints and ends "interrupted" (envkit run ignores SIGINT while its trainer runs), and
    `envkit run` exits 130, as for Ctrl-C: stopped, not finished."""
    (tmp_path / "train.yaml").write_text(LONG)
    run = tmp_path / "runs" / "own" / "r"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTORCH_", "ENVKIT_"))}
    first = subprocess.Popen([sys.executable, "-m", "envkit", "run", "train.yaml", "--profile", "cpu", "--run-id", "r"],
                             cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: checkpointed(run))
        trainer = json.loads((run / "heartbeat.json").read_text())["pid"]
        res = envkit("stop", str(run), "--grace", "120", cwd=tmp_path, timeout=400)
        assert res.returncode == 0, res.stderr[-2000:]
        assert f"sending SIGINT to pid {trainer}" in res.stderr and "SIGTERM" not in res.stderr, res.stderr
        assert first.wait(timeout=120) == 130
    finally:
        if first.poll() is None:
            first.kill()
    assert "SIGINT: stopping after this step" in (run / "train.log").read_text()
    assert json.loads((run / "summary.json").read_text())["status"] == "interrupted"
    assert not alive(trainer)



@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="zombies are told by /proc (Linux)")
def test_a_process_that_has_exited_but_is_not_yet_reaped_counts_as_gone():
    """`envkit stop` waits until the run's process is gone; one that has exited and waits for its
    parent to reap it (a zombie, which still answers kill(0)) is gone for that purpose."""
    from envkit.runfolder.liveness import pid_alive

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        assert wait_for(lambda: Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z", 60)
        assert pid_alive(proc.pid) is False
    finally:
        proc.wait()
    sleeping = subprocess.Popen(["sleep", "30"])
    try:
        assert pid_alive(sleeping.pid) is True
    finally:
        sleeping.kill()
        sleeping.wait()
