"""`envkit setup --lock pylock.toml`: install this machine's part of a PEP 751 lock exactly. Every
wheel is downloaded into envkit's cache and checked against the lock's size and sha256 before
anything is installed; pip then installs those files with --no-deps --no-index (nothing is
resolved anew), with rollback. `envkit check --lock pylock.toml` reports drift from it."""

from __future__ import annotations

import sys
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.install.setup.options import venv_python_of
from envkit.install.lock.select import Selection, read, select
from envkit.redact import strip_userinfo


def _interpreter(facts, python: str | None, replay: bool) -> tuple[str, str, str, list[str]]:
    """(version, implementation, machine, tags) of the interpreter installed into: probed, or
    computed from a replayed machine's facts."""
    from envkit.install.act import interp

    if replay or not python:
        py = facts.python
        version = py.version or "3.11.0"
        tags = interp.computed_tags(version, py.implementation or "cpython", facts.os.system or "Linux", py.machine or "x86_64",
                                    macos=facts.os.version)
        return version, py.implementation or "cpython", py.machine or "", tags
    t = interp.probe(python, dists=False)
    return t.version, t.implementation, t.machine, t.tags


def select_here(lock_path: Path, facts, python: str | None, replay: bool = False) -> Selection:
    pylock, data = read(lock_path)
    version, impl, machine, tags = _interpreter(facts, python, replay)
    return select(pylock, data, facts, str(lock_path), version, impl, machine, tags)


def fetch_verified(sel: Selection, say) -> list[Path]:
    """Every selected wheel in envkit's cache, its size and sha256 as the lock says; the first
    that differs stops everything, naming the file."""
    from envkit.install.act.execute import fetch_wheel, sha256_file

    paths = []
    for pkg, wheel in sel.items:
        want = wheel.hashes["sha256"]
        url = with_credentials(wheel.url) if wheel.url else Path(wheel.path).resolve().as_uri()
        for attempt in (1, 2):  # a stale file in the cache is fetched again once
            path = fetch_wheel(url, wheel.filename, None)
            size, digest = path.stat().st_size, sha256_file(path)
            problem = (f"size {size} bytes, the lock says {wheel.size}" if wheel.size is not None and size != wheel.size
                       else f"sha256 {digest}, the lock says {want}" if digest != want else None)
            if problem is None:
                break
            path.unlink()
            if attempt == 2:
                raise EnvkitError(f"the wheel {wheel.filename} downloaded from {strip_userinfo(url)} is not the file the lock "
                                  f"names ({problem}): nothing was installed", where=str(sel.target),
                                  fix="the index or a proxy changed the file: check it, or lock again with `envkit lock` if the change is trusted")
        paths.append(path)
    say(f"{len(paths)} wheels match the lock's sizes and sha256", err=True)
    return paths


def with_credentials(url: str) -> str:
    """The lock names files without credentials; where ENVKIT_INDEX_URL, PIP_INDEX_URL or
    UV_INDEX_URL holds a user and password for the same host, the download uses them (requests
    reads ~/.netrc otherwise). Never printed: messages pass through strip_userinfo."""
    import os
    from urllib.parse import urlsplit, urlunsplit

    target = urlsplit(url)
    for name in ("ENVKIT_INDEX_URL", "PIP_INDEX_URL", "UV_INDEX_URL"):
        value = urlsplit(os.environ.get(name, ""))
        if value.username and value.scheme == target.scheme and value.hostname == target.hostname \
                and value.port == target.port and not target.username:
            return urlunsplit(target._replace(netloc=value.netloc))
    return url


