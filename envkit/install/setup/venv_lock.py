"""One `envkit setup` at a time per venv. Two at once used to both fail half-way (one of them with a
FileNotFoundError out of the other's rollback): now each takes an advisory exclusive lock (flock)
on a file named after the venv in envkit's cache folder (not inside the venv: one made by this
setup and rolled back is removed whole; not beside it: that is the user's project folder, whose
`git status` must stay clean) before it changes anything, and a second one says in one line which PID holds it, exit 2. The
kernel releases the lock when its holder ends, however it ends: a setup that was killed does not
block the next."""

from __future__ import annotations

from pathlib import Path

from envkit.errors import EnvkitError
from envkit.install.setup.options import venv_python_of
from envkit.fsutil import LockHeld, cache_dir, hold_lock_file


def venv_lock_path(venv: Path) -> Path:
    import hashlib

    cache = cache_dir()
    key = hashlib.sha256(str(Path(venv).absolute()).encode()).hexdigest()[:16]
    return cache / "setup-locks" / f"{Path(venv).name}-{key}.lock"


def hold_venv(venv: Path, planned_create: bool):
    """The lock, held until the returned file is closed (or the process ends). `planned_create`: the
    plan makes the venv; one that exists now was made by another setup while this one planned."""
    path = venv_lock_path(venv)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        held = hold_lock_file(path, {"command": "envkit setup", "venv": str(venv)})
    except LockHeld as exc:
        pid = exc.record.get("pid", "?")
        raise EnvkitError(f"another envkit setup (PID {pid}) is changing this venv; one setup at a time per venv", where=str(venv),
                          fix=f"wait for it to finish (or stop it: kill {pid}), then run envkit setup again") from None
    if planned_create and Path(venv_python_of(venv)).exists():
        held.close()
        raise EnvkitError("this venv was made by another envkit setup while this one was planning", where=str(venv),
                          fix="run envkit setup again: it plans against the venv as it is now")
    return held
