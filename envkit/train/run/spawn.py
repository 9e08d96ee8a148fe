"""The trainer's process dies with envkit's (envkit run, envkit sweep; the exec'd command too):
PR_SET_PDEATHSIG where it exists (Linux) and, everywhere, a pipe whose write end only envkit's
process holds (the child's side: parent_watch.py)."""

from __future__ import annotations

import os
import signal
import subprocess


def die_with_parent(sig: int = signal.SIGTERM):
    """A preexec_fn: the child gets `sig` when envkit's process dies, however it dies (SIGKILL
    included), so no trainer is left running with parent 1 (Linux prctl(PR_SET_PDEATHSIG), see
    prctl(2)). SIGTERM: the trainer checkpoints and stops as for `envkit stop`. None where prctl is
    not there (macOS)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
        if os.getppid() != parent:  # the parent died before the prctl: it would never fire
            os._exit(1)

    return preexec


PARENT_FD_ENV = "ENVKIT_PARENT_FD"


def spawn_child(cmd: list[str], env: dict, owner=None, **popen_kw) -> subprocess.Popen:
    """Start a trainer that dies with this process, by two means: PR_SET_PDEATHSIG (Linux, at once)
    and a pipe whose write end only this process holds (everywhere, macOS included): the kernel
    closes it when this process dies, however it dies, and the child's watcher thread
    (envkit/train/run/parent_watch.py) reads EOF and stops the trainer as `envkit stop` would.
    ENVKIT_PARENT_FD is "FD@PID": a grandchild that inherits the variable but not the pipe (torchrun's
    workers) sees another parent PID and ignores it. Given the run folder's owner lock
    (fsutil.take_owner_lock), the child holds it too: the folder is free only when both are gone.
    release_child(proc) closes the pipe once the child has ended."""
    read_end, write_end = os.pipe()  # both close-on-exec; pass_fds hands the child its read end only
    fds = [read_end]
    if owner is not None:
        os.set_inheritable(owner.fileno(), True)
        fds.append(owner.fileno())
    env = {**env, PARENT_FD_ENV: f"{read_end}@{os.getpid()}"}
    try:
        proc = subprocess.Popen(cmd, env=env, preexec_fn=die_with_parent(), pass_fds=tuple(fds), **popen_kw)
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    proc.envkit_parent_pipe = write_end
    return proc


def release_child(proc: subprocess.Popen) -> None:
    fd = getattr(proc, "envkit_parent_pipe", None)
    if fd is not None:
        proc.envkit_parent_pipe = None
        os.close(fd)
