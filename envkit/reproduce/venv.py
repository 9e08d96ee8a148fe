"""The venv a reproduction trains in: built fresh from the run's pylock.toml by the same install
as `envkit setup --lock` (install/lock/install.py: every wheel downloaded and checked against the
lock's sha256 before pip installs it with --no-deps --require-hashes, the rest removed, the
result checked to be exactly the lock). Packages the run recorded without a hash are installed by
version from the indexes pip is configured with, and named.

An existing venv is reused only when `--check` finds no drift from the lock; the default place,
envkit's cache (one venv per lock), is rebuilt when it drifted, a venv given with --venv never is
(one line says what differs)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.facts import gather
from envkit.fsutil import cache_dir
from envkit.install.lock.install import install_from_lock
from envkit.install.lock.read import read
from envkit.install.setup.flow import load_setup_profile
from envkit.install.setup.options import venv_python_of
from envkit.reproduce.check import CannotReproduce, environment_lines

HOME = "envkit-home"  # inside the venv: the state `envkit exec` and `run` read through ENVKIT_HOME


class _UI:
    def __init__(self, say):
        self.say = lambda text="", err=False: say(text)

    def show_json(self, obj) -> None:
        pass

    def confirm(self, yes: bool) -> None:
        pass


def default_venv(lock_path: Path) -> Path:
    digest = hashlib.sha256(Path(lock_path).read_bytes()).hexdigest()[:16]
    return cache_dir() / "reproduce" / f"venv-{digest}"


OWNED = "envkit-reproduce.json"  # in a venv reproduce built: it may add and remove the run's local distributions


def owned(venv: Path) -> bool:
    """Whether reproduce built this venv (a venv of the user's, given with --venv, is never changed)."""
    return (Path(venv) / OWNED).is_file()


def python_of(venv: Path) -> str:
    return venv_python_of(Path(venv))


def prepare(lock_path: Path, rec: dict, venv: Path, chosen: bool, profile: str | None, say, facts=None) -> tuple[Path, bool]:
    """(the venv, whether it was built now), in the place the plan named (`chosen`: the user's
    --venv, never rebuilt). `lock_path`: the run's lock, or the one elsewhere.py made for this
    machine from it (a run recorded on another machine)."""
    venv = Path(venv).resolve()
    if Path(python_of(venv)).exists():
        drift = environment_lines(lock_path, python_of(venv), rec)
        if not drift:
            say(f"reusing {venv}: it holds exactly the run's lock (no drift)")
            return venv, False
        if chosen:
            raise CannotReproduce(f"the venv {venv} differs from the run's lock: {'; '.join(drift[:5])}", where="--venv",
                                  fix="give --venv a new folder (it is built fresh from the lock), or remove that one")
        say(f"rebuilding {venv}: it drifted from the lock ({drift[0]})")
        shutil.rmtree(venv)
    elif venv.exists() and any(venv.iterdir()):
        raise CannotReproduce(f"{venv} exists and is not a venv", where="--venv", fix="give a new or empty folder")
    build(lock_path, venv, profile, say, facts)
    return venv, True


def build(lock_path: Path, venv: Path, profile: str | None, say, facts=None) -> None:
    import sys

    lock = read(lock_path, require_torch=False)
    facts = facts or gather(None, runtime=False, gpu_detail=False)
    try:
        prof = load_setup_profile(profile or "auto", facts, lock, lambda text, err=False: say(text))
    except EnvkitError:
        prof = load_setup_profile("auto", facts, lock, lambda text, err=False: say(text))
    missing = [p.name for p in lock.picks() if not p.sha256]
    if missing:
        say(f"{len(missing)} packages have no recorded hash (the run started offline or without the index's credentials): "
            f"{', '.join(missing)}; installed by version from pip's indexes")
    venv.parent.mkdir(parents=True, exist_ok=True)
    install_from_lock(lock, facts, prof, venv, sys.executable, False, True, False, venv / HOME, _UI(say), sync=True)
    (venv / OWNED).write_text(json.dumps({"built_by": "envkit reproduce", "lock": str(lock_path)}) + "\n")
