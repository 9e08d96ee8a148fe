"""Drift: the packages an environment holds against a lock, for both formats. `envkit check --lock`
reports it; an install from a lock plans with it and ends by checking it is gone. What the
environment holds for the lock's project (project.py) is the project's own, not drift."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from envkit.install.act.interp import BOOTSTRAP, probe
from envkit.install.lock.machine import platform_differences, platform_of
from envkit.install.lock.project import installed_for
from envkit.install.lock.read import read
from envkit.install.lock.select import select_here
from envkit.install.lock.single import canon


def compare(want: dict[str, str], have: dict[str, str], project: dict | None = None) -> dict:
    """The lock's versions (`want`) against the installed ones, pip and its kin left out unless the
    lock holds them (torch requires setuptools: a lock has it, and then its version counts). What
    is installed for the lock's project (project.py: its dependencies and the extras installed as
    such) and not in the lock is the project's own, not drift: it is reported as "project". Pure."""
    own = {k: v for k, v in ((project or {}).get("packages") or {}).items()
           if k not in want and k in have and k not in BOOTSTRAP}
    have = {k: v for k, v in have.items() if (k not in BOOTSTRAP or k in want) and k not in own}
    added = {k: have[k] for k in sorted(set(have) - set(want))}
    removed = {k: want[k] for k in sorted(set(want) - set(have))}
    changed = {k: {"lock": want[k], "installed": have[k]} for k in sorted(set(want) & set(have)) if want[k] != have[k]}
    lines = [f"{k}: {v['lock']} in the lock, {v['installed']} installed" for k, v in changed.items()]
    lines += [f"{k} {v} is installed but not in the lock" for k, v in added.items()]
    lines += [f"{k} {v} is in the lock but not installed" for k, v in removed.items()]
    out = {"changed": bool(added or removed or changed), "lines": lines, "added": added, "removed": removed,
           "changed_versions": changed}
    if project is not None:
        out["project"] = {"name": project["name"], "extras": project["extras"], "packages": dict(sorted(own.items()))}
    return out


def installed(python: str, lock=None) -> tuple[dict[str, str], dict | None]:
    """(name -> version of what the interpreter holds, editable installs left out; what it holds
    for the lock's project, project.py, or None)."""
    found = probe(python)
    versions = {k: d["version"] for k, d in found.dists.items() if not d.get("editable")}
    project = lock.project if lock is not None else None
    if project is None and lock is not None:
        project = _editable_project(found.dists)
    return versions, (installed_for(project, found.dists, found.markers) if project else None)


def _editable_project(dists: dict[str, dict]) -> dict | None:
    """A lock written outside the project (no [tool.envkit.project]) checked against the project's
    environment: the project installed there in editable mode (`pip install -e '.[test]'`) and what
    it pulled in are outside the lock's scope, as they are for a lock that names its project. The
    extras are those its metadata declares; installed_for keeps the ones installed as such."""
    import re

    editable = sorted(n for n, d in dists.items() if d.get("editable"))
    if len(editable) != 1:  # none, or several: which one the lock belongs to is not ours to guess
        return None
    requires = dists[editable[0]].get("requires") or []
    extras = sorted({m for line in requires for m in re.findall(r"extra\s*==\s*[\"']([^\"']+)[\"']", line)})
    return {"name": editable[0], "extras": extras}


def project_line(report: dict) -> str | None:
    """The one line that says what is installed for the project beside the lock."""
    p = report.get("project") or {}
    if not p.get("packages"):
        return None
    name = p["name"] + (f"[{','.join(p['extras'])}]" if p.get("extras") else "")
    return f"{len(p['packages'])} packages installed for the project {name} are not in the lock (not drift)"


def drift_report(path: Path, facts, say=None) -> dict:
    """The interpreter `envkit check` examines (its whole installed set) against the lock: a lock
    of one machine as a whole (and how this machine differs from that one), a lock of many
    machines as its part for this one. A replayed snapshot compares the packages it recorded."""
    lock = read(Path(path))
    exe = getattr(facts.python, "executable", None) or sys.executable
    live = bool(exe and os.path.exists(exe))
    sel = None if lock.single else select_here(lock, facts, exe if live else None, replay=not live)
    want = lock.versions if sel is None else sel.versions
    if live:
        have, project = installed(exe, lock)
        report = compare(want, have, project)
    else:
        recorded = {canon(k): v for k, v in (facts.packages or {}).items()}
        report = compare({k: v for k, v in want.items() if k in recorded}, {k: v for k, v in recorded.items() if v})
        report["partial"] = True
    report["platform"] = platform_differences(lock.platform, platform_of(facts)) if sel is None else []
    if sel is not None:
        report["target"], report["group"] = sel.target, sel.group
    if lock.note and say:
        say(lock.note)
    return report
