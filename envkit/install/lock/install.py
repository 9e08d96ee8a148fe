"""`envkit setup --lock FILE`: install a lock exactly, the same way for both formats. A lock of one
machine (pylock.machine.toml, or an envkit.lock of before) must have been made on a machine like
this one; of a pylock.toml, this machine's part is taken (select.py). Every wheel is downloaded into envkit's cache and checked against the
lock's size and sha256 before anything is installed (fetch.py); pip then installs those files
with --no-deps (nothing is resolved anew) and --require-hashes, with rollback, and the step after
checks that every locked package is installed at its version. What the lock does not name stays
(and is named) unless --sync is given, which removes it (the project's own packages stay)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Callable

from envkit.errors import EnvkitError
from envkit.install.act import execute
from envkit.install.act.apply import install_with_rollback
from envkit.install.act.execute import wheel_cache
from envkit.install.act.plan import index_args, venv_command
from envkit.install.lock.credentials import with_credentials
from envkit.install.lock.drift import compare, installed, project_line
from envkit.install.lock.fetch import fetch_verified
from envkit.install.lock.machine import machine_device, platform_differences, platform_of
from envkit.install.lock.read import LockFile
from envkit.install.lock.select import select_here, select_single
from envkit.install.lock.torch_pick import TORCH_FAMILY
from envkit.install.setup.managed import write_state
from envkit.install.setup.options import venv_python_of
from envkit.install.setup.venv_lock import hold_venv
from envkit.profiles.envscripts import write_env_scripts
from envkit.redact import strip_userinfo



def selection_here(lock: LockFile, facts, python: str | None, replay: bool):
    """What this machine installs of the lock: a lock of one machine whole, once its platform is
    this one's (else one line naming the differences); of a lock of many, this machine's part."""
    if not lock.single:
        return select_here(lock, facts, python, replay)
    device = machine_device(facts)
    diffs = platform_differences(lock.platform, platform_of(facts, device=device))
    if diffs:
        raise EnvkitError(f"the lock was made on another platform: {'; '.join(diffs)}", where=str(lock.path),
                          fix="run `envkit setup` without --lock on this machine to make its own lock")
    return select_single(lock, device)


def install_command(venv_python: str, sel, lock: LockFile) -> tuple[list[str], bool]:
    """pip's command (the requirements file follows it) and whether every package has a sha256.
    Packages pinned by version only are found on the lock's indexes (pip's own sources when it
    names none); without them pip reads no index at all."""
    hashed = all(p.sha256 for p in sel.picks)
    # --no-compile where torch is installed: the verification after the install writes the bytecode its
    # import needs (act/plan.py, BYTECODE); a lock without torch is verified by pip alone, which compiles
    no_compile = ["--no-compile"] if any(p.name == "torch" for p in sel.picks) else []
    cmd = [venv_python, "-m", "pip", "install", *no_compile, "--no-deps"] + (["--require-hashes"] if hashed else [])
    if all(p.has_file for p in sel.picks):
        # --isolated: pip's own find-links (PIP_FIND_LINKS, the user's pip.conf) would offer other files of
        # a locked version beside the checked ones, and pip may take one (a local +cpu build of the same
        # torch, whose hash then fails); only the checked folder is looked in
        return [*cmd[:3], "--isolated", *cmd[3:], "--no-index"], hashed
    for url in lock.index_urls:
        cmd += index_args(with_credentials(url))
    if any(p.cached for p in sel.picks) and wheel_cache().is_dir():
        cmd += ["--find-links", str(wheel_cache())]
    return cmd, hashed


def requirements(sel, paths: list[Path], hashed: bool) -> str:
    """Every package pinned by name and version, each with its sha256 where all have one. With hashes,
    the checked files are found by pip in a folder of their own (--find-links, see `checked_folder`),
    not named by path: pip records a file named by path as a direct URL (PEP 610), and `pip freeze`
    of the rebuilt venv then shows `torch @ file:///...envkit cache...` where the venv the lock was
    taken from shows `torch==2.6.0+cpu`. Without hashes, a name could be satisfied from an index by
    another file, so the checked files are named by path."""
    files = iter(paths)
    lines = []
    for p in sel.picks:
        line = str(next(files)) if p.has_file and not hashed else f"{p.name}=={p.version}"
        lines.append(line + (f" --hash=sha256:{p.sha256}" if hashed else ""))
    return "\n".join(lines) + "\n"


def checked_folder(paths: list[Path], folder: Path) -> list[str]:
    """pip's options to find exactly the checked wheels: a folder of links to them and nothing else
    (the cache may hold other builds of the same version)."""
    if not paths:
        return []
    folder.mkdir()
    for path in paths:
        (folder / path.name).symlink_to(path.resolve())
    return ["--find-links", str(folder)]


def install_from_lock(lock: LockFile, facts, profile, venv: Path, base_python: str, dry_run: bool, yes: bool,
                      as_json: bool, root: Path, ui, replay: bool = False, sync: bool = False) -> bool:
    """Install this machine's part of the lock into the venv. True when the environment changed.
    `sync`: also remove what the lock does not name (what is installed for its project stays);
    without it, those packages are kept and named."""
    venv_python = venv_python_of(venv)
    create = not Path(venv_python).exists()
    sel = selection_here(lock, facts, None if replay else (base_python if create else venv_python), replay)
    say = ui.say
    if lock.note:
        say(lock.note, err=True)
    have, project = ({}, None) if create or replay else installed(venv_python, lock)
    drift = compare(sel.versions, have, project)  # what is installed for the lock's project stays
    kept = sorted(drift["added"]) if not sync else []
    extras = sorted(drift["added"]) if sync else []
    if kept:  # not the lock's, not removed without --sync: not a change either
        drift = {**drift, "lines": [x for x in drift["lines"] if not x.endswith("is installed but not in the lock")],
                 "changed": bool(drift["removed"] or drift["changed_versions"])}
    cmd, hashed = install_command(venv_python, sel, lock)
    plan = {"from_lock": str(lock.path), "target": sel.target, "group": sel.group, "venv": str(venv), "create_venv": create,
            "profile": profile.name, "versions": sel.versions, "packages": len(sel.picks), "hashes_enforced": hashed,
            "changes": drift["lines"], "nothing_to_do": not create and not drift["changed"],
            "project": drift.get("project"), "kept": kept, "sync": sync,
            "wheels": [{"name": p.name, "url": strip_userinfo(p.url or p.path or ""), "size": p.size, "sha256": p.sha256}
                       for p in sel.picks if p.has_file],
            "commands": ([" ".join(venv_command("pip", base_python, str(venv)))] if create else [])
            + [" ".join(cmd + ["-r", "<the locked wheels, checked>"])]
            + ([f"{venv_python} -m pip uninstall -y {' '.join(extras)}"] if extras else [])}
    if as_json:
        ui.show_json(plan)
    else:
        say(f"install from {lock.path}: target {sel.target}" + (f" (group {sel.group})" if sel.group else "")
            + f", {len(sel.picks)} packages into {venv}" + (" (new venv)" if create else "")
            + (", sha256 enforced" if hashed else ", no hashes (some packages lack one)"))
        for name, version in sel.versions.items():
            say(f"  {name} {version}")
        if create:  # every package is "in the lock but not installed": one line, not one per package
            say(f"  change: a new venv, all {len(sel.versions)} packages of the lock to install")
        for line in [] if create else drift["lines"]:
            say(f"  change: {line}")
        if project_line(drift):
            say(f"  keep: {project_line(drift)}")
        if kept:
            say(f"  keep: {len(kept)} package(s) the lock does not name: {', '.join(kept[:8])}{' ...' if len(kept) > 8 else ''} "
                "(--sync removes them)")
        for c in plan["commands"]:
            say(f"  $ {c}")
    if plan["nothing_to_do"]:
        say(f"nothing to change: {venv} matches {lock.path}", err=as_json)
        return False
    if dry_run:
        return False
    ui.confirm(yes)

    held = hold_venv(venv, create)  # noqa: F841 - one setup at a time per venv, until this returns
    paths = fetch_verified([p for p in sel.picks if p.has_file], lock.index_urls, sel.target, say)
    want = {k: v for k, v in sel.versions.items() if k in TORCH_FAMILY}
    with tempfile.TemporaryDirectory(prefix="envkit-lock-") as tmp:
        req_file = Path(tmp) / "requirements.txt"
        req_file.write_text(requirements(sel, paths, hashed))
        links = checked_folder(paths, Path(tmp) / "wheels") if hashed else []
        install_with_rollback(venv, venv_python, base_python, "pip", create, cmd + links + ["-r", str(req_file)], want, sel.device,
                              say, after=leave_only_locked(venv_python, extras, sel.versions, lock, sync=sync), torch="torch" in sel.versions)
    _write_state(root, profile, venv, venv_python, lock, sel.versions.get("torch"), say)
    return True


def leave_only_locked(venv_python: str, extras: list[str], locked: dict[str, str], lock: LockFile | None = None,
                      sync: bool = True) -> Callable[[], None]:
    """The step after the install: with `sync`, remove what the lock does not hold (what is
    installed for the lock's project stays); then check that every locked package is installed at
    its version (and, with `sync`, nothing else); a difference fails the install (rolled back)."""
    def after() -> None:
        if extras:
            execute.run_step([venv_python, "-m", "pip", "uninstall", "-y", *extras], "removing packages not in the lock")
        left = compare(locked, *installed(venv_python, lock))
        lines = left["lines"] if sync else [x for x in left["lines"] if not x.endswith("is installed but not in the lock")]
        if lines:
            raise execute.StepFailed("the environment still differs from the lock: " + "; ".join(lines))

    return after


def _write_state(root: Path, profile, venv: Path, venv_python: str, lock: LockFile, torch: str | None, say) -> None:
    write_state(root, profile=profile.name, venv=str(venv), python=venv_python, lock=str(lock.path.resolve()), torch=torch)
    if profile.obj is not None:
        try:
            write_env_scripts(root, profile.obj, venv, False)
        except EnvkitError as exc:
            say(f"note: env scripts not rewritten: {exc.one_line()}", err=True)
