"""`envkit lock --from envkit.lock`: an envkit.lock (one machine, written by `envkit setup`; either
format, read by read.py) as a pylock.toml with one target. The versions stay exactly as locked;
each package's wheel is the one the lock recorded, or, where it recorded none, the wheel of that
exact version on the lock's index (or --index-url) that fits the platform."""

from __future__ import annotations

from pathlib import Path

from envkit.errors import EnvkitError
from envkit.install.lock.model import Locked, TargetLock, Wheel
from envkit.install.lock.resolve import size_of
from envkit.install.lock.targets import Target, platform_of_machine


def _target(lock, where: str) -> tuple[Target, str]:
    p = lock.platform
    platform = platform_of_machine(str(p.get("system", "")), str(p.get("arch", "")))
    python = p.get("python_minor") or ".".join(str(p.get("python", "")).split(".")[:2])
    if platform is None or not python:
        raise EnvkitError(f"the lock's platform ({p.get('system')} {p.get('arch')}, Python {python or '?'}) has no pylock target",
                          where=where, fix="lock that machine with `envkit lock --target ...` instead")
    backend = str(p.get("backend") or "")
    build = "mps" if platform == "macos-arm64" else backend if backend and backend != "pypi" else "cpu"
    return Target(platform, build, f"--from {where}"), python


def _find(name: str, version: str, sources: list[str], target: Target, python: str):
    from envkit.install.index import pages

    tags = target.tags(python)
    order = {t: i for i, t in enumerate(tags)}
    for src in sources:
        try:
            cands = pages.fetch(src, name)
        except EnvkitError:
            continue
        fit = [c for c in cands if str(c.version) == version and c.fits(frozenset(tags), python) and c.sha256]
        if fit:
            return src, min(fit, key=lambda c: min(order.get(t, 10**6) for t in c.tags))
    return None, None


def convert(path: Path, output: Path, more_indexes: list[str], say) -> tuple[bool, dict[str, dict]]:
    """(written, {target: {torch, group, packages}})."""
    from envkit import __version__
    from envkit.install.lock import grouping
    from envkit.install.lock.read import read

    lock = read(path)
    where = str(path)
    if not lock.single:
        raise EnvkitError("is not an envkit.lock (a lock of one machine, written by `envkit setup`)", where=where,
                          fix="pass the envkit.lock that `envkit setup` wrote")
    if lock.note:
        say(lock.note, err=True)
    target, python = _target(lock, where)
    sources = lock.index_urls + list(more_indexes)
    tl = TargetLock(target=target, torch_index=(lock.index_urls or [""])[0])
    missing = []
    for p in lock.picks():
        if p.url and p.sha256:
            tl.packages[p.name] = Locked(p.name, p.version, next(iter(lock.index_urls), ""),
                                         Wheel(p.url, p.sha256, p.size or size_of(p.url), p.filename))
            continue
        src, cand = _find(p.name, p.version, sources, target, python)
        if cand is None:
            missing.append(f"{p.name} {p.version}")
            continue
        tl.packages[p.name] = Locked(p.name, p.version, src, Wheel(cand.url, cand.sha256, cand.size or size_of(cand.url),
                                                                   cand.filename))
    if missing:
        raise EnvkitError(f"the lock records no wheel URL and sha256 for {', '.join(missing)}, and no index has them",
                          where=where, fix="pass --index-url with an index that has them, or lock anew with `envkit lock`")
    tl.how = (f"converted from {path.name} (envkit setup on {lock.platform.get('chip') or lock.platform.get('os') or target.platform}"
              f", profile {lock.profile.get('name', '?')}); versions as locked, nothing resolved")
    doc = grouping.build_pylock([tl], python=python, request=str(lock.source.get("torch", "")),
                                channel=str(lock.source.get("channel", "stable")), envkit_version=__version__,
                                rest_indexes=lock.index_urls)
    info = doc["tool"]["envkit"]["targets"][target.name]
    info["profile"] = lock.profile.get("name") or info["profile"]
    written = grouping.write(output, doc)
    say(f"converted {path} ({len(tl.packages)} packages, {target.name})", err=True)
    return written, {target.name: {"torch": tl.torch, "group": None,
                                   "packages": {n: p.version for n, p in sorted(tl.packages.items())}}}
