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

