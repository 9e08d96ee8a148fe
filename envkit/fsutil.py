"""Atomic writes: a file is either the old one or the whole new one, never half of each.

Modes: a file is created as open() creates it, 0666 less the umask (0644 under the usual 022), so
the locks (pylock.toml, envkit.lock), env scripts, run folders and reports can be read by a CI
runner or a colleague; mkstemp's own 0600 is never left on them. None of envkit's files holds a
secret (credentials are stripped or redacted before anything is written), so none is private; a
file that ever must be passes mode=0o600."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


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


# ---------------------------------------------------------------- names that stay inside

_BAD_NAME_CHARS = ("/", "\\", "\0")


def check_name(name, where: str, what: str = "name") -> str:
    """A run's folder name as given by a user or a config (experiment.name, --run-id, exec --name,
    a sweep value): one path component, never '.', '..', empty or holding a path separator, so that
    runs/<name>/ is always a folder inside the runs folder. Raises EnvkitError naming `where`."""
    from envkit.errors import EnvkitError

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
    from envkit.errors import EnvkitError

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
    from envkit.errors import EnvkitError

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


# ---------------------------------------------------------------- one owner per run folder

OWNER_LOCK = ".owner.lock"


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
    import subprocess

    try:
        out = subprocess.run(["ps", "-o", "lstart=", "-p", str(pid)], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return " ".join(out.stdout.split()) or None


def same_process(pid, start_time) -> bool:
    """`pid` is alive and is the process that started at `start_time` (not a later one given its PID)."""
    now = process_start_time(pid)
    return now is not None and start_time is not None and str(now) == str(start_time)


def read_owner(run_dir: Path) -> dict:
    """What RUN/.owner.lock says of the process that took it: pid, start_time, command, host, since."""
    import json

    try:
        data = json.loads((Path(run_dir) / OWNER_LOCK).read_text() or "{}")
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def owner_lock_state(run_dir: Path) -> str | None:
    """"held" while a process owns the run folder, "free" when its owner lock exists and nothing holds
    it (whoever owned the folder is gone, however it ended), None for a folder without one (never
    owned, or written by an envkit before the lock). A non-blocking flock: the kernel's answer, not a PID."""
    import fcntl

    try:
        fd = os.open(Path(run_dir) / OWNER_LOCK, os.O_RDONLY)
    except OSError:
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
    import fcntl

    try:
        fd = os.open(Path(run_dir) / OWNER_LOCK, os.O_RDONLY)
    except OSError:
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
    import fcntl
    import json
    import platform
    import time

    from envkit.errors import EnvkitError

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    fh = open(run_dir / OWNER_LOCK, "a+")
    deadline = time.monotonic() + 1.0  # someone noticing a dead owner holds it for a moment (owner_lock_if_free)
    while True:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            if time.monotonic() < deadline:
                time.sleep(0.05)
                continue
        fh.seek(0)
        try:
            owner = json.loads(fh.read() or "{}")
        except ValueError:
            owner = {}
        fh.close()
        pid = owner.get("pid", "?")
        raise EnvkitError(f"run folder {run_dir} is in use: {owner.get('command', 'envkit')} (PID {pid}) is training in it; "
                          "a second process would write the same metrics and checkpoints", where=str(run_dir),
                          fix=f"watch it with `envkit monitor {run_dir}`, stop it with `envkit stop {run_dir}` (or kill {pid}), "
                              "or start a separate run with --resume never") from None
    fh.seek(0)
    fh.truncate()
    fh.write(json.dumps({"pid": os.getpid(), "start_time": process_start_time(os.getpid()), "command": command,
                         "host": platform.node(), "since": time.time()}) + "\n")
    fh.flush()
    return fh


def sha256_file(path: Path) -> str:
    """The sha256 of a file, read in 1 MiB blocks (wheels, checkpoint shards: never whole in memory)."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
