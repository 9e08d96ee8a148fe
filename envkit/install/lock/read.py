"""The one reader of envkit's locks, whatever their name or age: a pylock.toml of many targets
(`envkit lock`, or uv, pdm, pip), a pylock.machine.toml (a pylock of one target: `envkit setup`; an
envkit.lock, its name before, in the same shape or the old format of old_format.py), all read into
one shape. Every value is checked
first (validate.py): a lock is shared, and what it names reaches pip. Every problem is one line
naming the file (and the entry)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.install.lock import old_format, single, validate
from envkit.install.lock.model import Pick, wheel_filename
from envkit.resources import load_toml

FIX_PYLOCK = "write it again with `envkit lock`, or restore it from version control"


def is_pylock(path: Path) -> bool:
    """PEP 751's file names: pylock.toml, pylock.NAME.toml."""
    return path.name == "pylock.toml" or bool(re.fullmatch(r"pylock\.[^.]+\.toml", path.name))


def written_by_setup(path: Path) -> bool:
    """A lock name `envkit setup` writes when the file is missing (--lock FILE): pylock.machine.toml,
    or a name PEP 751 does not give a lock (envkit.lock, as before). Another pylock.NAME.toml is
    `envkit lock`'s to write."""
    return path.name == single.NAME or not is_pylock(path)


def require_pylock(where: str) -> None:
    """packaging.pylock (26.1+: Pylock.select) or one line saying how to get it."""
    try:
        from packaging.pylock import Pylock

        Pylock.select  # noqa: B018 - reading it is the check: packaging 26.0 has the module without select
    except (ImportError, AttributeError):
        raise EnvkitError("pylock.toml support needs packaging 26.1 or newer", where=where,
                          fix="pip install 'envkit[lock]' (or pip install -U packaging)")


def read_toml(path: Path, write_with: str, fix_corrupt: str) -> dict:
    where = str(path)
    if path.is_dir():
        raise EnvkitError("is a folder, not a lock file", where=where)
    try:
        return load_toml(path)
    except FileNotFoundError:
        raise EnvkitError("lock file not found", where=where, fix=f"write one with `{write_with}`")
    except OSError as exc:
        raise EnvkitError(f"cannot read the lock: {exc.strerror}", where=where)
    except Exception as exc:  # tomllib.TOMLDecodeError
        raise EnvkitError(f"not a valid lock (TOML: {exc})", where=where, fix=fix_corrupt)


@dataclass
class LockFile:
    path: Path
    data: dict  # the TOML, PEP 751's shape (an old-format envkit.lock turned into it)
    old_format: bool = False

    @property
    def tool(self) -> dict:
        t = (self.data.get("tool") or {}).get("envkit")
        return t if isinstance(t, dict) else {}

    @property
    def targets(self) -> dict[str, dict]:
        return {k: v for k, v in (self.tool.get("targets") or {}).items() if isinstance(v, dict)}

    @property
    def single(self) -> bool:
        """A lock of the one machine `envkit setup` ran on (pylock.machine.toml): it names that machine."""
        return isinstance(self.tool.get("platform"), dict)

    def _table(self, key: str) -> dict:
        t = self.tool.get(key)
        return t if isinstance(t, dict) else {}

    @property
    def platform(self) -> dict:
        return self._table("platform")

    @property
    def profile(self) -> dict:
        return self._table("profile")

    @property
    def source(self) -> dict:
        return self._table("source")

    @property
    def env(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self._table("env").items()}

    @property
    def project(self) -> dict | None:
        """The project the lock belongs to ([tool.envkit.project]: name, extras), lock/project.py."""
        p = self._table("project")
        return {"name": str(p["name"]), "extras": [str(e) for e in p.get("extras") or []]} if p.get("name") else None

    @property
    def index_urls(self) -> list[str]:
        """The indexes the lock names: a machine lock's source, pylock.toml's [tool.envkit] indexes."""
        return list(dict.fromkeys(list(self.source.get("index_urls") or []) + list(self.tool.get("indexes") or [])))

    @property
    def note(self) -> str | None:
        return old_format.note(self.path) if self.old_format else None

    def picks(self) -> list[Pick]:
        """Every package of a lock of one machine, as an install takes it: its wheel (the lock
        holds one per package: that machine's), or its version only."""
        out = []
        for p in self.data.get("packages") or []:
            w = (p.get("wheels") or [{}])[0]
            where = w.get("url") or w.get("path") or ""
            cached = ((p.get("tool") or {}).get("envkit") or {}).get("cached")
            out.append(Pick(name=p["name"], version=str(p.get("version", "")), sha256=(w.get("hashes") or {}).get("sha256"),
                            url=w.get("url"), path=w.get("path"), size=w.get("size"),
                            filename=w.get("name") or (wheel_filename(where) if where else ""), index=p.get("index"),
                            cached=cached))
        for v in self.tool.get("versions-only") or []:
            out.append(Pick(name=v["name"], version=str(v["version"]), sha256=v.get("sha256")))
        return out

    @property
    def versions(self) -> dict[str, str]:
        """name -> version of a lock of one machine."""
        return {p.name: p.version for p in self.picks()}

    def pylock(self):
        """packaging's Pylock of it (to select one machine's part of a lock of many)."""
        from packaging.pylock import Pylock

        return Pylock.from_dict(self.data)


def read(path: Path, *, require_torch: bool = True) -> LockFile:
    """The lock at `path`, every value checked. `require_torch=False`: a run's own pylock.toml, whose
    interpreter may have had no torch (a script that never imported it); `envkit setup` needs one."""
    path = Path(path)
    where = str(path)
    by_setup = written_by_setup(path)  # which command writes it again, before the file is read
    fix = old_format.FIX_CORRUPT if by_setup else FIX_PYLOCK
    data = read_toml(path, "envkit setup" if by_setup else "envkit lock", fix)
    if "lock_version" in data:
        lock = LockFile(path, old_format.upgrade(data, where), old_format=True)  # its values checked there
    else:
        validate.check(data, where, fix)  # every value, before anything uses one (validate.py)
        lock = LockFile(path, data)
    _validate(lock, where, fix)
    if require_torch and lock.single and "torch" not in lock.versions:
        raise EnvkitError("the lock names no torch", where=where, fix=fix)
    return lock


def _validate(lock: LockFile, where: str, fix: str) -> None:
    """PEP 751's rules as packaging checks them; where packaging is older than 26.1, a lock of one
    machine (all envkit needs of it is the packages' names, versions and files) is checked for
    that much, and a lock of many needs packaging."""
    try:
        from packaging.pylock import Pylock, PylockValidationError
    except ImportError:
        if not lock.single:
            require_pylock(where)
        for p in lock.data.get("packages") or []:
            if not (isinstance(p, dict) and isinstance(p.get("name"), str) and isinstance(p.get("version"), str)):
                raise EnvkitError("every [[packages]] needs a name and a version", where=where, fix=fix)
        return
    try:
        Pylock.from_dict(lock.data)
    except PylockValidationError as exc:
        raise EnvkitError(f"not a valid PEP 751 lock: {exc}", where=where, fix=fix)
