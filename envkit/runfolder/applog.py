"""Append-only logs in a run folder (metrics.jsonl, train.log, faults.jsonl, console.log): a line is
appended whole or not at all, never through a symlink, and a half line left by a writer killed
mid-line is cut off before the next one is appended."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from envkit.runfolder.links import NOFOLLOW, link_error


def open_append(path: Path, flags: int = 0) -> int:
    """A file descriptor appending to `path` (created 0666 less the umask), never through a symlink:
    one at `path` is EnvkitError naming it."""
    try:
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | NOFOLLOW | flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise link_error(Path(path)) from None
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
        fd = os.open(path, os.O_RDWR | NOFOLLOW)
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
