"""A run folder this machine wrote, told apart from one edited after the run or written elsewhere:
when the record is complete (record/start.py), the files `envkit reproduce` acts on (record.json,
pylock.toml and code/: the command, the interpreter, the code folders, the patches, the packages)
are hashed and the list is signed with HMAC-SHA256 under a key that lives only in envkit's cache on
this machine (created on first use, readable by its owner alone). `verify` recomputes both.

A folder that verifies was written here and not changed since: reproducing it runs what the user
ran, so envkit does not ask again. Anything else (edited, copied from another machine, written by
an envkit that did not seal, no key here) is data from someone else, and `envkit reproduce` shows
what it would run and asks first (reproduce/consent.py). The key never leaves the cache: a folder
sent to someone else is unverified there, as it should be."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.fsutil import atomic_write_text
from envkit.install.act.execute import cache_dir
from envkit.runfolder.bounded import RunFolderError, read_json

SEAL = "record.seal"
SEALED = ("record.json", "pylock.toml")  # and every file under code/
_CODE = "code"
_MAX_FILES = 10_000


def _key_path() -> Path:
    return cache_dir() / "keys" / "run-folders.key"


def _key(create: bool) -> bytes | None:
    path = _key_path()
    try:
        return bytes.fromhex(path.read_text().strip())
    except (OSError, ValueError):
        if not create:
            return None
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it first: use theirs
        return _key(create=False)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    return _key(create=False)


def machine_key() -> bytes:
    """This machine's signing key (made on first use): what else envkit keeps in its cache and
    will execute later (train/run/compile_cache.py) is signed with it too."""
    key = _key(create=True)
    if key is None:  # the file is there (made first by another process, or by hand) but holds no key
        raise EnvkitError(f"the machine key {_key_path()} does not read as a key: delete it and a new one is made "
                          "(what it signed, records and the compile cache, is then refused, not run)")
    return key


def _manifest(run_dir: Path) -> dict[str, str] | None:
    """relative path -> sha256 of every sealed file; None where one is not a regular file (a link)."""
    out: dict[str, str] = {}
    names = [n for n in SEALED if (run_dir / n).exists() or (run_dir / n).is_symlink()]
    code = run_dir / _CODE
    if code.is_symlink():
        return None
    if code.is_dir():
        for p in sorted(code.rglob("*")):
            if len(names) > _MAX_FILES:
                return None
            if p.is_symlink() or (not p.is_file() and not p.is_dir()):
                return None
            if p.is_file():
                names.append(str(p.relative_to(run_dir)))
    for name in names:
        p = run_dir / name
        if p.is_symlink() or not p.is_file():
            return None
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        out[name] = h.hexdigest()
    return out


def _mac(key: bytes, manifest: dict[str, str]) -> str:
    return hmac.new(key, json.dumps(manifest, sort_keys=True).encode(), hashlib.sha256).hexdigest()


def seal(run_dir: Path) -> None:
    """Sign the record as it stands now (the last step of writing it)."""
    run_dir = Path(run_dir)
    manifest = _manifest(run_dir)
    key = _key(create=True)
    if manifest is None or key is None:
        return
    atomic_write_text(run_dir / SEAL, json.dumps({"format": 1, "files": manifest, "mac": _mac(key, manifest)}, indent=1) + "\n")


@dataclass(frozen=True)
class Verdict:
    trusted: bool
    why: str  # one phrase: what makes the folder someone else's data, or that it verified


def verify(run_dir: Path) -> Verdict:
    run_dir = Path(run_dir)
    try:
        doc = read_json(run_dir / SEAL, max_bytes=4 << 20)
    except RunFolderError as exc:
        return Verdict(False, exc.message)
    if doc is None:
        return Verdict(False, "it has no record.seal (written elsewhere, or by an envkit that did not seal its records)")
    key = _key(create=False)
    if key is None:
        return Verdict(False, "this machine holds no key for run folders: it was written elsewhere")
    files, mac = doc.get("files"), doc.get("mac")
    if not isinstance(files, dict) or not isinstance(mac, str) or not hmac.compare_digest(_mac(key, files), mac):
        return Verdict(False, "its record.seal was made with another key (written on another machine or account) or edited")
    now = _manifest(run_dir)
    if now is None:
        return Verdict(False, "its record holds a symbolic link or something not a file")
    changed = sorted(n for n in set(now) | set(files) if now.get(n) != files.get(n))
    if changed:
        return Verdict(False, f"{', '.join(changed[:3])}{' and more' if len(changed) > 3 else ''} changed after the run")
    return Verdict(True, "written on this machine and unchanged since (record.seal verifies)")
