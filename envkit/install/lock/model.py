"""The data a lock is made of, shared by its writers and its readers: a wheel (URL, sha256, size,
file name), one package of one target's closure (Locked), a target's closure (TargetLock), and
one package as an install takes it from a lock of either format (Pick)."""

from __future__ import annotations

from dataclasses import dataclass, field

from envkit.install.lock.targets import Target


@dataclass
class Wheel:
    url: str
    sha256: str
    size: int | None
    filename: str


@dataclass
class Locked:
    """One package of one target's closure."""

    name: str
    version: str
    index: str
    wheel: Wheel


@dataclass
class TargetLock:
    target: Target
    torch_index: str
    packages: dict[str, Locked] = field(default_factory=dict)
    how: str = ""
    local_only: list[str] = field(default_factory=list)  # wheels only this machine has (file:// URLs no index serves)

    @property
    def torch(self) -> str:
        return self.packages["torch"].version


@dataclass(frozen=True)
class Pick:
    """One package to install from a lock: a wheel file to fetch and check (by URL or local path),
    or, where the lock recorded no wheel (a machine lock of a venv envkit did not fill), a version
    that pip finds on the lock's indexes."""

    name: str
    version: str
    sha256: str | None = None
    url: str | None = None
    path: str | None = None
    size: int | None = None
    filename: str = ""
    index: str | None = None  # the index the lock names for this package (its credential follows it)
    cached: str | None = None  # the file's name in envkit's wheel cache (a nightly outlives its index)

    @property
    def has_file(self) -> bool:
        return bool(self.url or self.path)


def wheel_filename(url_or_path: str) -> str:
    """A wheel's file name from its URL (the last path segment, percent-decoded) or local path."""
    from urllib.parse import unquote, urlsplit

    if "://" in url_or_path:
        return unquote(urlsplit(url_or_path).path.rsplit("/", 1)[-1])
    return url_or_path.replace("\\", "/").rsplit("/", 1)[-1]
