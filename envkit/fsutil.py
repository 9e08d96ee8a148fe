"""Files: written atomically (a file is either the old one or the whole new one, never half of
each), hashed in blocks, named and placed as a user's values allow, and locked by a process that
other processes can name; and envkit's one cache folder (`cache_dir`), under which every cache lives.

Modes: a file is created as open() creates it, 0666 less the umask (0644 under the usual 022), so
the locks (pylock.toml, pylock.machine.toml), env scripts, run folders and reports can be read by a CI
runner or a colleague; mkstemp's own 0600 is never left on them. None of envkit's files holds a
secret (credentials are stripped or redacted before anything is written), so none is private; a
file that ever must be passes mode=0o600."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TypeGuard

from envkit.errors import EnvkitError


@contextlib.contextmanager
def atomic_writer(path: Path, mode: int | None = None):
    """Yield a binary file in the target's folder; on success it is fsynced and renamed over
    `path`, on any error (Ctrl-C included) it is removed and `path` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, shared_mode() if mode is None else mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def shared_mode() -> int:
    """0666 less this process's umask: the mode open() would give a new file."""
    try:  # Linux 4.7+ reports it without changing it
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    umask = os.umask(0o022)  # elsewhere the only way to read it is to set it, and put it back at once
    os.umask(umask)
    return 0o666 & ~umask


def atomic_write_bytes(path: Path, data: bytes, mode: int | None = None) -> None:
    with atomic_writer(path, mode) as fh:
        fh.write(data)


def atomic_write_text(path: Path, text: str, mode: int | None = None) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), mode)


IGNORE_ALL = "# written by envkit: nothing in this folder belongs in git\n*\n"


def ignore_all(folder: Path) -> None:
    """A `.gitignore` of `*` in a folder envkit made (its managed environment, a runs folder), as venv
    tools write one: `git add -A` in the project never commits a venv or run outputs. One already
    there is the user's and is kept."""
    try:
        fd = os.open(Path(folder) / ".gitignore", os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
    except OSError:
        return  # there already (kept), or the folder is not writable: nothing to protect
    with os.fdopen(fd, "w") as fh:
        fh.write(IGNORE_ALL)


# ---- hashes of files too big to read whole: wheels, checkpoint shards, data files

def sha256_file(path: Path) -> str:
    """The sha256 of a file, read in 1 MiB blocks (wheels, checkpoint shards: never whole in memory)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---- names and paths given by a user or a config, checked before anything is written: a run's folder
# name is one path component, a run folder stays inside the runs folder, an output file's folder takes
# a file. Each refusal is one EnvkitError naming where the value came from.

_BAD_NAME_CHARS = ("/", "\\", "\0")


def check_name(name, where: str, what: str = "name") -> str:
    """A run's folder name as given by a user or a config (experiment.name, --run-id, exec --name,
    a sweep value): one path component, never '.', '..', empty or holding a path separator, so that
    runs/<name>/ is always a folder inside the runs folder. Raises EnvkitError naming `where`."""
    text = "" if name is None else str(name)
    if not text.strip():
        raise EnvkitError(f"{what} must not be empty", where=where, fix="give a name of letters, digits, '.', '_' or '-'")
    if text.strip() in (".", "..") or any(c in text for c in _BAD_NAME_CHARS):
        raise EnvkitError(f"{what} {text!r} is not a folder name: it must not be '.' or '..' nor hold '/' or '\\'",
                          where=where, fix="give a name of letters, digits, '.', '_' or '-', e.g. my-run")
    return text


def check_inside(root: Path, path: Path, where: str) -> Path:
    """`path` (made absolute, '..' folded) strictly inside `root`; else EnvkitError. Checked
    before anything is written to a run folder. Lexical, so a runs/<name> that the user made a
    symlink to a bigger disk is still accepted."""
    base = os.path.normpath(os.path.abspath(root))
    full = os.path.normpath(os.path.abspath(path))
    if os.path.commonpath([base, full]) != base or full == base:
        raise EnvkitError(f"the run folder {full} would not be inside the runs folder {base}", where=where,
                          fix="use names without '..' or '/'")
    return Path(full)


def check_writable(path: Path, where: str) -> Path:
    """An output file's folder exists (made here if need be) and takes a file: checked before the
    work whose result goes there, so a path that cannot be written is one line at the start,
    not a traceback after minutes of work."""
    path = Path(path)
    if path.is_dir():
        raise EnvkitError(f"{path} is a folder; give a file name", where=where)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=path.parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise EnvkitError(f"cannot write there: {exc.strerror or exc} ({exc.filename or path.parent})", where=where,
                          fix="choose a path in a folder you can write") from None
    return path


# ---- which process holds a lock: a process told from a later one given the same PID (its start time),
# and an advisory lock file that records its holder, released by the kernel when the holder ends.
# The managed environment's lock (install) and a run folder's owner lock (runfolder/owner.py) stand on it.

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


def cache_dir() -> Path:
    """envkit's cache, the one place every cache of envkit lives under: ENVKIT_CACHE_DIR, else
    $XDG_CACHE_HOME/envkit, else ~/.cache/envkit (~/Library/Caches/envkit on macOS)."""
    if os.environ.get("ENVKIT_CACHE_DIR"):
        return Path(os.environ["ENVKIT_CACHE_DIR"])
    if sys.platform == "darwin" and not os.environ.get("XDG_CACHE_HOME"):
        return Path.home() / "Library" / "Caches" / "envkit"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "envkit"
