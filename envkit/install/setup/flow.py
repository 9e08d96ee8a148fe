"""`envkit setup` as one function: facts -> profile -> build and index (choice/variants.py) ->
versions read off the index (choice/resolve.py) -> plan (act/plan.py, shown before anything
happens) -> install + verify with rollback (act/apply.py) -> lock, state, env scripts
(outputs.py). With --lock and an existing lock, the lock is installed instead (lock/install.py).
The command (commands/setup.py) then runs the self-test and, with --tune, the tuner. All
validation happens before the first write: bad input changes nothing.

The caller passes a `ui` with say(text, err=False), show_plan(plan_dict, as_json), show_json(obj),
confirm(yes) and selftest_report(report): the command line renders, this module decides."""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from envkit.checks import trainer_device
from envkit.checks.recommend import recommend_profile
from envkit.errors import EnvkitError
from envkit.facts import gather, machine_label
from envkit.install.act import execute, interp, plan as planmod
from envkit.install.act.apply import install_with_rollback, verify_device
from envkit.install.choice import resolve
from envkit.install.choice.model import parse_request
from envkit.install.choice.variants import choose
from envkit.install.lock import single
from envkit.install.lock.index_hashes import index_hashes
from envkit.install.lock.install import install_from_lock
from envkit.install.lock.read import read, written_by_setup
from envkit.install.setup.options import (DEFAULT_EXTRAS, SetupOptions, index_override, parse_with, pick_installer,
                                          venv_path, venv_python_of)
from envkit.install.setup.outputs import write_outputs
from envkit.install.setup.venv_lock import hold_venv
from envkit.profiles import load_profile

if TYPE_CHECKING:
    from envkit.install.choice.model import Choice
    from envkit.install.choice.resolve import Resolved
    from envkit.install.act.plan import Installer

__all__ = ["Installed", "SetupOptions", "run_setup"]


@dataclass(frozen=True)
class Installed:
    """What a setup that changed the environment hands on to the next stages (self-test, tune)."""
    venv_python: str
    profile: "_Profile"
    root: Path


def run_setup(opts: SetupOptions, ui) -> Installed | None:
    """Installs (or plans) and returns what was installed; None when nothing changed (a dry run,
    nothing to do). The self-test and `--tune` come after, composed by the command (install knows
    nothing of the later stages)."""
    # ---- validate everything before touching the disk -------------------------------------------
    say = ui.say
    request = parse_request(opts.torch)
    companions = parse_with(opts.with_)
    dry_run, as_json, yes, replay, python_opt = opts.dry_run or bool(opts.replay), opts.as_json, opts.yes, opts.replay, opts.python
    no_numpy = not opts.numpy
    root = Path.cwd() / ".envkit"
    lock_path = Path(opts.lock or single.NAME)
    # --lock FILE installs FILE when it exists; a missing pylock.machine.toml (or envkit.lock) is
    # written by this setup, a pylock.toml never is (`envkit lock` writes those)
    lock_in = read(lock_path) if opts.lock and (lock_path.exists() or not written_by_setup(lock_path)) else None
    venv = venv_path(opts.venv, root)
    base_python = python_opt or sys.executable
    override = index_override(opts.index_url)

    facts = gather(replay, runtime=False, gpu_detail=False, python=None if replay else python_opt)
    profile = load_setup_profile(opts.profile, facts, lock_in, say)
    installer = pick_installer(opts.installer, replay=bool(replay))

    if lock_in is not None:
        if install_from_lock(lock_in, facts, profile, venv, base_python, dry_run, yes, as_json, root, ui, bool(replay), sync=opts.sync):
            return Installed(venv_python_of(venv), profile, root)
        return None

    venv_python = venv_python_of(venv)
    create = not Path(venv_python).exists()
    found = read_index(facts, request, companions, override, venv_python=venv_python, create=create, base_python=base_python,
                       replay=replay, extras=not no_numpy)
    if found.index_url is None and installer == "uv":
        installer = "pip"
        found.notes.append(("--installer uv" if opts.installer == "uv" else "installer auto (uv)")
                           + ": switching to pip, because torch comes from pip's configured sources (pip.conf, PIP_* variables: "
                           + ", ".join(found.configured or found.sources) + "), which uv does not read")
    resolved, versions = found.resolved, found.versions
    extras = () if no_numpy or (resolved and "numpy" not in resolved.extras) else DEFAULT_EXTRAS
    plan = planmod.make_plan(machine=machine_label(facts), profile=profile.name, request=request, choice=found.choice,
                             venv=str(venv), python=venv_python, base_python=base_python, create_venv=create,
                             installer=installer, versions=versions, index_url=found.index_url, sources=found.sources,
                             installed=found.installed, notes=found.notes, wanted=["torch", *companions, *extras],
                             pip_sources=found.configured)
    ui.show_plan(plan.to_dict(), as_json)
    if plan.nothing_to_do:
        have = ", ".join(f"{k} {v}" for k, v in (versions or {}).items())  # nothing_to_do: versions were read
        if dry_run:
            say(f"nothing to change: {have} already installed in {venv} (dry run: nothing written)", err=as_json)
            return None
        held = hold_venv(venv, create)  # noqa: F841 - one setup at a time per venv, until this returns
        write_outputs(root, venv, venv_python, profile, plan, facts, lock_path, report=None, cached={}, say=say,
                      quiet_if_same=True)
        say(f"nothing to change: {have} already installed in {venv}", err=as_json)
        return None
    if dry_run:
        return None
    ui.confirm(yes)
    held = hold_venv(venv, create)  # noqa: F841 - before the first change; released when this returns (or the process ends)
    with tempfile.TemporaryDirectory(prefix="envkit-setup-") as tmp:
        report = Path(tmp) / "pip-report.json"
        known = _install(found, installer, venv, venv_python, create, base_python, report, say)
        write_outputs(root, venv, venv_python, profile, plan, facts, lock_path, report=report, cached=found.cached, say=say,
                      known_hashes=known)
    return Installed(venv_python, profile, root)


