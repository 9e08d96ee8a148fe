"""`envkit lock` as one function: targets -> torch and companions (one public version on every
target: torch_pick.py) -> each target's closure (resolve.py) -> one pylock.toml (grouping.py, toml.py).
Every input is checked before the first request; nothing is written unless all targets resolve."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from envkit import __version__
from envkit.errors import EnvkitError
from envkit.facts import gather
from envkit.install.choice.model import parse_request
from envkit.install.index import pip_config
from envkit.install.lock import grouping, resolve, torch_pick
from envkit.install.lock.convert import convert
from envkit.install.lock.project import ask_of, project_requirements, read_project, torch_family_asks
from envkit.install.lock.read import is_pylock, require_pylock
from envkit.install.lock.targets import parse_target, this_target
from envkit.install.lock.torch_pick import TORCH_FAMILY
from envkit.install.setup.options import DEFAULT_EXTRAS, index_override, parse_with


@dataclass
class LockOptions:
    targets: list[str] = field(default_factory=lambda: ["this"])
    torch: str = "stable"
    with_: str = ""
    numpy: bool = True
    python: str | None = None  # "3.11"; default: the Python running envkit
    index_url: str | None = None
    output: str = "pylock.toml"
    from_lock: str | None = None
    extras: tuple[str, ...] = ()  # the project's extras to lock with it
    groups: tuple[str, ...] = ()  # its PEP 735 dependency groups
    requirements: tuple[str, ...] = ()  # requirements files, relative to the lock's folder
    no_project: bool = False  # leave out [project] dependencies


@dataclass
class LockResult:
    path: Path
    written: bool
    targets: dict[str, dict]  # name -> {torch, group, packages: {name: version}}


def python_minor(text: str | None) -> str:
    if not text:
        return f"{sys.version_info.major}.{sys.version_info.minor}"
    import re

    if not re.fullmatch(r"3\.\d{1,2}", text.strip()):
        raise EnvkitError(f"--python {text!r} is not a Python version like 3.11", where="--python", fix="pass X.Y, e.g. --python 3.12")
    return text.strip()


def rest_sources(index_url: str | None) -> tuple[list[str], list[str]]:
    """(indexes, find-links) for everything but torch: --index-url, else pip's configuration."""
    if index_url:
        override, _ = index_override(index_url)
        return [override or index_url], []  # index_url given: override is it (a folder made absolute)

    return pip_config.pip_sources(sys.executable)


def run_lock(opts: LockOptions, say) -> LockResult:
    require_pylock("envkit lock")
    out = Path(opts.output)
    if not is_pylock(out):
        raise EnvkitError(f"--output {opts.output!r}: PEP 751 names a lock pylock.toml or pylock.NAME.toml",
                          where="--output", fix="e.g. --output pylock.toml or --output pylock.train.toml")
    if out.is_dir():
        raise EnvkitError("is a folder, not a lock file", where=str(out), fix="pass --output with a file name")
    if opts.from_lock:
        written, targets = convert(Path(opts.from_lock), out, rest_sources(opts.index_url), say,
                                   "--index-url" if opts.index_url else "pip's configured sources")
        return LockResult(path=out, written=written, targets=targets)
    request = parse_request(opts.torch)
    companions = parse_with(opts.with_)
    python = python_minor(opts.python)
    asked = opts.targets or ["this"]
    targets = []
    for text in asked:
        if text.strip().lower() == "this":
            targets.append(this_target(gather(None, runtime=False, gpu_detail=False), request))
        else:
            targets.append(parse_target(text))
    channel = request.channel
    rest, links = rest_sources(opts.index_url)
    targets = [torch_pick.expand_cuda(t, request, python, channel) for t in targets]
    seen: dict[str, str] = {}
    for t in targets:
        if t.name in seen:
            raise EnvkitError(f"--target {t.asked} and --target {seen[t.name]} are the same target ({t.name})",
                              where="--target", fix="name each target once")
        seen[t.name] = t.asked
    folder = out.absolute().parent
    asked_project = ask_of(folder, opts.extras, opts.groups, opts.requirements, opts.no_project)
    project_reqs, said = project_requirements(folder, asked_project)
    project_reqs, family_asks = torch_family_asks(project_reqs, TORCH_FAMILY)
    if project_reqs or family_asks:
        say(f"locking the project with torch: {', '.join(said)} ({len(project_reqs) + len(family_asks)} requirements)", err=True)
    families, located = torch_pick.pick_torch(targets, request, python, channel, rest, companions, links,
                                              "--index-url" if opts.index_url else "pip's configured sources")
    check_family_asks(families, family_asks, folder)
    for note in dict.fromkeys(loc.note for loc in located.values() if loc.note):
        say(f"note: {note}", err=True)
    extras: list[str] = [] if not opts.numpy else list(DEFAULT_EXTRAS)
    locks = []
    for t in targets:
        say(f"resolving {t.name}: torch {families[t]['torch'].version}", err=True)
        locks.append(resolve.resolve_target(t, families[t], python, channel, rest, links, extras, located[t].index,
                                            project=project_reqs))
    for line in differing_versions(locks):
        say(f"note: {line}", err=True)
    doc = grouping.build_pylock(locks, python=python, request=request.text, channel=channel,
                               envkit_version=__version__, rest_indexes=rest, project=read_project(out.absolute().parent))
    local = sorted({f for tl in locks for f in tl.local_only})
    if local:
        say(f"note: this lock installs only on this machine: {len(local)} wheel(s) come from a folder here that no index "
            f"serves ({', '.join(local[:3])}{' ...' if len(local) > 3 else ''}); lock with --index-url of an index that has them", err=True)
    path = Path(opts.output)
    written = grouping.write(path, doc)
    return LockResult(path=path, written=written, targets={
        tl.target.name: {"torch": tl.torch, "group": doc["tool"]["envkit"]["targets"][tl.target.name].get("group"),
                         "packages": {n: p.version for n, p in sorted(tl.packages.items())}} for tl in locks})


def check_family_asks(families: dict, asked: dict[str, str], folder: Path) -> None:
    """The project's own requirement on torch (or torchvision, ...) holds for the build picked on every target."""
    from packaging.specifiers import SpecifierSet

    for target, family in families.items():
        for name, spec in asked.items():
            cand = family.get(name)
            if cand is not None and spec and not SpecifierSet(spec).contains(cand.version, prereleases=True):
                raise EnvkitError(f"the project asks for {name}{spec}, and {target.name} would get {name} {cand.version}",
                                  where=str(folder / "pyproject.toml"), fix=f"lock with --torch matching {spec}, or change the project's requirement")


def differing_versions(locks) -> list[str]:
    """Packages (other than torch's family, whose builds differ by design) that uv resolved to
    different versions on different targets: usually a wheel missing for one platform. Said, not
    hidden: the lock is still valid, but not the same versions everywhere."""
    seen: dict[str, dict[str, str]] = {}
    for tl in locks:
        for name, p in tl.packages.items():
            if name not in TORCH_FAMILY:
                seen.setdefault(name, {})[tl.target.name] = p.version
    return [f"{name} differs between targets: " + ", ".join(f"{v} on {t}" for t, v in per.items())
            for name, per in sorted(seen.items()) if len(set(per.values())) > 1]
