"""The targets' closures as one PEP 751 pylock.toml.

Every [[packages]] entry has a marker, and the markers of entries with the same name are
disjoint: each target's marker is its platform (sys_platform, platform_machine) and, where a
platform has several builds in the lock (CPU and CUDA on Linux x86_64), a dependency-group
condition. PEP 751 has default groups but no default extras, so the builds are groups named after
them (`cpu`, `cu130`): a platform's first CPU build (else its first build) is what an installer
gets with no group named; any other is asked for by name (`--group cu130`), and wins over the
default even when the default group is active too. Entries that every target of a platform
shares (the same version and index) are one entry with one wheel per platform.

[tool.envkit] is informational (PEP 751 requires installers to ignore it): envkit's version, the
request, and per target its platform, build, group, profile, minimum driver and how it was
resolved; `envkit setup --lock` reads it to pick the group for the machine it runs on."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import cast

from envkit.install.lock import toml
from envkit.install.lock.model import TargetLock
from envkit.install.lock.targets import PROFILE_OF_DEVICE, Target, min_driver
from envkit.redact import redact, strip_userinfo


@dataclass(frozen=True)
class Grouping:
    """Which builds of each platform are groups, and the marker of each target. Pure."""

    builds: dict[str, list[str]]  # platform -> builds, the default first

    @classmethod
    def of(cls, targets: list[Target]) -> "Grouping":
        builds: dict[str, list[str]] = {}
        for t in targets:
            builds.setdefault(t.platform, [])
            if t.build not in builds[t.platform]:
                builds[t.platform].append(t.build)
        for names in builds.values():
            if "cpu" in names:  # the CPU build is what a box without an accelerator gets: the default
                names.remove("cpu")
                names.insert(0, "cpu")
        return cls(builds)

    def grouped(self, platform: str) -> bool:
        return len(self.builds[platform]) > 1

    def group(self, t: Target) -> str | None:
        return t.build if self.grouped(t.platform) else None

    @property
    def groups(self) -> list[str]:
        return list(dict.fromkeys(b for plat, names in self.builds.items() if len(names) > 1 for b in names))

    @property
    def default_groups(self) -> list[str]:
        return list(dict.fromkeys(names[0] for names in self.builds.values() if len(names) > 1))

    def condition(self, t: Target) -> str | None:
        """The dependency-group part of a target's marker: the default build holds unless another
        build of its platform is asked for; another build holds when asked for and no build listed
        before it is."""
        names = self.builds[t.platform]
        if len(names) == 1:
            return None
        others = names[1:]
        if t.build == names[0]:
            return " and ".join(f"'{b}' not in dependency_groups" for b in others)
        before = others[:others.index(t.build)]
        return " and ".join([f"'{t.build}' in dependency_groups"] + [f"'{b}' not in dependency_groups" for b in before])

    def marker(self, t: Target) -> str:
        cond = self.condition(t)
        return t.platform_marker() + (f" and {cond}" if cond else "")

    def marker_for(self, targets: list[Target], all_targets: list[Target]) -> str | None:
        """The marker of an entry that these targets share: a whole platform by its platform
        marker alone (an entry every target shares still names the platforms: an installer
        that ignores `environments` installs nothing on another machine)."""
        clauses = []
        for plat in dict.fromkeys(t.platform for t in targets):
            mine = [t for t in targets if t.platform == plat]
            every = [b for b in self.builds[plat]]
            if sorted(t.build for t in mine) == sorted(every):
                clauses.append(mine[0].platform_marker())
            else:
                clauses += [self.marker(t) for t in mine]
        return clauses[0] if len(clauses) == 1 else " or ".join(f"({c})" for c in clauses)


def build_pylock(locks: list[TargetLock], *, python: str, request: str, channel: str, envkit_version: str,
                 rest_indexes: list[str], project: dict | None = None) -> dict:
    """The pylock as a TOML-ready dict (validated by packaging.pylock before it is written).
    `project`: the project beside the lock (lock/project.py), in [tool.envkit.project]. `channel`: the request's
    (stable, nightly, test), or what a converted lock's [source] says, a string kept as it is."""
    targets = [tl.target for tl in locks]
    grouping = Grouping.of(targets)
    entries: dict[tuple, dict] = {}
    for tl in locks:
        for name in sorted(tl.packages):
            p = tl.packages[name]
            key = (p.name, p.version, strip_userinfo(p.index))
            e = entries.setdefault(key, {"targets": [], "wheels": {}})
            e["targets"].append(tl.target)
            e["wheels"].setdefault(p.wheel.url, p.wheel)
    packages = []
    for (name, version, idx), e in sorted(entries.items(), key=lambda kv: (kv[0][0], kv[1]["targets"][0].name)):
        pkg = {"name": name, "version": version}
        marker = grouping.marker_for(e["targets"], targets)
        if marker:
            pkg["marker"] = marker
        if idx:
            pkg["index"] = idx
        pkg["wheels"] = [{"url": strip_userinfo(w.url), **({"size": w.size} if w.size is not None else {}),
                          "hashes": {"sha256": w.sha256}} for w in e["wheels"].values()]
        packages.append(pkg)
    doc = {"lock-version": "1.0",
           "environments": list(dict.fromkeys(t.platform_marker() for t in targets)),
           "requires-python": f"=={python}.*"}
    if grouping.groups:
        doc["dependency-groups"] = grouping.groups
        doc["default-groups"] = grouping.default_groups
    doc["created-by"] = "envkit"
    doc["packages"] = packages
    tool = cast(dict, redact({  # redact keeps the shape: a dict stays a dict
        "envkit": envkit_version, "torch": request, "channel": channel, "python": python,
        "torch-version": locks[0].packages["torch"].version.split("+")[0] if locks else "",
        "indexes": [strip_userinfo(i) for i in rest_indexes],
        "targets": {tl.target.name: _target_info(tl, grouping) for tl in locks}}))
    if project:
        tool["project"] = {"name": project["name"], "extras": list(project["extras"])}
    doc["tool"] = {"envkit": tool}
    return doc


def _target_info(tl: TargetLock, grouping: Grouping) -> dict:
    t = tl.target
    info = {"platform": t.platform, "build": t.build, "device": t.device, "marker": grouping.marker(t)}
    group = grouping.group(t)
    if group:
        info["group"] = group
    info["profile"] = PROFILE_OF_DEVICE.get(t.device, "conservative")
    driver = min_driver(t.build)
    if driver:
        info["min-driver"] = driver
    info["torch"] = tl.torch
    info["torch-index"] = strip_userinfo(tl.torch_index)
    if t.asked and t.asked != t.name:
        info["asked"] = t.asked
    info["resolved"] = tl.how
    return info


HEADER = ["pylock.toml (PEP 751), written by `envkit lock`: one lock for every target below.",
          "  envkit setup --lock pylock.toml              installs this machine's part (its build's group)",
          "  uv pip install -r pylock.toml [--group cu130]   pip install -r pylock.toml (pip 26.1+)"]


def write(path: Path, doc: dict) -> bool:
    """Atomically, by the one TOML writer; False (nothing touched) when the file already says the same."""
    return toml.write(path, doc, HEADER)
