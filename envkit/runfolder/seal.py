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
from envkit.fsutil import cache_dir
from envkit.runfolder.bounded import RunFolderError, parse_json, read_bytes

SEAL = "record.seal"
SEALED = ("record.json", "pylock.toml")  # and every file under code/
RESULTS = ("summary.json", "metrics.jsonl", "data.json")  # added when the run ends (seal_results): what the verdict and the data check read
_CODE = "code"
_MAX_FILES = 10_000
KEY_BYTES = 32


def _key_path() -> Path:
    return cache_dir() / "keys" / "run-folders.key"


class KeyError_(EnvkitError):
    """The machine key's file is there but holds no usable key: never used (one line, exit 2)."""


def _read_key(path: Path) -> bytes | None:
    """The key in `path`; None where there is no file. A file that is empty, short, not hex, a link
    or not a regular file is KeyError_: an interrupted first write (or a hand) left it, and a key
    anyone can guess would make every folder sealed with it pass for this machine's."""
    try:
        data = read_bytes(path, max_bytes=4096, what="the machine key")
    except RunFolderError as exc:
        raise KeyError_(f"the machine key {path} cannot be used: {exc.message}", where=str(path),
                        fix="delete it and a new one is made (folders it sealed are then asked about, not trusted)") from None
    if data is None:
        return None
    try:
        key = bytes.fromhex(data.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        key = b""
    if len(key) < KEY_BYTES:
        raise KeyError_(f"the machine key {path} holds no {KEY_BYTES}-byte key ({len(data)} bytes of text)", where=str(path),
                        fix="delete it and a new one is made (folders it sealed are then asked about, not trusted)")
    return key


def _key(create: bool) -> bytes | None:
    path = _key_path()
    key = _read_key(path)
    if key is not None or not create:
        return key
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # written whole into a temporary file, then linked into place: no process ever sees a short key,
    # and of two processes making it at once the first link wins and the other reads it
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(KEY_BYTES) + "\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
    finally:
        tmp.unlink(missing_ok=True)
    return _read_key(path)


def machine_key() -> bytes:
    """This machine's signing key (made on first use): what else envkit keeps in its cache and
    will execute later (train/run/compile_cache.py) is signed with it too."""
    key = _key(create=True)
    if key is None:
        raise EnvkitError(f"the machine key {_key_path()} could not be made", fix="check that envkit's cache folder is writable")
    return key


def _digests(files: dict[str, bytes]) -> dict[str, str]:
    return {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}


def sealed_names(run_dir: Path, results: bool = False) -> list[str] | None:
    """The files a seal covers as they stand in `run_dir` (record.json, pylock.toml, every file under
    code/; with `results`, summary.json and metrics.jsonl too); None where one is a link or not a file."""
    names = [n for n in (*SEALED, *(RESULTS if results else ())) if os.path.lexists(run_dir / n)]
    code = run_dir / _CODE
    if code.is_symlink():
        return None
    if code.is_dir():
        for p in sorted(code.rglob("*")):
            if len(names) > _MAX_FILES or p.is_symlink() or (not p.is_file() and not p.is_dir()):
                return None
            if p.is_file():
                names.append(p.relative_to(run_dir).as_posix())
    return names


def _read_all(run_dir: Path, names: list[str]) -> dict[str, bytes] | None:
    try:
        return {n: read_bytes(run_dir / n, max_bytes=1 << 30) or b"" for n in names}
    except RunFolderError:
        return None


def _mac(key: bytes, manifest: dict[str, str]) -> str:
    return hmac.new(key, json.dumps(manifest, sort_keys=True).encode(), hashlib.sha256).hexdigest()


def seal(run_dir: Path, results: bool = False) -> None:
    """Sign the record as it stands now (the last step of writing it); `results`: the run's
    summary.json and metrics.jsonl with it (seal_results)."""
    run_dir = Path(run_dir)
    names = sealed_names(run_dir, results)
    files = _read_all(run_dir, names) if names is not None else None
    try:
        key = _key(create=True)
    except KeyError_:
        return  # the folder stays unsealed: reproducing it asks first
    if files is None or key is None:
        return
    manifest = _digests(files)
    atomic_write_text(run_dir / SEAL, json.dumps({"format": 1, "files": manifest, "mac": _mac(key, manifest)}, indent=1) + "\n")


def seal_results(run_dir: Path) -> None:
    """When the run has ended: the seal made again over the record and the run's results, so that
    what the verdict of a reproduction reads (the device and world size in summary.json, the
    metrics) is covered too. Only a folder whose record still verifies is sealed again (an edit
    made during the run is never signed); a run killed before this keeps its record's seal alone."""
    run_dir = Path(run_dir)
    names = sealed_names(run_dir)
    files = _read_all(run_dir, names) if names is not None else None
    seal_doc = _read_all(run_dir, [SEAL]) if (run_dir / SEAL).is_file() else None
    if files is None or seal_doc is None or not verify_files({**files, SEAL: seal_doc[SEAL]}, record_only=True).trusted:
        return  # (a resumed run's results changed since the last seal, as they should: only its record must verify)
    seal(run_dir, results=True)


@dataclass(frozen=True)
class Verdict:
    trusted: bool
    why: str  # one phrase: what makes the folder someone else's data, or that it verified
    results: bool = False  # the seal covers summary.json and metrics.jsonl too (the run ended on its own)


def verify_files(files: dict[str, bytes], record_only: bool = False) -> Verdict:
    """Whether `files` (relative name -> bytes: the snapshot of a run folder, record.seal among them)
    are what this machine sealed: every file the seal lists is there with its digest, and every file
    a seal would cover (record.json, pylock.toml, code/...; summary.json and metrics.jsonl once the
    seal lists results) is listed. `record_only`: the results are left out of the comparison."""
    raw = files.get(SEAL)
    if raw is None:
        return Verdict(False, "it has no record.seal (written elsewhere, or by an envkit that did not seal its records)")
    try:
        doc = parse_json(raw, SEAL, SEAL)
    except RunFolderError as exc:
        return Verdict(False, exc.message)
    try:
        key = _key(create=False)
    except KeyError_ as exc:
        return Verdict(False, exc.message)
    if key is None:
        return Verdict(False, "this machine holds no key for run folders: it was written elsewhere")
    listed, mac = doc.get("files"), doc.get("mac")
    if not isinstance(listed, dict) or not isinstance(mac, str) or not hmac.compare_digest(_mac(key, listed), mac):
        return Verdict(False, "its record.seal was made with another key (written on another machine or account) or edited")
    if record_only:
        listed = {n: d for n, d in listed.items() if n not in RESULTS}
    with_results = any(n in listed for n in RESULTS)
    covered = {n: d for n, d in files.items()
               if n in SEALED or n.startswith(_CODE + "/") or (with_results and n in RESULTS)}
    now = _digests(covered)
    changed = sorted(n for n in set(now) | set(listed) if now.get(n) != listed.get(n))
    if changed:
        return Verdict(False, f"{', '.join(changed[:3])}{' and more' if len(changed) > 3 else ''} changed after the run")
    results = "; its results too" if with_results else "; its results (summary.json, metrics.jsonl) were not sealed: the run did not end on its own"
    return Verdict(True, "written on this machine and unchanged since (record.seal verifies" + results + ")", with_results)


def verify(run_dir: Path) -> Verdict:
    """verify_files over the files of `run_dir` as they stand (read bounded, links refused)."""
    run_dir = Path(run_dir)
    names = sealed_names(run_dir, results=True)
    if names is None:
        return Verdict(False, "its record holds a symbolic link or something not a file")
    files = _read_all(run_dir, [*names, *([SEAL] if os.path.lexists(run_dir / SEAL) else [])])
    if files is None:
        return Verdict(False, "its record holds a symbolic link or something not a file")
    return verify_files(files)
