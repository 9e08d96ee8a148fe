"""What setup leaves behind: the lock, the managed-environment state, the resolved profile and the
env scripts."""

from __future__ import annotations

import json
from pathlib import Path

from envkit import __version__
from envkit.errors import EnvkitError
from envkit.fsutil import atomic_write_text
from envkit.install.act import interp
from envkit.install.act.apply import Say
from envkit.install.lock import record, single
from envkit.install.lock.machine import platform_of
from envkit.install.lock.project import read_project
from envkit.install.lock.read import LockFile, read
from envkit.install.lock.single import canon
from envkit.install.setup.managed import write_state
from envkit.profiles.envscripts import write_env_scripts
from envkit.redact import strip_userinfo


def write_outputs(root: Path, venv: Path, venv_python: str, profile, plan, facts, lock_path: Path, *, report,
                  cached: dict, say: Say, quiet_if_same: bool = False, known_hashes: dict | None = None) -> None:
    """pylock.machine.toml, .envkit/state.json, .envkit/profile.json and the env scripts, each written
    atomically and only when its content changes."""
    python_here = interp.probe(venv_python)
    previous = _previous(lock_path)
    lock = record.build(
        python_here,
        platform=platform_of(facts, device=plan.choice.device, backend=plan.choice.backend),
        profile={"name": profile.name, "sha256": record.profile_hash(profile.resolved)},
        source={"torch": plan.request, "channel": plan.choice.channel, "installer": plan.installer,
                "index_urls": [plan.index_url] if plan.index_url else []},
        env=profile.env, report={**{canon(k): v for k, v in (known_hashes or {}).items() if v.get("sha256")},
                                 **record.hashes_from_report(report)},
        previous=previous, cached=cached,
        envkit_version=__version__, project=read_project(lock_path.absolute().parent))
    if record.write(lock_path, lock):
        say(lock_news(lock_path, previous), err=True)
        if previous is not None and previous.path.absolute() != lock_path.absolute():
            say(f"note: {lock_path} is the lock's name now (PEP 751's, so pip and uv read it); {previous.path} is left "
                "as it was and no longer updated: remove it once nothing reads it", err=True)
    state = {"profile": profile.name, "venv": str(venv), "python": venv_python, "torch": python_here.installed.get("torch"),
             "index_url": strip_userinfo(plan.index_url) if plan.index_url else None, "lock": str(lock_path.resolve())}
    state_file = root / "state.json"
    old = json.loads(state_file.read_text()) if state_file.is_file() else {}
    if any(old.get(k) != v for k, v in state.items()):
        write_state(root, **state)
    text = json.dumps(profile.resolved, indent=2, default=str) + "\n"
    pfile = root / "profile.json"
    if not pfile.is_file() or pfile.read_text() != text:
        atomic_write_text(pfile, text)
    if profile.obj is not None and not (quiet_if_same and (root / "activate").exists()):
        try:
            written = write_env_scripts(root, profile.obj, venv, False)
        except EnvkitError as exc:  # a script the user edited is left alone
            say(f"note: env scripts not rewritten: {exc.one_line()}", err=True)
            return
        if written:
            say("wrote " + ", ".join(str(p) for p in written), err=True)


def _previous(lock_path: Path) -> LockFile | None:
    """The lock this setup rewrites, for the wheels of versions it leaves alone: the file itself, or,
    where the default pylock.machine.toml is not there yet, the envkit.lock of before (either
    format: the new lock is written in the current one)."""
    path = lock_path if lock_path.is_file() else None
    if path is None and lock_path.name == single.NAME:
        path = single.default_path(lock_path.parent)
    try:
        return read(path) if path is not None else None
    except EnvkitError:
        return None


def lock_news(path: Path, previous) -> str:
    """What a rewritten lock changed, and why: setup locks everything the venv holds, so a package
    installed by hand since the last setup (`pip install -e '.[test]'`) enters the lock, and a
    second setup says so rather than a bare "wrote pylock.machine.toml"."""
    if previous is None:
        return f"wrote {path}"
    before, after = previous.versions, read(path).versions
    added = [f"{n} {after[n]}" for n in sorted(set(after) - set(before))]
    removed = [f"{n} {before[n]}" for n in sorted(set(before) - set(after))]
    changed = [f"{n} {before[n]} -> {after[n]}" for n in sorted(set(before) & set(after)) if before[n] != after[n]]
    parts = [f"{len(group)} {what}: {_first(group)}" for group, what in
             ((added, "added"), (removed, "removed"), (changed, "changed")) if group]
    if previous.path.absolute() != path.absolute():  # the first pylock.machine.toml, beside an envkit.lock
        same = f"the same {len(after)} versions" if not parts else "; ".join(parts)
        return f"wrote {path}, against {previous.path}: {same}"
    if not parts:
        return f"updated {path}: the same {len(after)} versions, recorded anew (wheel hashes, the profile or the platform)"
    return f"updated {path} to what the venv holds now: " + "; ".join(parts)


def _first(items: list[str], shown: int = 5) -> str:
    return ", ".join(items[:shown]) + (f" and {len(items) - shown} more" if len(items) > shown else "")
