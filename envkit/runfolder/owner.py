"""One owner per run folder: the process that trains or supervises in it holds an advisory lock on
RUN/.owner.lock (take_owner_lock), which the kernel releases when it ends, however it ends; `runs`,
`stop`, `reproduce` and a second run read who holds it (read_owner, owner_lock_state, owner_holder)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import platform
import stat
import time
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.fsutil import process_start_time, same_process, write_lock_record
from envkit.runfolder.bounded import read_json_lenient
from envkit.runfolder.links import NOFOLLOW, link_error, make_run_folder
from envkit.runfolder.names import OWNER_LOCK


def read_owner(run_dir: Path) -> dict:
    """What RUN/.owner.lock says of the process that took it: pid, start_time, command, host, since."""
    return read_json_lenient(Path(run_dir) / OWNER_LOCK, max_bytes=64 << 10) or {}


def _open_lock(run_dir: Path) -> int | None:
    """A descriptor of RUN/.owner.lock to flock, or None: absent, a link, or not a regular file (a
    FIFO planted there is opened without blocking and refused, never waited on)."""
    try:
        fd = os.open(Path(run_dir) / OWNER_LOCK, os.O_RDONLY | NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def owner_lock_state(run_dir: Path) -> str | None:
    """"held" while a process owns the run folder, "free" when its owner lock exists and nothing holds
    it (whoever owned the folder is gone, however it ended), None for a folder without one (never
    owned, or written by an envkit before the lock). A non-blocking flock: the kernel's answer, not a PID."""
    import fcntl  # POSIX only: imported where a lock is taken

    fd = _open_lock(run_dir)
    if fd is None:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return "held"
    finally:
        os.close(fd)  # releases the lock if it was taken
    return "free"


@contextlib.contextmanager
def owner_lock_if_free(run_dir: Path):
    """Hold RUN/.owner.lock for the block when no process owns the folder (yields True), else yield
    False at once: whoever notices a dead owner writes its summary without racing a new owner."""
    import fcntl  # POSIX only: imported where a lock is taken

    fd = _open_lock(run_dir)
    if fd is None:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def take_owner_lock(run_dir: Path, command: str = "envkit run"):
    """An advisory exclusive lock (flock) on RUN/.owner.lock, held by the process that trains or
    supervises in the run folder for as long as it lives (and by its child, which inherits it): the
    kernel releases it when they end, however they end, so a stale lock cannot exist. Returns the open
    file (keep it open: closing it releases the lock). A folder another process holds: EnvkitError
    naming its PID and how to watch or stop it. The lock file records the owner's PID with its start
    time, command and host, for that message, `envkit runs` and `envkit stop`."""
    import fcntl  # POSIX only: imported where a lock is taken

    run_dir = make_run_folder(run_dir)  # and no symlink where envkit writes in it
    try:
        fh = os.fdopen(os.open(run_dir / OWNER_LOCK, os.O_RDWR | os.O_CREAT | NOFOLLOW, 0o666), "r+")
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise link_error(run_dir / OWNER_LOCK) from None
        raise EnvkitError(f"cannot open {run_dir / OWNER_LOCK}: {exc.strerror or exc}", where=str(run_dir),
                          fix="run it in a folder you can write") from None
    deadline = time.monotonic() + 1.0  # someone noticing a dead owner holds it for a moment (owner_lock_if_free)
    while True:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            if time.monotonic() < deadline:
                time.sleep(0.05)
                continue
        fh.close()
        pid, who = owner_holder(read_owner(run_dir))
        raise EnvkitError(f"run folder {run_dir} is in use: {who} is training in it; "
                          "a second process would write the same metrics and checkpoints", where=str(run_dir),
                          fix=f"watch it with `envkit monitor {run_dir}`, stop it with `envkit stop {run_dir}` (or kill {pid}), "
                              "or start a separate run with --resume never") from None
    write_lock_record(fh, {"pid": os.getpid(), "start_time": process_start_time(os.getpid()), "command": command,
                      "host": platform.node(), "since": time.time()})
    return fh


def note_owner_child(fh, pid: int) -> None:
    """The owner's child (the trainer, or torchrun) holds the lock too (it inherits it): its PID and
    start time go into the lock file beside the owner's, so a folder whose owner died while its
    child lives on is refused naming the child, the process to wait for or stop."""
    fh.seek(0)
    try:
        record = json.loads(fh.read() or "{}")
    except ValueError:
        record = {}
    record.update(child_pid=pid, child_start=process_start_time(pid))
    write_lock_record(fh, record)


def owner_holder(owner: dict) -> tuple[object, str]:
    """(PID, "what (PID N)") of the process that holds a run folder, from its lock file's record:
    the owner while it lives, else its child while that lives (the owner was killed and the child
    has not ended yet), else the owner as recorded (another host's, or it cannot be told)."""
    command, pid = owner.get("command", "envkit"), owner.get("pid", "?")
    if not same_process(owner.get("pid"), owner.get("start_time")) and same_process(owner.get("child_pid"), owner.get("child_start")):
        child = owner["child_pid"]
        return child, f"the training process (PID {child}) left by {command} (PID {pid}, gone)"
    return pid, f"{command} (PID {pid})"
