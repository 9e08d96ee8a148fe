"""`envkit lock --from pylock.machine.toml`: a lock of one machine (written by `envkit setup`; an
envkit.lock of before in either format too, read by read.py) as a pylock.toml with one target.
The versions stay exactly as locked; each package's wheel is the one the lock recorded, or, where
it recorded none, the wheel of that exact version that fits the platform on the first source that
has it, in index/sources.py's order: the lock's own index, then --index-url, else pip's configured
sources (said in one line). A version on none of them is one line naming them and the versions they
have (exit 2)."""

from __future__ import annotations

from pathlib import Path

from envkit import __version__
from envkit.errors import EnvkitError
from envkit.install.index import pages, sources
from envkit.install.lock import grouping
from envkit.install.lock.index_hashes import local_sha256
from envkit.install.lock.model import Locked, TargetLock, Wheel
from envkit.install.lock.project import read_project
from envkit.install.lock.read import read
from envkit.install.lock.resolve import index_url_of, size_of
from envkit.install.lock.targets import Target, platform_of_machine


def _target(lock, where: str) -> tuple[Target, str, str]:
    """(the pylock target, its Python X.Y for wheel tags, the locked interpreter's full version for
    requires-python: a package's `>=3.11.5` holds for the 3.11.7 that was locked, not for "3.11")."""
    p = lock.platform
    platform = platform_of_machine(str(p.get("system", "")), str(p.get("arch", "")))
    python = p.get("python_minor") or ".".join(str(p.get("python", "")).split(".")[:2])
    full = str(p.get("python") or "")
    if not full.startswith(f"{python}.") or full.count(".") != 2:
        full = python  # an old lock without the full version: X.Y, as before
    if platform is None or not python:
        raise EnvkitError(f"the lock's platform ({p.get('system')} {p.get('arch')}, Python {python or '?'}) has no pylock target",
                          where=where, fix="lock that machine with `envkit lock --target ...` instead")
    backend = str(p.get("backend") or "")
    build = "mps" if platform == "macos-arm64" else backend if backend and backend != "pypi" else "cpu"
    return Target(platform, build, f"--from {where}"), python, full


class _Sources:
    """The lock's own indexes, then the rest (--index-url, else pip's configured sources, those on
    this disk first): the order index/sources.py gives. Each page is read once."""

    def __init__(self, primary: list[str], rest: tuple[list[str], list[str]]):
        self.primary = list(primary)
        self.order = self.primary + [s for g in sources.fallback_groups(*rest) for s in g if s not in self.primary]
        self.pages: dict[tuple[str, str], list] = {}
        self.unreachable: dict[str, str] = {}

    def read(self, src: str, name: str) -> list:
        if (src, name) not in self.pages:
            try:
                self.pages[src, name] = pages.fetch(src, name)
            except EnvkitError as exc:
                self.unreachable[src] = sources.reason(exc)
                self.pages[src, name] = []
        return self.pages[src, name]

    def find(self, name: str, version: str, target: Target, python: str, full: str):
        """(source, wheel, sha256) of this exact version on the first source that has a wheel of it
        for the platform and the interpreter's full version, or (None, None, None)."""
        tags = target.tags(python)
        order = {t: i for i, t in enumerate(tags)}
        for src in self.order:
            fit = [c for c in self.read(src, name) if str(c.version) == version and c.fits(frozenset(tags), full)
                   and (c.sha256 or c.url.startswith("file://"))]
            if fit:
                cand = min(fit, key=lambda c: min(order.get(t, 10**6) for t in c.tags))
                return src, cand, cand.sha256 or local_sha256(cand.url)
        return None, None, None

    def versions(self, name: str, target: Target, python: str, full: str) -> list[str]:
        from packaging.version import Version

        tags = frozenset(target.tags(python))
        return sorted({str(c.version) for src in self.order for c in self.read(src, name) if c.fits(tags, full)}, key=Version)


def convert(path: Path, output: Path, rest: tuple[list[str], list[str]], say, rest_label: str = "pip's configured sources"
            ) -> tuple[bool, dict[str, dict]]:
    """(written, {target: {torch, group, packages}}). `rest`: (indexes, find-links) after the
    lock's own: --index-url, else pip's configuration."""
    lock = read(path)
    where = str(path)
    if not lock.single:
        raise EnvkitError("is not a lock of one machine (the pylock.machine.toml or envkit.lock `envkit setup` writes)",
                          where=where, fix="pass the pylock.machine.toml that `envkit setup` wrote")
    if lock.note:
        say(lock.note, err=True)
    target, python, full = _target(lock, where)
    srcs = _Sources(lock.index_urls, rest)
    tl = TargetLock(target=target, torch_index=(lock.index_urls or [""])[0])
    missing, elsewhere = [], {}
    for p in lock.picks():
        if p.url and p.sha256:
            tl.packages[p.name] = Locked(p.name, p.version, next(iter(lock.index_urls), ""),
                                         Wheel(p.url, p.sha256, p.size or size_of(p.url), p.filename))
            continue
        src, cand, sha = srcs.find(p.name, p.version, target, python, full)
        if cand is None or sha is None:  # sha None: a file:// wheel gone since it was listed (never locked unhashed)
            missing.append(p)
            continue
        assert src is not None  # found with cand
        if src not in srcs.primary:
            elsewhere.setdefault(src, []).append(f"{p.name} {p.version}")
        tl.packages[p.name] = Locked(p.name, p.version, index_url_of(src),
                                     Wheel(cand.url, sha, cand.size or size_of(cand.url), cand.filename))
    if missing:
        what = ", ".join(f"{p.name} {p.version}" for p in missing)
        have = "; ".join(f"{p.name} {', '.join(srcs.versions(p.name, target, python, full)[-8:]) or '(no wheel for this platform)'}"
                         for p in missing)
        raise EnvkitError(f"{what} {'is' if len(missing) == 1 else 'are'} on none of: "
                          f"{sources.tried_text(srcs.order, srcs.unreachable) or 'no source (the lock names no index)'}; "
                          f"they have {have}", where=where,
                          fix="pin a version that exists in the lock, or pass --index-url with an index that has it")
    if elsewhere:  # one line: which packages, and where they were found instead
        names = ", ".join(n for found in elsewhere.values() for n in found)
        why = f"not on the lock's index ({', '.join(srcs.primary)})" if srcs.primary else "the lock names no index"
        say(f"note: {why} for {names}: found on {rest_label} ({', '.join(elsewhere)})", err=True)
    tl.how = (f"converted from {path.name} (envkit setup on {lock.platform.get('chip') or lock.platform.get('os') or target.platform}"
              f", profile {lock.profile.get('name', '?')}); versions as locked, nothing resolved")
    doc = grouping.build_pylock([tl], python=python, request=str(lock.source.get("torch", "")),
                                channel=str(lock.source.get("channel", "stable")), envkit_version=__version__,
                                rest_indexes=lock.index_urls, project=lock.project or read_project(output.absolute().parent))
    info = doc["tool"]["envkit"]["targets"][target.name]
    info["profile"] = lock.profile.get("name") or info["profile"]
    written = grouping.write(output, doc)
    say(f"converted {path} ({len(tl.packages)} packages, {target.name})", err=True)
    return written, {target.name: {"torch": tl.torch, "group": None,
                                   "packages": {n: p.version for n, p in sorted(tl.packages.items())}}}
