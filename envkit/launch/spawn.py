"""The trainer's process dies with envkit's (envkit run, envkit sweep; the exec'd command too):
PR_SET_PDEATHSIG where it exists (Linux) and, everywhere, a pipe whose write end only envkit's
process holds (the child's side: envkit/train/run/parent_watch.py)."""

from __future__ import annotations

import os
import signal
import subprocess

from envkit.train.run.parent_watch import PARENT_FD_ENV  # "FD@PID": the pipe's contract, spelt on the child's side
from envkit.runfolder.owner import note_owner_child


def die_with_parent(sig: int = signal.SIGTERM, ignore_usr1: bool = False):
    """A preexec_fn: the child gets `sig` when envkit's process dies, however it dies (SIGKILL
    included), so no trainer is left running with parent 1 (Linux prctl(PR_SET_PDEATHSIG), see
    prctl(2)). SIGTERM: the trainer checkpoints and stops as for `envkit stop`. Where prctl is not
    there (macOS) the pipe alone does it."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        prctl = None
    parent = os.getpid()

    def preexec() -> None:
        if prctl is not None:
            prctl(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
            if os.getppid() != parent:  # the parent died before the prctl: it would never fire
                os._exit(1)
        if ignore_usr1:  # the trainer and torchrun: see ask_to_checkpoint (the trainer sets its own handler)
            signal.signal(signal.SIGUSR1, signal.SIG_IGN)

    return preexec


class ChildProcess(subprocess.Popen):
    """A trainer spawn_child started: it keeps the write end of the pipe the child's watcher reads."""

    envkit_parent_pipe: int | None = None


def spawn_child(cmd: list[str], env: dict, owner=None, **popen_kw) -> ChildProcess:
    """Start a trainer that dies with this process, by two means: PR_SET_PDEATHSIG (Linux, at once)
    and a pipe whose write end only this process holds (everywhere, macOS included): the kernel
    closes it when this process dies, however it dies, and the child's watcher thread
    (envkit/train/run/parent_watch.py) reads EOF and stops the trainer as `envkit stop` would.
    ENVKIT_PARENT_FD is "FD@PID": a grandchild that inherits the variable but not the pipe (torchrun's
    workers) sees another parent PID and ignores it. Given the run folder's owner lock
    (runfolder.owner.take_owner_lock), the child holds it too: the folder is free only when both are gone.
    release_child(proc) closes the pipe once the child has ended."""
    read_end, write_end = os.pipe()  # both close-on-exec; pass_fds hands the child its read end only
    fds = [read_end]
    if owner is not None:
        os.set_inheritable(owner.fileno(), True)
        fds.append(owner.fileno())
    env = {**env, PARENT_FD_ENV: f"{read_end}@{os.getpid()}"}
    try:
        proc = ChildProcess(cmd, env=env, preexec_fn=die_with_parent(ignore_usr1=True), pass_fds=tuple(fds), **popen_kw)
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    proc.envkit_parent_pipe = write_end
    if owner is not None:
        note_owner_child(owner, proc.pid)  # a refusal names the child once this process is gone
    return proc


def release_child(proc: subprocess.Popen) -> None:
    if isinstance(proc, ChildProcess) and proc.envkit_parent_pipe is not None:
        fd, proc.envkit_parent_pipe = proc.envkit_parent_pipe, None
        os.close(fd)


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (Linux /proc/PID/task/TID/children; [] where that is missing)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{p}/task/{tid}/children") as fh:
                    kids = [int(x) for x in fh.read().split()]
            except (OSError, ValueError):
                continue
            found.extend(kids)
            todo.extend(kids)
    return found


def ask_to_checkpoint(proc: subprocess.Popen) -> None:
    """Have the trainer stop at the next step with a checkpoint: SIGUSR1 to the trainer and, under
    torchrun, to each of its workers (torchrun itself ignores SIGUSR1: launch() starts it so,
    because its default action would end torchrun, and a SIGTERM would make torchrun kill its
    workers 30 s later whether or not they have saved)."""
    for pid in [proc.pid, *descendants(proc.pid)]:
        try:
            os.kill(pid, signal.SIGUSR1)
        except (ProcessLookupError, PermissionError):
            pass
