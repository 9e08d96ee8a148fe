"""Read a pylock.toml and select this machine's part of it: which target (and so which dependency
group) the machine is, then `packaging.pylock.Pylock.select` for the interpreter it installs into.
Nothing is resolved: the lock says every file.

A lock written by envkit says its targets in [tool.envkit.targets]; a lock written by another
tool (uv, pdm) is selected with its default groups."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.install.lock.targets import platform_of_machine

FIX_CORRUPT = "write it again with `envkit lock`, or restore it from version control"


@dataclass
class Selection:
    target: str  # the lock's target name ("linux-x86_64-cpu"), or "default groups" for a foreign lock
    group: str | None
    device: str  # what the verification checks: mps, cuda, cpu-only, cpu
    items: list = field(default_factory=list)  # [(packaging.pylock.Package, PackageWheel)]
    notes: list[str] = field(default_factory=list)

    @property
    def versions(self) -> dict[str, str]:
        return {str(p.name): str(p.version) for p, _ in self.items}


def is_pylock(path: Path) -> bool:
    """PEP 751's file names: pylock.toml, pylock.NAME.toml."""
    import re

    return path.name == "pylock.toml" or bool(re.fullmatch(r"pylock\.[^.]+\.toml", path.name))


def require_pylock(where: str) -> None:
    """packaging.pylock (26.1+: Pylock.select) or one line saying how to get it."""
    try:
        from packaging.pylock import Pylock

        Pylock.select  # noqa: B018 (26.0 has the module without select)
    except (ImportError, AttributeError):
        raise EnvkitError("pylock.toml support needs packaging 26.1 or newer", where=where,
                          fix="pip install 'envkit[lock]' (or pip install -U packaging)")


def read(path: Path):
    """(Pylock, the TOML as a dict). Every problem is one line naming the file."""
    require_pylock(str(path))
    from packaging.pylock import Pylock, PylockValidationError

    from envkit.install.lock.record import read_lock_toml

    where = str(path)
    data = read_lock_toml(path, "envkit lock", FIX_CORRUPT)
    try:
        return Pylock.from_dict(data), data
    except PylockValidationError as exc:
        raise EnvkitError(f"not a valid PEP 751 lock: {exc}", where=where, fix=FIX_CORRUPT)


def envkit_targets(data: dict) -> dict[str, dict]:
    targets = ((data.get("tool") or {}).get("envkit") or {}).get("targets") or {}
    return {k: v for k, v in targets.items() if isinstance(v, dict)}


def machine_target(data: dict, facts, where: str) -> tuple[str, dict]:
    """(target name, its [tool.envkit.targets] table) for this machine, or one line saying why
    the lock has none, naming the targets it has."""
    from envkit.checks import gates

    targets = envkit_targets(data)
    platform = platform_of_machine(facts.os.system or "", facts.python.machine or "")
    mine = {n: t for n, t in targets.items() if t.get("platform") == platform}
    has = ", ".join(targets) or "none"
    here = f"{platform or (facts.os.system or '?') + ' ' + (facts.python.machine or '?')}"
    fix = "lock this machine too: envkit lock --target this --target ... (the targets you need)"
    if not mine:
        raise EnvkitError(f"the lock has no entry for this machine ({here}); it has {has}", where=where, fix=fix)
    if platform == "macos-arm64":
        return next(iter(mine.items()))
    cuda = {n: t for n, t in mine.items() if t.get("device") == "cuda"}
    cpu = {n: t for n, t in mine.items() if t.get("device") == "cpu"}
    if facts.gpus:
        driver = gates.V(facts.gpus[0].driver)
        runs = {n: t for n, t in cuda.items() if driver is None or not t.get("min-driver") or gates.V(t["min-driver"]) <= driver}
        if runs:
            return max(runs.items(), key=lambda kv: int(str(kv[1].get("build", "cu0"))[2:] or 0))
        if cuda:
            need = ", ".join(f"{n} needs driver {t.get('min-driver')}+" for n, t in cuda.items())
            raise EnvkitError(f"the lock has no CUDA build this machine's driver runs ({need}; this one is {facts.gpus[0].driver}); "
                              f"it has {has}", where=where,
                              fix="update the NVIDIA driver, or lock an older build: envkit lock --target linux-x86_64-cu126 ...")
    if cpu:
        return next(iter(cpu.items()))
    raise EnvkitError(f"the lock has no entry for this machine ({here}, " + ("NVIDIA GPU" if facts.gpus else "no NVIDIA GPU")
                      + f"); it has {has}", where=where, fix=fix)


def marker_environment(python_version: str, implementation: str, machine: str) -> dict[str, str]:
    """The PEP 508 environment of the interpreter installed into (this machine's OS, its Python)."""
    from packaging.markers import default_environment

    env = dict(default_environment())
    env.update(python_full_version=python_version, python_version=".".join(python_version.split(".")[:2]),
               implementation_version=python_version, implementation_name=implementation.lower(),
               platform_python_implementation={"cpython": "CPython", "pypy": "PyPy"}.get(implementation.lower(), implementation))
    if machine:
        env["platform_machine"] = machine
    return env


def select(pylock, data: dict, facts, where: str, python_version: str, implementation: str, machine: str,
           tags: list[str]) -> Selection:
    """This machine's packages and wheels, exactly as the lock names them."""
    from packaging.pylock import PylockSelectError
    from packaging.tags import parse_tag

    env = marker_environment(python_version, implementation, machine)
    if pylock.requires_python and not pylock.requires_python.contains(python_version, prereleases=True):
        raise EnvkitError(f"the lock is for Python {pylock.requires_python} and this environment runs Python {python_version}",
                          where=where, fix="install with that Python (--python), or lock this one: envkit lock --python "
                                           + ".".join(python_version.split(".")[:2]))
    if envkit_targets(data):
        name, info = machine_target(data, facts, where)
        group = info.get("group")
        groups = [group] if group else []
        device = {"cuda": "cuda", "mps": "mps"}.get(info.get("device", ""), "cpu")
        if device == "cpu" and "+cpu" in str(info.get("torch", "")):
            device = "cpu-only"
    else:
        name, group, groups, device = "default groups", None, None, "cpu"
    tag_objs = [t for s in tags for t in parse_tag(s)]
    try:
        items = list(pylock.select(environment=env, tags=tag_objs, dependency_groups=groups))
    except PylockSelectError as exc:
        targets = ", ".join(envkit_targets(data)) or "its default groups"
        raise EnvkitError(f"the lock has nothing that installs here ({exc}); it has {targets}", where=where,
                          fix="lock this machine too: envkit lock --target this --target ...")
    for p, dist in items:
        if not hasattr(dist, "filename") or dist.__class__.__name__ != "PackageWheel":
            raise EnvkitError(f"{p.name} is locked as a {dist.__class__.__name__.removeprefix('Package').lower()}, "
                              "not a wheel: envkit installs wheels only", where=where, fix="lock it again with `envkit lock`")
        if not (dist.hashes or {}).get("sha256"):
            raise EnvkitError(f"{dist.filename} has no sha256 in the lock", where=where, fix="lock it again with `envkit lock`")
    if not any(str(p.name) == "torch" for p, _ in items):
        raise EnvkitError(f"the lock selects no torch for this machine (target {name})", where=where,
                          fix="lock this machine too: envkit lock --target this --target ...")
    return Selection(target=name, group=group, device=device, items=items)
