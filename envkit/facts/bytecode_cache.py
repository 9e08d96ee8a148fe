"""Where envkit keeps bytecode for an interpreter whose site-packages it cannot write
(install/bytecode.py writes it), and the variable that points a process of that interpreter there.
Read by doctor's probe and check, and by every launcher; written only by install/bytecode.py."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

from envkit.fsutil import cache_dir

PREFIX_VAR = "PYTHONPYCACHEPREFIX"


def cache_folder() -> Path:
    return cache_dir() / "pycache"


def marker(python: str) -> Path:
    """One file per interpreter (its path as given: a venv's python is its own interpreter even where
    it links to the same binary as another venv's), so two setups never write the same file."""
    key = hashlib.sha256(os.path.abspath(python).encode()).hexdigest()[:16]
    return cache_folder() / "made-for" / f"{key}.json"


def prefix_for(python: str) -> Path | None:
    """envkit's bytecode cache, where it was made for `python`; else None."""
    try:  # a regular file, read once and bounded: never a FIFO left in its place, never a huge one
        fd = os.open(marker(python), os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            made_for = json.loads(os.read(fd, 1 << 16)).get("python")
        finally:
            os.close(fd)
    except (OSError, ValueError, AttributeError):
        return None
    return cache_folder() if made_for == os.path.abspath(python) else None


def child_environ(env: dict[str, str], python: str | None) -> dict[str, str]:
    """`env` with PYTHONPYCACHEPREFIX for a process of `python`, where envkit's cache was made for it and
    the user has not set the variable themselves (their value is kept)."""
    if not python or env.get(PREFIX_VAR):
        return env
    prefix = prefix_for(python)
    return env if prefix is None else {**env, PREFIX_VAR: str(prefix)}
