"""The identity of a run's data, cheap on a 10 GB token file: for each file its size, its
modification time, and a hash of its content, whole where the file is at most 64 MiB (under 40 ms
at the 1.7 GB/s of sha256 on this project's 2-core CI machine), else of 16 blocks of 64 KiB (the
first, the last and 14 evenly spaced: 1 MiB read, a few milliseconds on any disk).

A whole hash is content, so only it decides for a small file (a `touch` is not a change). A
sampled hash sees an edit only if it touches a sampled block or the size, so for a large file a
new modification time counts as a change as well: token files are written once, and a file
rewritten in place is what a check must catch. Whole hashes are kept in envkit's cache, keyed by
the file's inode, size, modification and change times (the change time cannot be set by a user),
so a data set is hashed whole once, not at every run's start. A folder counts its first 10,000
files (sorted by path) and whole-hashes at most 256 MiB of them; what lies beyond is sampled."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from envkit.fsutil import atomic_write_text, sha256_file
from envkit.record.envstate import cache_root

FULL_HASH_MAX = 64 << 20
BLOCK = 64 << 10
SAMPLES = 16
FOLDER_MAX_FILES = 10_000
FOLDER_FULL_BUDGET = 256 << 20
LISTED_FILES = 200  # a folder's files named one by one in the record (beyond, its digest alone)


def sampled_sha256(path: Path, size: int) -> str:
    h = hashlib.sha256(f"{size}".encode())
    with open(path, "rb") as fh:
        last = max(0, size - BLOCK)
        for i in range(SAMPLES):
            fh.seek(last * i // (SAMPLES - 1))
            h.update(fh.read(BLOCK))
    return h.hexdigest()


class _FullHashes:
    """Whole hashes of files by (inode, size, mtime, ctime), in envkit's cache."""

    def __init__(self):
        self.path = cache_root() / "data-hashes.json"
        try:
            self.known = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self.known = {}
        self.changed = False

    def get(self, path: Path, st: os.stat_result) -> str:
        key = f"{path}|{st.st_dev}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}"
        if key not in self.known:
            self.known[key] = sha256_file(path)
            self.changed = True
        return self.known[key]

    def save(self) -> None:
        if self.changed:
            try:
                atomic_write_text(self.path, json.dumps(dict(list(self.known.items())[-20000:])))
            except OSError:
                pass


def _file_entry(path: Path, rel: str, st: os.stat_result, full: bool, cache: _FullHashes) -> dict:
    e = {"path": rel, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    if full:
        e["sha256"] = cache.get(path, st)
    else:
        e["sampled_sha256"] = sampled_sha256(path, st.st_size)
    return e


_KERNEL = ("/proc", "/sys", "/dev")  # files there are not data: reading one may block (/proc/kmsg) or never end (/dev/zero)


def _kernel_file(p: Path) -> bool:
    real = os.path.realpath(p)
    return any(real == k or real.startswith(k + "/") for k in _KERNEL)


def _listing(p: Path) -> tuple[list[str], bool]:
    """(the relative paths of a folder's first FOLDER_MAX_FILES regular files, walked in name order
    without following linked folders; whether there were more). The walk stops there: a data path
    of `/usr` costs a bounded listing, not minutes."""
    out: list[str] = []
    stack = [p]
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name, reverse=True)
        except OSError:
            continue
        subs = []
        for e in reversed(entries):
            try:
                if e.is_dir(follow_symlinks=False):
                    subs.append(Path(e.path))
                elif e.is_file() and not _kernel_file(Path(e.path)):
                    if len(out) >= FOLDER_MAX_FILES:
                        return sorted(out), True
                    out.append(str(Path(e.path).relative_to(p)))
            except OSError:
                continue
        stack.extend(reversed(subs))
    return sorted(out), False


