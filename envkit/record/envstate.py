"""The state of an interpreter's environment as one short key, cheap enough for every run start:
the names and modification times of the distributions' metadata folders (`*.dist-info`,
`*.egg-info`), `.pth` files and `.egg-link`s in its site folders. pip, uv and conda replace a
distribution's metadata folder whenever they install, upgrade or remove it, so the key changes
with every change of the installed set; an in-place edit of an installed module does not (a
local or editable project's code is recorded as code, record/code.py).

The site folders of an interpreter take a child process to learn (15 ms); they are kept in
envkit's cache, keyed by the interpreter's path and the modification times of it and its venv's
pyvenv.cfg."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

from envkit.fsutil import atomic_write_text
from envkit.fsutil import cache_dir

_SITE_DIRS = ("import json, sys, os; print(json.dumps([p for p in sys.path if p and os.path.isdir(p) "
              "and not p.endswith('.zip')]))")
META_SUFFIXES = (".dist-info", ".egg-info", ".pth", ".egg-link")


def cache_root() -> Path:
    return cache_dir() / "record"


def _python_stamp(python: str) -> str:
    """The interpreter's path and the times it and its venv last changed (a venv made again at the same path)."""
    path = Path(os.path.abspath(python))
    parts = [str(path)]
    for p in (path, path.parent.parent / "pyvenv.cfg"):
        try:
            parts.append(str(p.lstat().st_mtime_ns))
        except OSError:
            parts.append("-")
    return "|".join(parts)


def site_dirs(python: str) -> list[str]:
    """The folders the interpreter imports from (sys.path with -I: its own, not PYTHONPATH's), cached."""
    stamp = _python_stamp(python)
    key = hashlib.sha256(stamp.encode()).hexdigest()[:20]
    cached = cache_root() / "pythons" / f"{key}.json"
    try:
        data = json.loads(cached.read_text())
        if data.get("stamp") == stamp:
            return list(data["dirs"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    proc = subprocess.run([python, "-I", "-c", _SITE_DIRS], check=False, capture_output=True, text=True, timeout=60)
    dirs = json.loads(proc.stdout) if proc.returncode == 0 else []
    try:
        atomic_write_text(cached, json.dumps({"stamp": stamp, "dirs": dirs}))
    except OSError:
        pass  # a read-only cache: asked again next time
    return dirs


def state_key(python: str) -> str:
    """sha256 (20 hex digits) of the interpreter and its installed set, as above."""
    h = hashlib.sha256(_python_stamp(python).encode())
    for d in site_dirs(python):
        try:
            entries = sorted((e.name, e.stat(follow_symlinks=False).st_mtime_ns) for e in os.scandir(d)
                             if e.name.endswith(META_SUFFIXES))
        except OSError:
            continue
        h.update(f"\n{d}".encode())
        for name, mtime in entries:
            h.update(f"\n{name} {mtime}".encode())
    return h.hexdigest()[:20]
