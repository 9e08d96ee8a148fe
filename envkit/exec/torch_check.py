"""Before a run: is the managed env's torch still the build `envkit setup` installed (or the lock
names)? A later `pip install` or `uv sync` that swapped in a CPU build or another version is the
classic silent slowdown. Reads package metadata only (torch is not imported): well under a second."""

from __future__ import annotations

from pathlib import Path

from envkit.errors import EnvkitError
from envkit.install.act.interp import probe
from envkit.install.lock.read import read

FIX = "`envkit setup` puts the profile's build back (`envkit setup --lock pylock.machine.toml` rebuilds from its lock); --no-check skips this check"


def torch_drift(installed: str | None, installed_by_setup: str | None, locked: str | None) -> str | None:
    """One line when the torch installed differs from what setup installed or the lock names (pure)."""
    if installed is None:
        if installed_by_setup or locked:
            return f"torch is no longer installed in the managed env (setup installed {locked or installed_by_setup})"
        return None
    for want, who in ((locked, "the lock names"), (installed_by_setup, "envkit setup installed")):
        if want and want != installed:
            return f"the managed env has torch {installed}, but {who} {want}"
    return None


def check_managed_torch(managed) -> str | None:
    """The drift line for a managed env (None when it matches, or when nothing says what it should be)."""
    state = getattr(managed, "state", {}) or {}
    locked = None
    lock_path = state.get("lock")
    if lock_path and Path(lock_path).is_file():
        try:
            lock = read(Path(lock_path))
            # a lock of many machines names many torches: state.json's is the one installed here
            locked = lock.versions.get("torch") if lock.single else None
        except EnvkitError:
            locked = None  # a broken lock is `envkit check`'s to report
    if not (locked or state.get("torch")):
        return None
    try:
        dists = probe(str(managed.python), dists=True, timeout=30).dists
    except EnvkitError as exc:
        return exc.message
    installed = (dists.get("torch") or {}).get("version")
    return torch_drift(installed, state.get("torch"), locked)