def install_from_pylock(lock_path: Path, facts, profile, venv: Path, base_python: str, dry_run: bool, yes: bool,
                        as_json: bool, root: Path, ui, replay: bool = False) -> bool:
    """Install this machine's part of the lock into the venv. True when the environment changed."""
    from envkit.install.act import interp
    from envkit.install.lock import record as lockfile
    from envkit.install.act.apply import install_with_rollback, leave_only_locked
    from envkit.install.act.plan import venv_command

    venv_python = venv_python_of(venv)
    create = not Path(venv_python).exists()
    sel = select_here(lock_path, facts, None if replay else (base_python if create else venv_python), replay)
    installed = {} if create or replay else {k: d["version"] for k, d in interp.probe(venv_python).dists.items()
                                             if not d.get("editable")}
    wanted = lockfile.Lock(platform={}, profile={}, source={}, env={},
                           packages=[{"name": n, "version": v} for n, v in sel.versions.items()])
    drift = lockfile.compare(wanted, installed)
    extras = sorted(drift["added"])
    install_cmd = [venv_python, "-m", "pip", "install", "--no-deps", "--no-index"]
    plan = {"from_lock": str(lock_path), "target": sel.target, "group": sel.group, "venv": str(venv), "create_venv": create,
            "profile": profile.name, "versions": sel.versions, "changes": drift["lines"],
            "nothing_to_do": not create and not drift["changed"],
            "wheels": [{"name": str(p.name), "url": strip_userinfo(w.url or w.path or ""), "size": w.size,
                        "sha256": w.hashes["sha256"]} for p, w in sel.items],
            "commands": ([" ".join(venv_command("pip", base_python, str(venv)))] if create else [])
            + [" ".join(install_cmd + ["<the locked wheels, checked>"])]
            + ([f"{venv_python} -m pip uninstall -y {' '.join(extras)}"] if extras else [])}
    say = ui.say
    if as_json:
        ui.show_json(plan)
    else:
        say(f"install from {lock_path}: target {sel.target}" + (f" (group {sel.group})" if sel.group else "")
            + f", {len(sel.items)} packages into {venv}" + (" (new venv)" if create else ""))
        for name, version in sel.versions.items():
            say(f"  {name} {version}")
        for line in drift["lines"]:
            say(f"  change: {line}")
        for c in plan["commands"]:
            say(f"  $ {c}")
    if plan["nothing_to_do"]:
        say(f"nothing to change: {venv} matches {lock_path}", err=as_json)
        return False
    if dry_run:
        return False
    ui.confirm(yes)
    paths = fetch_verified(sel, say)

    want = {k: v for k, v in sel.versions.items() if k in ("torch", "torchvision", "torchaudio")}
    install_with_rollback(venv, venv_python, base_python, "pip", create, install_cmd + [str(p) for p in paths], want,
                          sel.device, say, after=leave_only_locked(venv_python, extras, wanted))
    from envkit.install.setup.managed import write_state

    write_state(root, profile=profile.name, venv=str(venv), python=venv_python, lock=str(lock_path.resolve()),
                torch=sel.versions.get("torch"))
    if profile.obj is not None:
        from envkit.profiles.envscripts import write_env_scripts

        try:
            write_env_scripts(root, profile.obj, venv, False)
        except EnvkitError as exc:
            say(f"note: env scripts not rewritten: {exc.one_line()}", err=True)
    return True


def drift_report(path: Path, facts) -> dict:
    """`envkit check --lock pylock.toml`: the checked interpreter's packages against this
    machine's part of the lock."""
    import os

    from envkit.install.act import interp
    from envkit.install.lock import record as lockfile

    exe = getattr(facts.python, "executable", None) or sys.executable
    live = bool(exe and os.path.exists(exe))
    sel = select_here(Path(path), facts, exe if live else None, replay=not live)
    wanted = lockfile.Lock(platform={}, profile={}, source={}, env={},
                           packages=[{"name": n, "version": v} for n, v in sel.versions.items()])
    if live:
        installed = {k: d["version"] for k, d in interp.probe(exe).dists.items() if not d.get("editable")}
        report = lockfile.compare(wanted, installed)
    else:  # a replayed snapshot: only the packages it recorded can be compared
        have = {lockfile.canon(k): v for k, v in (facts.packages or {}).items() if v}
        wanted.packages = [p for p in wanted.packages if lockfile.canon(p["name"]) in have]
        report = lockfile.compare(wanted, have)
        report["partial"] = True
    report["platform"] = []
    report["target"] = sel.target
    report["group"] = sel.group
    return report
