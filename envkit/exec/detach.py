"""`envkit exec --detach` and `envkit stop`.

--detach starts envkit's supervisor (`python -m envkit.exec.detach RUN_DIR -- COMMAND...`) in a
session of its own, so closing the terminal does not end the run (what nohup did in the launch
scripts of common MPS recipes: docs/knowledge/common-guides.md, "The detached launcher"); it
inherits the command's environment already made, reads its options from the run's config.json,
and writes only to the run folder. The caller waits until the command has a pid
(a few hundred milliseconds), prints the folder and the pids, and returns."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from envkit.errors import EnvkitError
from envkit.exec.supervise import Options, Supervisor
from envkit.fsutil import same_process
from envkit.runfolder.applog import open_append
from envkit.runfolder.names import OWNER_LOCK
from envkit.runfolder.owner import owner_lock_state, read_owner
from envkit.runfolder.liveness import notice_killed, pid_alive as alive
from envkit.runfolder.record_files import being_written
from envkit.runfolder.seal import seal_results
from envkit.runfolder.progress import Heartbeat, Summary
from envkit.runfolder.records import RunStatus
from envkit.runfolder.bounded import read_bytes
from envkit.runfolder.folder import RunFolder

STARTED_TIMEOUT = 30.0


def spawn(run_dir: Path, launched: list[str], env: dict) -> subprocess.Popen:
    log = os.fdopen(open_append(RunFolder(run_dir).supervisor_log), "ab")
    try:
        return subprocess.Popen([sys.executable, "-m", "envkit.exec.detach", str(run_dir), "--", *launched], env=env,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, cwd=os.getcwd())
    finally:
        log.close()


def wait_started(run_dir: Path, proc: subprocess.Popen, timeout: float = STARTED_TIMEOUT) -> int:
    """The command's pid once the supervisor has started it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        beat = RunFolder(run_dir).heartbeat()
        if beat is not None and beat.child_pid:
            return beat.child_pid
        if proc.poll() is not None:
            log = RunFolder(run_dir).supervisor_log
            tail = (read_bytes(log, max_bytes=64 << 10, tail=True) or b"").decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise EnvkitError(f"the detached run ended before its command started: {tail[0]}", where=str(log))
        time.sleep(0.05)
    raise EnvkitError(f"the detached run did not start its command within {timeout:g} s", where=str(run_dir),
                      fix=f"see {RunFolder(run_dir).supervisor_log}; `envkit stop {run_dir}` ends it")


def pid_alive(pid) -> bool:
    return alive(pid) is True


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.1)
    return not pid_alive(pid)


class NothingSent(EnvkitError):
    """`envkit stop` found no process of the run to signal: a fact, not bad input (exit 1)."""

    exit_code = 1


def _target(run_dir: Path, beat: Heartbeat, say=print) -> tuple[int, Callable[[int], None]] | None:
    """(pid, how to signal it) of the run's own live process, checked to be the one envkit started:
    the PID with the start time heartbeat.json records (exec runs record their command's too), in a
    folder whose owner lock is not free (the kernel frees it when the run's processes die). None
    when no such process lives; NothingSent when one may, but cannot be told from a program that
    was given its PID since."""
    lock = owner_lock_state(run_dir)
    supervisor, child = beat.pid, beat.child_pid
    if lock == "free":
        return None  # nothing of envkit runs in the folder, whatever holds those PIDs now
    if beat.pid_start is None:  # an older run, or another tool's heartbeat: the PID alone proves nothing
        return _lock_holder(run_dir, lock, supervisor, say)
    if same_process(supervisor, beat.pid_start):
        return supervisor, lambda s: os.kill(supervisor, s)
    if same_process(child, beat.child_start):  # envkit's process is gone (killed -9): signal the command's group directly
        return child, lambda s: os.killpg(child, s)
    return None


def _lock_holder(run_dir: Path, lock: str | None, pid, say) -> tuple[int, Callable[[int], None]] | None:
    """For a heartbeat without a start time: the process holding the folder's owner lock, when the lock
    file names it with a start time that a live process has (take_owner_lock records both)."""
    if lock is None:  # no lock either (an envkit before it): a live PID may be the trainer or any program
        if pid_alive(pid):
            raise NothingSent(f"cannot tell whether PID {pid} still runs {run_dir}: its heartbeat.json records no start time "
                              "and the folder has no owner lock: nothing sent",
                              fix=f"if `ps -p {pid} -o args` shows its trainer, stop it with `kill -INT {pid}`")
        return None
    owner = read_owner(run_dir)
    holder = owner.get("pid")
    if same_process(holder, owner.get("start_time")):
        say(f"heartbeat.json records no start time for PID {pid}: stopping the owner lock's holder, {owner.get('command', 'a process')} "
            f"(PID {holder}, its start time checked)")
        return holder, lambda s: os.kill(holder, s)
    raise NothingSent(f"{run_dir} is in use (its owner lock is held), but neither heartbeat.json (PID {pid}) nor the lock file "
                      f"({f'PID {holder}' if holder else 'no PID'}) records the start time of a live process, "
                      "so the holder cannot be told from a program "
                      "given that PID since: nothing sent",
                      fix=f"find the holder with `fuser {run_dir / OWNER_LOCK}` (macOS: `lsof {run_dir / OWNER_LOCK}`) and stop it yourself")


def stop(run_dir: Path, grace: float, say=print) -> str:
    """SIGINT to the run (envkit's supervisor forwards it to the command's process group), SIGTERM
    after `grace` seconds, SIGKILL after as many again. Returns how it ended. Signals only a process
    checked to be the run's own (_target); else one line, exit 1, nothing sent."""
    folder = RunFolder(run_dir)
    summary, beat = folder.summary(), folder.heartbeat() or Heartbeat()
    if summary is not None and summary.status and summary.speaks_for(beat):
        return f"already {summary.status}"
    found = _target(run_dir, beat, say)
    if found is None:
        if owner_lock_state(run_dir) == "free":
            notice_killed(run_dir, "envkit stop")
        pids = [p for p in (beat.pid, beat.child_pid) if pid_alive(p)]
        if pids:
            raise NothingSent(f"the process that ran {run_dir} is gone; PID {pids[0]} is now another program: nothing sent",
                              fix="`envkit runs` shows its status")
        raise NothingSent(f"the process that ran {run_dir} is gone: nothing sent", fix="`envkit runs` shows its status")
    target, send = found
    for signum, wait in ((signal.SIGINT, grace), (signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        say(f"sending {signal.Signals(signum).name} to pid {target}")
        try:
            send(signum)
        except ProcessLookupError:
            break
        if _wait_gone(target, wait):
            break
    # the supervisor writes summary.json as it ends; give it a moment after its command
    _wait_gone(target, 5.0)
    return (folder.summary() or Summary()).status or RunStatus.STOPPED.value


def main(argv: list[str]) -> int:
    """The detached supervisor: python -m envkit.exec.detach RUN_DIR -- COMMAND..."""
    run_dir = Path(argv[0])
    command = argv[argv.index("--") + 1:]
    options = RunFolder(run_dir).config().get("options") or {}
    opts = Options.from_record(options, echo=False)
    rc = Supervisor(command, dict(os.environ), run_dir, opts).run()
    deadline = time.monotonic() + 120  # the foreground envkit finishes the record; then the results join its seal
    while being_written(run_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    seal_results(run_dir)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
