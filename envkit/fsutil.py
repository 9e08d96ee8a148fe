"""Atomic writes: a file is either the old one or the whole new one, never half of each.

Modes: a file is created as open() creates it, 0666 less the umask (0644 under the usual 022), so
the locks (pylock.toml, envkit.lock), env scripts, run folders and reports can be read by a CI
runner or a colleague; mkstemp's own 0600 is never left on them. None of envkit's files holds a
secret (credentials are stripped or redacted before anything is written), so none is private; a
file that ever must be passes mode=0o600."""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path
from typing import TypeGuard

from envkit.runfolder import names


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


# ---------------------------------------------------------------- run folders: no writes through links

OWNER_LOCK = ".owner.lock"
# What envkit writes in a run folder. A symlink planted at one of these names would have envkit append
# to (or truncate) whatever it points at, so a folder holding one is refused (refuse_links) and the
# appends and the lock open with O_NOFOLLOW (open_append). Atomic writes (atomic_writer) replace the
# name itself and make their temporary file with O_EXCL, so they never write through a link.
RUN_FOLDER_NAMES = (OWNER_LOCK, "train.log", names.METRICS, names.HEARTBEAT, names.SUMMARY, names.CONFIG, "config.yaml",
                    names.ENVIRONMENT, "checkpoints", "faults.jsonl", "console.log", "supervisor.log", "ranks")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _link_error(path: Path):
    from envkit.errors import EnvkitError

    try:
        target = f" (to {os.readlink(path)})"
    except OSError:
        target = ""
    return EnvkitError(f"{path} is a symbolic link{target}: envkit writes that file and never writes through a link",
                       where=str(Path(path).parent), fix=f"remove the link (rm {path}) or use another run folder")


def refuse_links(run_dir: Path) -> None:
    """EnvkitError naming the first of RUN_FOLDER_NAMES in `run_dir` that is a symlink. The run folder
    itself may be one (runs/<name> linked to a bigger disk): only what is inside it is checked."""
    for name in RUN_FOLDER_NAMES:
        if (Path(run_dir) / name).is_symlink():
            raise _link_error(Path(run_dir) / name)


def make_run_folder(run_dir: Path) -> Path:
    """mkdir -p of a run folder, a folder that cannot be made (read-only, no permission, full) as one
    EnvkitError naming it, then refuse_links."""
    from envkit.errors import EnvkitError

    run_dir = Path(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EnvkitError(f"cannot make the run folder: {exc.strerror or exc} ({exc.filename or run_dir})", where=str(run_dir),
                          fix="set experiment.output_dir (or --runs-dir) to a folder you can write") from None
    refuse_links(run_dir)
    return run_dir


def open_append(path: Path, flags: int = 0) -> int:
    """A file descriptor appending to `path` (created 0666 less the umask), never through a symlink:
    one at `path` is EnvkitError naming it."""
    try:
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW | flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _link_error(Path(path)) from None
        raise


def append_line(fd: int, data: bytes, path: Path, fault=None) -> None:
    """`data` (one whole line) appended with one os.write. A disk that fills up mid-line (a short write,
    or ENOSPC) leaves no half line: the file is cut back to where the line began and ENOSPC raised.
    fault() True (tests: ENVKIT_TRAIN_INJECT): the disk fills up after half the line is written."""
    start = os.lseek(fd, 0, os.SEEK_END)
    try:
        if fault is not None and fault():
            os.write(fd, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        if os.write(fd, data) != len(data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, start)
        raise


def cut_torn_line(path: Path) -> bool:
    """A file of lines whose last one has no newline (a writer killed, or a disk full, mid-line): cut
    that half line off, so the next line appended is not glued to it. True when one was cut."""
    try:
        fd = os.open(path, os.O_RDWR | _NOFOLLOW)
    except OSError:
        return False
    try:
        size = os.lseek(fd, 0, os.SEEK_END)
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return False
        keep = size
        while keep > 0:
            block = os.pread(fd, min(keep, 1 << 16), max(0, keep - (1 << 16)))
            nl = block.rfind(b"\n")
            if nl >= 0:
                keep = max(0, keep - len(block)) + nl + 1
                break
            keep -= len(block)
        os.ftruncate(fd, keep)
        return True
    finally:
        os.close(fd)


# ---------------------------------------------------------------- one owner per run folder


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


def same_process(pid, start_time) -> TypeGuard[int]:
    """`pid` is alive and is the process that started at `start_time` (not a later one given its PID);
    so it is a number (TypeGuard: the caller's `pid` is an int where this is true)."""
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
        fd = os.open(Path(run_dir) / OWNER_LOCK, os.O_RDONLY | _NOFOLLOW)
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
        fd = os.open(Path(run_dir) / OWNER_LOCK, os.O_RDONLY | _NOFOLLOW)
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
    import platform
    import time

    from envkit.errors import EnvkitError

    run_dir = make_run_folder(run_dir)  # and no symlink where envkit writes in it
    try:
        fh = os.fdopen(os.open(run_dir / OWNER_LOCK, os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o666), "r+")
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _link_error(run_dir / OWNER_LOCK) from None
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
    _write_owner(fh, {"pid": os.getpid(), "start_time": process_start_time(os.getpid()), "command": command,
                      "host": platform.node(), "since": time.time()})
    return fh


def _write_owner(fh, record: dict) -> None:
    import json

    fh.seek(0)
    fh.truncate()
    fh.write(json.dumps(record) + "\n")
    fh.flush()


def note_owner_child(fh, pid: int) -> None:
    """The owner's child (the trainer, or torchrun) holds the lock too (it inherits it): its PID and
    start time go into the lock file beside the owner's, so a folder whose owner died while its
    child lives on is refused naming the child, the process to wait for or stop."""
    import json

    fh.seek(0)
    try:
        record = json.loads(fh.read() or "{}")
    except ValueError:
        record = {}
    record.update(child_pid=pid, child_start=process_start_time(pid))
    _write_owner(fh, record)


def owner_holder(owner: dict) -> tuple[object, str]:
    """(PID, "what (PID N)") of the process that holds a run folder, from its lock file's record:
    the owner while it lives, else its child while that lives (the owner was killed and the child
    has not ended yet), else the owner as recorded (another host's, or it cannot be told)."""
    command, pid = owner.get("command", "envkit"), owner.get("pid", "?")
    if not same_process(owner.get("pid"), owner.get("start_time")) and same_process(owner.get("child_pid"), owner.get("child_start")):
        child = owner["child_pid"]
        return child, f"the training process (PID {child}) left by {command} (PID {pid}, gone)"
    return pid, f"{command} (PID {pid})"


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
    import fcntl
    import json

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
    _write_owner(fh, {"pid": os.getpid(), "start_time": process_start_time(os.getpid()), **record})
    return fh

