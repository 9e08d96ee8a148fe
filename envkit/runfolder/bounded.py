"""Reading a run folder's JSON files as data that may come from anyone: size and nesting bounded
before anything looks inside, and one error type that names the file, the key and the fix."""

from __future__ import annotations

import json
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


def read_json(path: Path, *, required: bool = False, max_bytes: int = MAX_BYTES, what: str | None = None) -> dict | None:
    """The JSON object in `path`; None where it is absent (and not `required`). Anything else that
    is wrong (not a regular file, a symlink, larger than `max_bytes`, not JSON, nested deeper than
    MAX_DEPTH, not an object) is a RunFolderError."""
    path = Path(path)
    name = what or path.name
    fix = "the run folder was changed or is incomplete; use the folder as envkit wrote it"
    if path.is_symlink():
        raise RunFolderError(f"{name} is a symbolic link, which a run folder never holds", where=str(path), fix=fix)
    if not path.exists():
        if required:
            raise RunFolderError(f"{name} is missing", where=str(path), fix=fix)
        return None
    if not path.is_file():
        raise RunFolderError(f"{name} is not a regular file", where=str(path), fix=fix)
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise RunFolderError(f"{name} is {size:,} bytes, over the {max_bytes:,} envkit reads", where=str(path), fix=fix)
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise RunFolderError(f"cannot read {name}: {exc.strerror or exc}", where=str(path), fix=fix) from None
    if _nesting_of_text(text) > MAX_DEPTH:
        raise RunFolderError(f"{name} nests deeper than {MAX_DEPTH} levels", where=str(path), fix=fix)
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise RunFolderError(f"{name} is not valid JSON ({exc})", where=str(path), fix=fix) from None
    if not isinstance(data, dict):
        raise RunFolderError(f"{name} holds {type(data).__name__}, not a JSON object", where=str(path), fix=fix)
    return data