@dataclass
class IndexAnswer:
    """What reading the index decided: the build (another one where the table's was withdrawn), the
    versions to install, where they come from, what the environment has now."""
    choice: Choice
    resolved: Resolved | None = None  # choice.resolve's answer; None: planned for a recorded machine, index unread
    versions: dict | None = None
    index_url: str | None = None
    sources: list = field(default_factory=list)
    installed: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    cached: dict = field(default_factory=dict)  # name -> the wheel file kept in envkit's cache (nightlies)
    configured: list = field(default_factory=list)  # pip's configured sources, all (index_url None: pip reads each)


def read_index(facts, request, companions, override, *, venv_python: str, create: bool, base_python: str, replay,
               extras: bool) -> IndexAnswer:
    """The build for this machine and the versions its index holds for this Python. With --replay
    (a recorded machine) the index is read only when --index-url names one."""
    url, why = override
    choice = choose(facts, request, url, why, companions)
    if replay and not url:
        return IndexAnswer(choice, index_url=choice.index_url, notes=[
            "planned for a recorded machine without reading the index: the version is resolved when it runs there "
            "(pass --index-url to resolve against a mirror)"])

    if replay:
        py = facts.python
        tags = interp.computed_tags(py.version or "3.11", py.implementation or "cpython", facts.os.system,
                                    py.machine or "x86_64", macos=facts.os.version)
        pyver = py.version or "3.11"
        installed = {k: v for k, v in facts.packages.items() if v}
    else:
        python_here = interp.probe(venv_python if not create else base_python, dists=not create)
        tags, pyver = python_here.tags, python_here.version
        installed = python_here.installed if not create else {}
    missing: dict[str, str] = {}
    while True:  # the table says a build exists; its index page may disagree (a build withdrawn, a late release)
        try:
            resolved = resolve.resolve(choice, request, frozenset(tags), pyver, companions, explicit_index=bool(url),
                                       extras=list(DEFAULT_EXTRAS) if extras else [],
                                       pip_python=base_python)
            break
        except resolve.NoMatchingTorch:
            if url or choice.device != "cuda" or choice.backend in missing:
                raise
            missing[choice.backend] = f"{choice.backend}: {choice.index_url} holds no torch {request.text} for this Python"
            choice = choose(facts, request, url, why, companions, missing)
    return IndexAnswer(choice, resolved, resolved.versions(), resolved.index_url, resolved.sources, installed, list(resolved.notes),
                       configured=list(resolved.configured))


def _install(found: IndexAnswer, installer: Installer, venv: Path, venv_python: str, create: bool, base_python: str,
             report: Path, say) -> dict:
    """Install the plan's versions (rolled back on failure) and return the sha256 of each file."""
    resolved, versions, index_used = found.resolved, found.versions, found.index_url
    assert resolved is not None and versions is not None  # the index was read (--replay plans only: a dry run)
    wheels = {}
    for name, cand in ([("torch", resolved.torch)] + list(resolved.companions.items())):
        if cand.version.is_devrelease:  # nightlies vanish from the index: keep them in envkit's cache
            path = execute.fetch_wheel(cand.url, cand.filename, cand.sha256)
            wheels[name], found.cached[name] = str(path), path.name
    cmd = planmod.install_command(installer, venv_python, versions, index_used, found.choice.channel,
                                  str(report) if installer == "pip" else None, wheels)
    install_with_rollback(venv, venv_python, base_python, installer, create, cmd, versions, verify_device(found.choice), say)
    # uv has no `--report`: the hashes come from the index entries the resolver read and pinned
    return index_hashes(venv_python, [("torch", resolved.torch)] + list(resolved.companions.items())
                        + list(resolved.extras.items()),
                        index_used if installer == "uv" else None, found.installed)


class _Profile:
    """The profile as setup needs it: name, env, resolved values (and the real object when loaded)."""

    def __init__(self, name: str, env: dict, resolved: dict, obj=None):
        self.name, self.env, self.resolved, self.obj = name, env, resolved, obj


def load_setup_profile(name: str, facts, lock, say) -> _Profile:
    """--profile, else the one a machine lock was made with, else the one recommended here."""
    lock = lock if lock is not None and lock.single else None  # a pylock.toml names no profile of its own
    if lock is not None and name == "auto" and lock.profile.get("name"):
        name = lock.profile["name"]
    if name == "auto":
        name, warning = recommend_profile(facts)
        if warning:
            say(f"note: {warning}", err=True)

    p = load_profile(name, facts)
    if lock is None:  # a lock is held against this platform as a whole, which says more
        _hold_profile_device(p, facts)
    try:
        resolved = p.to_dict()
    except Exception:
        resolved = {"name": p.name}
    return _Profile(p.name, dict(getattr(p, "env", {}) or {}), resolved, p)


def _hold_profile_device(profile, facts) -> None:
    """A profile tuned for a device this machine lacks (m3-max on a Linux box) would install and
    configure the wrong thing: refuse before anything changes."""
    want = (getattr(profile, "train", None) or {}).get("device", "auto")
    have = trainer_device(facts)
    if want in ("auto", "cpu", have):
        return
    check = "mps" if want == "mps" else "cuda"
    raise EnvkitError(f"profile {profile.name} trains on {want}, which this machine does not have (it trains on {have}; doctor check '{check}')",
                      where="--profile", fix="use --profile auto, or plan for that machine with `envkit setup --replay SNAPSHOT --dry-run`")
