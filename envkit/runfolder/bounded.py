"""Reading a run folder's JSON files as data that may come from anyone: size and nesting bounded
before anything looks inside, and one error type that names the file, the key and the fix."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

from envkit.errors import EnvkitError

MAX_BYTES = 8 << 20  # a record.json of a large project is ~100 KiB; config.json and summary.json less
MAX_DEPTH = 32  # envkit's own files nest 5 levels at most; json.loads recurses once per level


class RunFolderError(EnvkitError):
    """A file of a run folder is missing, too large, malformed or holds a value of the wrong type:
    exit 2, one line naming the file and the key."""


def depth(value, limit: int = MAX_DEPTH) -> int:
    """How deep `value` nests (iterative: a hostile file must not exhaust Python's stack here)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > limit:
            return deepest
        if isinstance(v, dict):
            stack += [(x, d + 1) for x in v.values()]
        elif isinstance(v, list):
            stack += [(x, d + 1) for x in v]
    return deepest


def _nesting_of_text(text: str) -> int:
    """The deepest bracket nesting of JSON text, strings skipped: checked before json.loads, whose
    recursion a file of 100,000 `[` would exhaust."""
    deepest = level = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            level += 1
            deepest = max(deepest, level)
        elif ch in "]}":
            level -= 1
    return deepest


_FIX = "the run folder was changed or is incomplete; use the folder as envkit wrote it"
# O_NONBLOCK: opening a FIFO (or a device) planted at a file's name returns at once instead of
# waiting for a writer; fstat then tells it is not a regular file and it is never read.
_OPEN = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def read_bytes(path: Path, *, max_bytes: int = MAX_BYTES, required: bool = False, what: str | None = None,
               tail: bool = False) -> bytes | None:
    """The bytes of `path`, read once through one descriptor: None where it is absent (and not
    `required`). A symbolic link, a FIFO, a device, a folder, or a file over `max_bytes` is a
    RunFolderError naming it; nothing is opened that could block or read without end. `tail`: a
    file over `max_bytes` gives its last `max_bytes` instead (the watchers of a long run's log)."""
    path = Path(path)
    name = what or path.name
    try:
        fd = os.open(path, _OPEN)
    except FileNotFoundError:
        if required:
            raise RunFolderError(f"{name} is missing", where=str(path), fix=_FIX) from None
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RunFolderError(f"{name} is a symbolic link, which a run folder never holds", where=str(path), fix=_FIX) from None
        raise RunFolderError(f"cannot read {name}: {exc.strerror or exc}", where=str(path), fix=_FIX) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RunFolderError(f"{name} is not a regular file", where=str(path), fix=_FIX)
        start = 0
        if st.st_size > max_bytes:
            if not tail:
                raise RunFolderError(f"{name} is {st.st_size:,} bytes, over the {max_bytes:,} envkit reads", where=str(path),
                                     fix=_FIX)
            start = st.st_size - max_bytes
        chunks, got = [], 0
        while got <= max_bytes:
            chunk = os.pread(fd, min(1 << 20, max_bytes + 1 - got), start + got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > max_bytes:  # it grew while read
            raise RunFolderError(f"{name} grew past the {max_bytes:,} bytes envkit reads", where=str(path), fix=_FIX)
        return b"".join(chunks)
    except OSError as exc:
        raise RunFolderError(f"cannot read {name}: {exc.strerror or exc}", where=str(path), fix=_FIX) from None
    finally:
        os.close(fd)


def parse_json(data: bytes, where: str, name: str) -> dict:
    """A JSON object from bytes read bounded: nesting checked before json.loads recurses."""
    text = data.decode("utf-8", errors="replace")
    if _nesting_of_text(text) > MAX_DEPTH:
        raise RunFolderError(f"{name} nests deeper than {MAX_DEPTH} levels", where=where, fix=_FIX)
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise RunFolderError(f"{name} is not valid JSON ({exc})", where=where, fix=_FIX) from None
    if not isinstance(value, dict):
        raise RunFolderError(f"{name} holds {type(value).__name__}, not a JSON object", where=where, fix=_FIX)
    return value


def read_json(path: Path, *, required: bool = False, max_bytes: int = MAX_BYTES, what: str | None = None) -> dict | None:
    """The JSON object in `path`; None where it is absent (and not `required`). Anything else that
    is wrong (not a regular file, a symlink, larger than `max_bytes`, not JSON, nested deeper than
    MAX_DEPTH, not an object) is a RunFolderError."""
    data = read_bytes(path, max_bytes=max_bytes, required=required, what=what)
    return None if data is None else parse_json(data, str(path), what or Path(path).name)


def read_json_lenient(path: Path, max_bytes: int = MAX_BYTES) -> dict | None:
    """The JSON object in `path`, or None for anything else (absent, half written by a live run, a
    link, a FIFO, too large, not an object): what the watchers (`runs`, `monitor`, `plot`) read."""
    try:
        return read_json(path, max_bytes=max_bytes)
    except RunFolderError:
        return None
