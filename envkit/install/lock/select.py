"""This machine's part of a lock: which target (and so which dependency group) the machine is,
then `packaging.pylock.Pylock.select` for the interpreter it installs into. Nothing is resolved:
the lock says every file. A lock of one machine (pylock.machine.toml) is that machine's set as a whole.

A lock written by envkit says its targets in [tool.envkit.targets]; a lock written by another
tool (uv, pdm) is selected with its default groups."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from envkit.checks import gates
from envkit.errors import EnvkitError
from envkit.install.act import interp
from envkit.install.lock.machine import nvidia_gpus
from envkit.install.lock.model import Pick
from envkit.install.lock.read import LockFile, require_pylock
from envkit.install.lock.single import target_of
from envkit.install.lock.targets import platform_of_machine

if TYPE_CHECKING:
    from packaging.markers import Environment
    from envkit.install.act.execute import VerifyDevice


@dataclass
class Selection:
    target: str  # the lock's target name ("linux-x86_64-cpu"), or "default groups" for a foreign lock
    group: str | None
    device: VerifyDevice
    picks: list[Pick] = field(default_factory=list)

    @property
    def versions(self) -> dict[str, str]:
        return {p.name: p.version for p in self.picks}


def machine_target(targets: dict[str, dict], facts, where: str) -> tuple[str, dict]:
    """(target name, its [tool.envkit.targets] table) for this machine, or one line saying why
    the lock has none, naming the targets it has."""
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

    nvidia = nvidia_gpus(facts)
    if nvidia:
        driver = gates.V(nvidia[0].driver)
        runs = {n: t for n, t in cuda.items() if driver is None or not t.get("min-driver") or gates.known(t["min-driver"]) <= driver}
        if runs:
            return max(runs.items(), key=lambda kv: int(str(kv[1].get("build", "cu0"))[2:] or 0))
        if cuda:
            need = ", ".join(f"{n} needs driver {t.get('min-driver')}+" for n, t in cuda.items())
            raise EnvkitError(f"the lock has no CUDA build this machine's driver runs ({need}; this one is {nvidia[0].driver}); "
                              f"it has {has}", where=where,
                              fix="update the NVIDIA driver, or lock an older build: envkit lock --target linux-x86_64-cu126 ...")
    if cpu:
        return next(iter(cpu.items()))
    raise EnvkitError(f"the lock has no entry for this machine ({here}, " + ("NVIDIA GPU" if nvidia else "no NVIDIA GPU")
                      + f"); it has {has}", where=where, fix=fix)


def marker_environment(python_version: str, implementation: str, machine: str) -> Environment:
    """The PEP 508 environment of the interpreter installed into (this machine's OS, its Python)."""
    from packaging.markers import default_environment

    env = default_environment()  # a new dict at each call
    env.update(python_full_version=python_version, python_version=".".join(python_version.split(".")[:2]),
               implementation_version=python_version, implementation_name=implementation.lower(),
               platform_python_implementation={"cpython": "CPython", "pypy": "PyPy"}.get(implementation.lower(), implementation))
    if machine:
        env["platform_machine"] = machine
    return env


def select(lock: LockFile, facts, python_version: str, implementation: str, machine: str, tags: list[str]) -> Selection:
    """This machine's packages and wheels in a lock of many machines, exactly as the lock names them."""
    from packaging.pylock import PackageWheel, PylockSelectError
    from packaging.tags import parse_tag

    require_pylock(str(lock.path))
    where, pylock = str(lock.path), lock.pylock()
    env = marker_environment(python_version, implementation, machine)
    if pylock.requires_python and not pylock.requires_python.contains(python_version, prereleases=True):
        raise EnvkitError(f"the lock is for Python {pylock.requires_python} and this environment runs Python {python_version}",
                          where=where, fix="install with that Python (--python), or lock this one: envkit lock --python "
                                           + ".".join(python_version.split(".")[:2]))
    if lock.targets:
        name, info = machine_target(lock.targets, facts, where)
        group = info.get("group")
        groups = [group] if group else []
        said = info.get("device")
        device: VerifyDevice = said if said in ("cuda", "mps") else "cpu"
        if device == "cpu" and "+cpu" in str(info.get("torch", "")):
            device = "cpu-only"
    else:
        name, group, groups, device = "default groups", None, None, "cpu"
    tag_objs = [t for s in tags for t in parse_tag(s)]
    try:
        items = list(pylock.select(environment=env, tags=tag_objs, dependency_groups=groups))
    except PylockSelectError as exc:
        targets = ", ".join(lock.targets) or "its default groups"
        raise EnvkitError(f"the lock has nothing that installs here ({exc}); it has {targets}", where=where,
                          fix="lock this machine too: envkit lock --target this --target ...")
    picks = []
    for p, dist in items:
        if not isinstance(dist, PackageWheel):
            raise EnvkitError(f"{p.name} is locked as a {dist.__class__.__name__.removeprefix('Package').lower()}, "
                              "not a wheel: envkit installs wheels only", where=where, fix="lock it again with `envkit lock`")
        if not (dist.hashes or {}).get("sha256"):
            raise EnvkitError(f"{dist.filename} has no sha256 in the lock", where=where, fix="lock it again with `envkit lock`")
        picks.append(Pick(name=str(p.name), version=str(p.version), sha256=dist.hashes["sha256"], url=dist.url,
                          path=dist.path, size=dist.size, filename=dist.filename, index=p.index))
    if not any(p.name == "torch" for p in picks):
        raise EnvkitError(f"the lock selects no torch for this machine (target {name})", where=where,
                          fix="lock this machine too: envkit lock --target this --target ...")
    return Selection(target=name, group=group, device=device, picks=picks)


def select_single(lock: LockFile, device: VerifyDevice) -> Selection:
    """A lock of one machine: all of it (its platform was compared with this machine's first).
    The verification expects a CPU-only build where the lock holds one (+cpu)."""
    picks = lock.picks()
    torch = next((p.version for p in picks if p.name == "torch"), "")
    if lock.platform.get("backend") == "cpu" and "+cpu" in torch:
        device = "cpu-only"
    return Selection(target=next(iter(lock.targets), None) or target_of(lock.platform)[0], group=None, device=device,
                     picks=picks)


def _interpreter(facts, python: str | None, replay: bool) -> tuple[str, str, str, list[str]]:
    """(version, implementation, machine, tags) of the interpreter installed into: probed, or
    computed from a replayed machine's facts."""
    if replay or not python:
        py = facts.python
        version = py.version or "3.11.0"
        tags = interp.computed_tags(version, py.implementation or "cpython", facts.os.system or "Linux", py.machine or "x86_64",
                                    macos=facts.os.version)
        return version, py.implementation or "cpython", py.machine or "", tags
    found = interp.probe(python, dists=False)
    return found.version, found.implementation, found.machine, found.tags


def select_here(lock: LockFile, facts, python: str | None, replay: bool = False) -> Selection:
    """A lock of many machines: this machine's part, for the interpreter `python` (None, or a
    replayed machine: the facts' Python)."""
    version, impl, machine, tags = _interpreter(facts, python, replay)
    return select(lock, facts, version, impl, machine, tags)
