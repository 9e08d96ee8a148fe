"""Drift: the packages an environment holds against a lock, for both formats. `envkit check --lock`
reports it; an install from a lock plans with it and ends by checking it is gone."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from envkit.install.act.interp import BOOTSTRAP


def compare(want: dict[str, str], have: dict[str, str]) -> dict:
    """The lock's versions (`want`) against the installed ones, pip and its kin left out unless the
    lock holds them (torch requires setuptools: a lock has it, and then its version counts). Pure."""
    have = {k: v for k, v in have.items() if k not in BOOTSTRAP or k in want}
    added = {k: have[k] for k in sorted(set(have) - set(want))}
    removed = {k: want[k] for k in sorted(set(want) - set(have))}
    changed = {k: {"lock": want[k], "installed": have[k]} for k in sorted(set(want) & set(have)) if want[k] != have[k]}
    lines = [f"{k}: {v['lock']} in the lock, {v['installed']} installed" for k, v in changed.items()]
    lines += [f"{k} {v} is installed but not in the lock" for k, v in added.items()]
    lines += [f"{k} {v} is in the lock but not installed" for k, v in removed.items()]
    return {"changed": bool(added or removed or changed), "lines": lines, "added": added, "removed": removed,
            "changed_versions": changed}


def installed_versions(python: str) -> dict[str, str]:
    from envkit.install.act.interp import probe

    return {k: d["version"] for k, d in probe(python).dists.items() if not d.get("editable")}


def drift_report(path: Path, facts, say=None) -> dict:
    """The interpreter `envkit check` examines (its whole installed set) against the lock: a lock
    of one machine as a whole (and how this machine differs from that one), a lock of many
    machines as its part for this one. A replayed snapshot compares the packages it recorded."""
    from envkit.install.lock.machine import platform_differences, platform_of
    from envkit.install.lock.read import read
    from envkit.install.lock.select import select_here
    from envkit.install.lock.single import canon

    lock = read(Path(path))
    exe = getattr(facts.python, "executable", None) or sys.executable
    live = bool(exe and os.path.exists(exe))
    sel = None if lock.single else select_here(lock, facts, exe if live else None, replay=not live)
    want = lock.versions if sel is None else sel.versions
    if live:
        report = compare(want, installed_versions(exe))
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
