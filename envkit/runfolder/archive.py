"""The untracked files' archive of a run folder (code/<role>-untracked.tar), read with the caps it
was written with (record/code.py): an uncompressed tar only (a compressed one could expand a
thousandfold), at most UNTRACKED_COUNT_MAX members, each a regular file of at most
UNTRACKED_FILE_MAX bytes at a relative path inside the tree, UNTRACKED_TOTAL_MAX in all; no links,
devices or folders that escape. Everything is checked before the first byte is written."""

from __future__ import annotations

import tarfile
from pathlib import Path, PurePosixPath

from envkit.runfolder.limits import UNTRACKED_COUNT_MAX, UNTRACKED_FILE_MAX, UNTRACKED_TOTAL_MAX
from envkit.runfolder.bounded import RunFolderError

_FIX = "the run folder was changed; its untracked files cannot be put back as envkit wrote them"
_TAR_OVERHEAD = 1536  # a header block a member and the end blocks; pax headers add a few more


def extract(archive: Path, dest: Path) -> list[str]:
    """Check every member of `archive`, then write them under `dest`; the relative paths written."""
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
                target = dest.joinpath(*PurePosixPath(m.name).parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(m)
                data = src.read(UNTRACKED_FILE_MAX + 1) if src else b""
                if len(data) != m.size:
                    raise RunFolderError(f"the untracked files' archive is cut short at {m.name!r}", where=where, fix=_FIX)
                if target.is_symlink():
                    target.unlink()
                target.write_bytes(data)
    except tarfile.TarError as exc:
        raise RunFolderError(f"the untracked files' archive is not an uncompressed tar envkit wrote ({exc})", where=where,
                             fix=_FIX) from None
    return [m.name for m in members]


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
