"""Names and paths given by a user or a config, checked before anything is written: a run's folder
name is one path component, a run folder stays inside the runs folder, an output file's folder takes
a file. Each refusal is one EnvkitError naming where the value came from."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from envkit.errors import EnvkitError

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
