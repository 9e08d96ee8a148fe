"""envkit.lock as envkit wrote it before it became a pylock of one target, now pylock.machine.toml
(`lock_version = 1`: [platform], [profile], [source], [env], and a [[package]] per package with
name, version and, where the installer reported them, sha256, url and cached). Such a file is still
read: it is turned into the current shape in memory (single.py), and the reader says once how to
rewrite it."""

from __future__ import annotations

from envkit.errors import EnvkitError
from envkit.install.lock import single, validate

LOCK_VERSION = 1
FIX_CORRUPT = "write it again with `envkit setup` (without --lock), or restore it from version control"


def note(path) -> str:
    return (f"note: {path} is in envkit's old lock format (lock_version = 1), read as before; `envkit setup` "
            f"writes {single.NAME}, a pylock of this one machine, `envkit lock --from {path}` converts it to pylock.toml")


def upgrade(data: dict, where: str) -> dict:
    """The old lock's TOML as the current shape (single.doc); every problem one line naming the file."""
    if data.get("lock_version") != LOCK_VERSION:
        raise EnvkitError(f"not an envkit lock of version {LOCK_VERSION} (lock_version = {data.get('lock_version')!r})",
                          where=where, fix=FIX_CORRUPT)

    validate.check(data, where, FIX_CORRUPT, old=True)
    pkgs = data.get("package", [])
    if not isinstance(pkgs, list) or not all(isinstance(p, dict) and isinstance(p.get("name"), str)
                                             and isinstance(p.get("version"), str) for p in pkgs):
        raise EnvkitError("every [[package]] needs a name and a version", where=where, fix=FIX_CORRUPT)
    for key in ("platform", "profile", "source", "env"):
        if not isinstance(data.get(key, {}), dict):
            raise EnvkitError(f"[{key}] must be a table", where=where, fix=FIX_CORRUPT)
    if not any(single.canon(p["name"]) == "torch" for p in pkgs):
        raise EnvkitError("the lock names no torch", where=where, fix=FIX_CORRUPT)
    return single.doc(platform=data.get("platform", {}), profile=data.get("profile", {}), source=data.get("source", {}),
                      env={str(k): str(v) for k, v in data.get("env", {}).items()}, entries=pkgs,
                      envkit_version=str(data.get("envkit", "")))
