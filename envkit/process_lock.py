"""Which process holds a lock: a process told from a later one given the same PID (its start time),
and an advisory lock file that records its holder, released by the kernel when the holder ends.
Below every stage: the managed environment's lock (install) and a run folder's owner lock
(runfolder/owner.py) both stand on it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import TypeGuard


def process_start_time(pid) -> str | None:
    """When process `pid` started, as a token that differs between two processes that had the same
    PID: Linux /proc/PID/stat field 22 (clock ticks since boot), macOS `ps -o lstart=`. None when
    there is no such process (or it cannot be told)."""
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[19]  # field 22; fields 1-2 (pid, "(comm)") end at the last ')'
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return None  # Linux: no such process
    except (OSError, IndexError):
        return None
    try:
        out = subprocess.run(["ps", "-o", "lstart=", "-p", str(pid)], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return " ".join(out.stdout.split()) or None


def same_process(pid, start_time) -> TypeGuard[int]:
    """`pid` is alive and is the process that started at `start_time` (not a later one given its PID);
    so it is a number (TypeGuard: the caller's `pid` is an int where this is true)."""
    now = process_start_time(pid)
    return now is not None and start_time is not None and str(now) == str(start_time)


def write_lock_record(fh, record: dict) -> None:
    """`record` as the whole content of an open lock file: one JSON line, flushed for its readers."""
    fh.seek(0)
    fh.truncate()
    fh.write(json.dumps(record) + "\n")
    fh.flush()


class LockHeld(Exception):
    """hold_lock_file: another process holds the lock; `record` is what it wrote in the file."""

    def __init__(self, record: dict):
        super().__init__(f"held by PID {record.get('pid', '?')}")
        self.record = record


def hold_lock_file(path: Path, record: dict):
    """An advisory exclusive lock (flock) on `path`, taken without waiting. Returns the open file
    (keep it open: closing it releases the lock, and so does the kernel when this process ends,
    however it ends), with `record` and this process's PID and start time written in it; LockHeld
    with the holder's record when another process holds it."""
    import fcntl  # POSIX only: imported where a lock is taken

    fh = open(path, "a+")
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.seek(0)
        try:
            held = json.loads(fh.read() or "{}")
        except ValueError:
            held = {}
        fh.close()
        raise LockHeld(held if isinstance(held, dict) else {}) from None
    write_lock_record(fh, {"pid": os.getpid(), "start_time": process_start_time(os.getpid()), **record})
    return fh
