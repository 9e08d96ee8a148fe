"""The untracked files' archive of a run folder (code/<role>-untracked.tar), read with the caps it
was written with (record/code.py): an uncompressed tar only (a compressed one could expand a
thousandfold), at most UNTRACKED_COUNT_MAX members, each a regular file of at most
UNTRACKED_FILE_MAX bytes at a relative path inside the tree, UNTRACKED_TOTAL_MAX in all; no links,
devices or folders that escape. Everything is checked before the first byte is written."""

from __future__ import annotations

import os
import stat
import tarfile
from pathlib import Path, PurePosixPath

from envkit.runfolder.limits import UNTRACKED_COUNT_MAX, UNTRACKED_FILE_MAX, UNTRACKED_TOTAL_MAX
from envkit.runfolder.bounded import RunFolderError
from envkit.runfolder.links import NOFOLLOW

_FIX = "the run folder was changed; its untracked files cannot be put back as envkit wrote them"
_TAR_OVERHEAD = 1536  # a header block a member and the end blocks; pax headers add a few more


def extract(archive: Path, dest: Path) -> list[str]:
    """Check every member of `archive`, then write them under `dest`; the relative paths written.
    A member is written only as a new file in a folder of `dest` reached through no link (a patch
    that added a link `data -> /etc`, then a member `data/x`, would write outside the tree), and
    never over a file the tree holds (a member named like a tracked file would replace it)."""
    archive, dest = Path(archive), Path(dest)
    where = str(archive)
    if archive.is_symlink() or not archive.is_file():
        raise RunFolderError("the untracked files' archive is not a regular file", where=where, fix=_FIX)
    limit = UNTRACKED_TOTAL_MAX + (UNTRACKED_COUNT_MAX + 2) * 3 * _TAR_OVERHEAD
    if archive.stat().st_size > limit:
        raise RunFolderError(f"the untracked files' archive is {archive.stat().st_size:,} bytes, over the {limit:,} envkit "
                             "ever writes", where=where, fix=_FIX)
    try:
        with tarfile.open(archive, mode="r:") as tar:  # "r:": no decompression, ever
            members = _checked(tar, where)
            for m in members:
                _refuse_unsafe_target(dest, PurePosixPath(m.name), where)
            dest.mkdir(parents=True, exist_ok=True)
            for m in members:
                parts = PurePosixPath(m.name).parts
                _make_folders(dest, parts[:-1], where)
                src = tar.extractfile(m)
                data = src.read(UNTRACKED_FILE_MAX + 1) if src else b""
                if len(data) != m.size:
                    raise RunFolderError(f"the untracked files' archive is cut short at {m.name!r}", where=where, fix=_FIX)
                _write_new(dest.joinpath(*parts), data, m.name, where)
    except tarfile.TarError as exc:
        raise RunFolderError(f"the untracked files' archive is not an uncompressed tar envkit wrote ({exc})", where=where,
                             fix=_FIX) from None
    return [m.name for m in members]


def checked_members(tar: tarfile.TarFile, where: str) -> list[tarfile.TarInfo]:
    """The archive's members, each checked against the caps (what the plan shows is what is written)."""
    return _checked(tar, where)


def _refuse_unsafe_target(dest: Path, rel: PurePosixPath, where: str) -> None:
    here = dest
    for i, part in enumerate(rel.parts):
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return  # nothing there yet: the rest is made fresh
        if stat.S_ISLNK(st.st_mode):
            raise RunFolderError(f"the untracked files' archive holds {str(rel)!r}, under {'/'.join(rel.parts[:i + 1])!r}, "
                                 "which is a symbolic link in the tree: it would be written outside it", where=where, fix=_FIX)
        if i == len(rel.parts) - 1:
            raise RunFolderError(f"the untracked files' archive holds {str(rel)!r}, a file the run's tree already has "
                                 "(tracked at its commit, or made by its patch): it would replace it", where=where, fix=_FIX)
        if not stat.S_ISDIR(st.st_mode):
            raise RunFolderError(f"the untracked files' archive holds {str(rel)!r}, under a file of the tree", where=where, fix=_FIX)


def _make_folders(dest: Path, parts: tuple[str, ...], where: str) -> None:
    here = dest
    for part in parts:
        here = here / part
        try:
            os.mkdir(here, 0o777)
        except FileExistsError:
            if not stat.S_ISDIR(os.lstat(here).st_mode):  # a link made since the check: refused, never followed
                raise RunFolderError(f"the tree's {part!r} is not a folder", where=where, fix=_FIX) from None


def _write_new(target: Path, data: bytes, name: str, where: str) -> None:
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o666)
    except FileExistsError:
        raise RunFolderError(f"the untracked files' archive holds {name!r} twice, or a file the tree has", where=where,
                             fix=_FIX) from None
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _checked(tar: tarfile.TarFile, where: str) -> list[tarfile.TarInfo]:
    members, total = [], 0
    for m in tar:
        if len(members) >= UNTRACKED_COUNT_MAX:
            raise RunFolderError(f"the untracked files' archive holds more than {UNTRACKED_COUNT_MAX:,} files", where=where, fix=_FIX)
        parts = PurePosixPath(m.name).parts
        if not m.isreg():
            raise RunFolderError(f"the untracked files' archive holds {m.name!r}, which is not a regular file", where=where, fix=_FIX)
        if not parts or m.name.startswith("/") or ".." in parts or "\\" in m.name or "\0" in m.name or ".git" in parts:
            raise RunFolderError(f"the untracked files' archive holds {m.name!r}, which is not a file inside the tree",
                                 where=where, fix=_FIX)
        if m.size > UNTRACKED_FILE_MAX:
            raise RunFolderError(f"the untracked files' archive holds {m.name!r} of {m.size:,} bytes, over the "
                                 f"{UNTRACKED_FILE_MAX:,} envkit keeps", where=where, fix=_FIX)
        total += m.size
        if total > UNTRACKED_TOTAL_MAX:
            raise RunFolderError(f"the untracked files' archive holds over {UNTRACKED_TOTAL_MAX:,} bytes", where=where, fix=_FIX)
        members.append(m)
    return members