def fingerprint(path: str | Path, key: str = "dataset.path", whole_max: int = FULL_HASH_MAX) -> dict:
    """{key, path, kind: file|folder|missing|unreadable, size, files: [...], digest} of one data path.
    Only regular files are read; a device, a FIFO or a kernel file (/proc, /sys, /dev) is
    `unreadable` with the reason, never opened. A file over `whole_max` bytes is sampled."""
    p = Path(path)
    out: dict = {"key": key, "path": str(p)}
    cache = _FullHashes()
    try:
        if _kernel_file(p):
            out.update(kind="unreadable", error="a device or kernel file (/proc, /sys, /dev), not data: not read")
            return out
        if p.is_file():
            st = p.stat()
            e = _file_entry(p, p.name, st, st.st_size <= whole_max, cache)
            out.update(kind="file", size=st.st_size, files=[e])
        elif p.is_dir():
            names, more = _listing(p)
            out.update(kind="folder", file_count=len(names), counted=len(names))
            if more:
                out["more_files"] = True  # beyond the first FOLDER_MAX_FILES, not listed or hashed
            files, budget = [], FOLDER_FULL_BUDGET
            for rel in names:
                st = (p / rel).stat()
                full = st.st_size <= FULL_HASH_MAX and st.st_size <= budget
                budget -= st.st_size if full else 0
                files.append(_file_entry(p / rel, rel, st, full, cache))
            out.update(size=sum(f["size"] for f in files), files=files)
        elif os.path.lexists(p) and p.exists():
            out.update(kind="unreadable", error="not a regular file or folder (a FIFO, socket or device)")
            return out
        else:
            out.update(kind="missing")
            return out
    except OSError as exc:
        out.update(kind="unreadable", error=exc.strerror or str(exc))
        return out
    finally:
        cache.save()
    out["digest"] = hashlib.sha256(json.dumps(out["files"], sort_keys=True).encode()).hexdigest()[:16]
    if len(out["files"]) > LISTED_FILES:
        out["files_listed"] = LISTED_FILES
        out["files"] = out["files"][:LISTED_FILES]
    return out


def _same(a: dict, b: dict) -> str | None:
    """Why file entry b is not a (None when it is the same data)."""
    if a.get("size") != b.get("size"):
        return f"size {a.get('size'):,} -> {b.get('size'):,} bytes"
    if "sha256" in a and "sha256" in b:
        return None if a["sha256"] == b["sha256"] else "content changed (sha256)"
    if a.get("sampled_sha256") != b.get("sampled_sha256"):
        return "content changed (sampled blocks)"
    if a.get("mtime_ns") != b.get("mtime_ns"):
        return "modified since (same size; a large file is sampled, so a new modification time counts)"
    return None


def differences(recorded: dict, now: dict) -> list[str]:
    """One line per difference between a recorded fingerprint and the current one."""
    key = recorded.get("key", "data")
    where = f"{recorded.get('path')} (read by the run)" if key == "opened" else f"{key} {recorded.get('path')}"
    if now.get("kind") in ("missing", "unreadable"):
        return [f"{where}: {now['kind']}" + (f" ({now['error']})" if now.get("error") else "")]
    if recorded.get("kind") != now.get("kind"):
        return [f"{where}: was a {recorded.get('kind')}, is a {now.get('kind')}"]
    if recorded.get("digest") == now.get("digest"):
        return []
    old = {f["path"]: f for f in recorded.get("files") or []}
    new = {f["path"]: f for f in now.get("files") or []}
    lines = [f"{where}: {name} is new" for name in sorted(set(new) - set(old))]
    lines += [f"{where}: {name} is gone" for name in sorted(set(old) - set(new))]
    for name in sorted(set(old) & set(new)):
        why = _same(old[name], new[name])
        if why:
            lines.append(f"{where}: {why}" if recorded.get("kind") == "file" else f"{where}: {name}: {why}")
    if not lines:  # only mtimes of whole-hashed files moved, or a change beyond the listed files
        if all(_same(old[n], new[n]) is None for n in old if n in new) and len(old) == len(new) and not recorded.get("files_listed"):
            return []
        lines.append(f"{where}: changed (digest {recorded.get('digest')} -> {now.get('digest')})")
    return lines
