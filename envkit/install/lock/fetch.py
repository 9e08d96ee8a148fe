"""The wheels of a lock, each downloaded into envkit's cache (or found there) and checked against
the lock's size and sha256 before anything is installed: the first file that differs stops
everything, naming it. A private index's credential reaches the download by credentials.py's rule."""

from __future__ import annotations

from pathlib import Path

from envkit.errors import EnvkitError
from envkit.install.act.execute import fetch_wheel, sha256_file
from envkit.install.lock.credentials import index_of, with_credentials
from envkit.install.lock.model import Pick
from envkit.redact import strip_userinfo


def fetch_verified(picks: list[Pick], lock_indexes: list[str], where: str, say) -> list[Path]:
    """The checked files, in the order of `picks` (those with a file)."""
    paths = []
    for p in picks:
        if p.url:
            url = with_credentials(p.url, index_of(p.url, p.index, lock_indexes))
        else:
            assert p.path is not None  # picks with a file (has_file): a URL or a path
            url = Path(p.path).resolve().as_uri()
        for attempt in (1, 2):  # a stale file in the cache is fetched again once
            path = fetch_wheel(url, p.filename, None)
            size, digest = path.stat().st_size, sha256_file(path)
            problem = (f"size {size} bytes, the lock says {p.size}" if p.size is not None and size != p.size
                       else f"sha256 {digest}, the lock says {p.sha256}" if digest != p.sha256 else None)
            if problem is None:
                break
            path.unlink()
            if attempt == 2:
                raise EnvkitError(f"the wheel {p.filename} downloaded from {strip_userinfo(url)} is not the file the lock "
                                  f"names ({problem}): nothing was installed", where=where,
                                  fix="the index or a proxy changed the file: check it, or lock again if the change is trusted")
        paths.append(path)
    say(f"{len(paths)} wheels match the lock's sizes and sha256", err=True)
    return paths
