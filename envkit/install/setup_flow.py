"""`envkit setup` as one function: facts -> profile -> build and index (variants.py) -> versions read
off the index (resolve.py) -> plan (plan.py, shown before anything happens) -> install + verify with
rollback (apply.py) -> lock, state, env scripts (outputs.py) -> self-test. All validation happens
before the first write: bad input changes nothing.

The caller passes a `ui` with say(text, err=False), show_plan(plan_dict, as_json), show_json(obj),
confirm(yes) and selftest_report(report): the command line renders, this module decides."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.install.apply import install_with_rollback, verify_device
from envkit.install.from_lock import rebuild_from_lock
from envkit.install.hashes import index_hashes
from envkit.install.options import (DEFAULT_EXTRAS, SetupOptions, index_override, parse_with, pick_installer,
                                    venv_path, venv_python_of)

__all__ = ["SetupOptions", "run_setup"]
from envkit.install.outputs import write_outputs


def run_setup(opts: SetupOptions, ui) -> int:
    """Returns the exit code: 0 done (or nothing to do), 1 the self-test failed after the install."""
    from envkit.install import lockfile
    from envkit.install.variants import parse_request

    # ---- validate everything before touching the disk -------------------------------------------
    say = ui.say
    request = parse_request(opts.torch)
    if opts.tune:
        from envkit.tune.session import parse_budget

        try:
            parse_budget(opts.tune)  # a bad budget is refused before anything changes
        except EnvkitError as exc:
            raise EnvkitError(exc.message, where="--tune", fix=exc.fix)
    companions = parse_with(opts.with_)
    dry_run, as_json, yes, replay, python_opt = opts.dry_run or bool(opts.replay), opts.as_json, opts.yes, opts.replay, opts.python
    no_numpy = not opts.numpy
    root = Path.cwd() / ".envkit"
    lock_path = Path(opts.lock or "envkit.lock")
    lock_in = lockfile.read(lock_path) if opts.lock and lock_path.exists() else None
    if opts.lock and lock_path.exists() and lock_path.is_dir():
        raise EnvkitError("is a folder, not a lock file", where=str(lock_path))
    venv = venv_path(opts.venv, root)
    base_python = python_opt or sys.executable
    override, override_why = index_override(opts.index_url)

    from envkit.facts import gather, machine_label

    facts = gather(replay, runtime=False, gpu_detail=False, python=None if replay else python_opt)
    profile = load_setup_profile(opts.profile, facts, lock_in, say)
    asked_installer = opts.installer
    installer = pick_installer(opts.installer, replay=bool(replay))

    if lock_in is not None:
        if rebuild_from_lock(lock_in, lock_path, facts, profile, venv, base_python, dry_run, yes, as_json, root, ui):
            return _finish(venv_python_of(venv), profile, opts.selftest, ui, opts.tune, root)
        return 0

    from envkit.install import plan as planmod
    from envkit.install.variants import choose

    choice = choose(facts, request, override, override_why)
    venv_python = venv_python_of(venv)
    create = not Path(venv_python).exists()
    notes: list[str] = []
    versions, index_used, sources, installed = None, choice.index_url, [], {}
    resolved = None
    if replay and not override:
        notes.append("planned for a recorded machine without reading the index: the version is resolved when it runs there "
                     "(pass --index-url to resolve against a mirror)")
    else:
        from envkit.install import interp, resolve

        if replay:
            py = facts.python
            tags = interp.computed_tags(py.version or "3.11", py.implementation or "cpython", facts.os.system,
                                        py.machine or "x86_64", macos=facts.os.version)
            pyver = py.version or "3.11"
            installed = {k: v for k, v in facts.packages.items() if v}
        else:
            target = interp.probe(venv_python if not create else base_python, dists=not create)
            tags, pyver = target.tags, target.version
            installed = target.installed if not create else {}
        resolved = resolve.resolve(choice, request, frozenset(tags), pyver, companions, explicit_index=bool(override),
                                   extras=[] if no_numpy else list(DEFAULT_EXTRAS),
                                   pip_python=base_python)
        versions, index_used, sources = resolved.versions(), resolved.index_url, resolved.sources
        notes += resolved.notes
    if index_used is None and installer == "uv":
        installer = "pip"
        notes.append(("--installer uv" if asked_installer == "uv" else "installer auto (uv)")
                     + ": switching to pip, because torch comes from pip's configured sources (pip.conf, PIP_* variables: "
                     + ", ".join(sources) + "), which uv does not read")
    plan = planmod.make_plan(machine=machine_label(facts), profile=profile.name, request=request, choice=choice,
                             venv=str(venv), python=venv_python, base_python=base_python, create_venv=create,
                             installer=installer, versions=versions, index_url=index_used, sources=sources,
                             installed=installed, notes=notes,
                             wanted=["torch", *companions, *(() if no_numpy or (resolved and "numpy" not in resolved.extras) else DEFAULT_EXTRAS)])
    ui.show_plan(plan.to_dict(), as_json)
    if plan.nothing_to_do and dry_run:
        say(f"nothing to change: {', '.join(f'{k} {v}' for k, v in versions.items())} already installed in {venv} (dry run: nothing written)", err=as_json)
        return 0
    if plan.nothing_to_do:
        write_outputs(root, venv, venv_python, profile, plan, facts, lock_path, report=None, cached={}, say=say,
                      quiet_if_same=True)
        say(f"nothing to change: {', '.join(f'{k} {v}' for k, v in versions.items())} already installed in {venv}", err=as_json)
        return 0
    if dry_run:
        return 0
    ui.confirm(yes)

    from envkit.install import execute

    wheels, cached = {}, {}
    for name, cand in ([("torch", resolved.torch)] + list(resolved.companions.items())):
        if cand.version.is_devrelease:  # nightlies vanish from the index: keep them in envkit's cache
            path = execute.fetch_wheel(cand.url, cand.filename, cand.sha256)
            wheels[name], cached[name] = str(path), path.name
    with tempfile.TemporaryDirectory(prefix="envkit-setup-") as tmp:
        report = Path(tmp) / "pip-report.json"
        cmd = planmod.install_command(installer, venv_python, versions, index_used, choice.channel,
                                      str(report) if installer == "pip" else None, wheels)
        install_with_rollback(venv, venv_python, base_python, installer, create, cmd, versions, verify_device(choice), say)
        # uv has no `--report`: the hashes come from the index entries the resolver read and pinned
        known = index_hashes(venv_python, [("torch", resolved.torch)] + list(resolved.companions.items())
                              + list(resolved.extras.items()),
                              index_used if installer == "uv" else None, installed)
        write_outputs(root, venv, venv_python, profile, plan, facts, lock_path, report=report, cached=cached, say=say,
                      known_hashes=known)
    return _finish(venv_python, profile, opts.selftest, ui, opts.tune, root)


def _finish(venv_python: str, profile, selftest: bool, ui, tune: str | None = None, root: Path | None = None) -> int:
    rc = _selftest(venv_python, profile, selftest, ui)
    if rc:
        return rc
    if tune:
        _tune(venv_python, profile, tune, ui, root)
    if Path("train.yaml").is_file():
        ui.say("next: source .envkit/activate, then envkit run train.yaml")
    else:
        ui.say("next: source .envkit/activate, then envkit init train.yaml && envkit run train.yaml")
    return 0


def _tune(venv_python: str, profile, budget: str, ui, root: Path | None) -> None:
    """`envkit setup --tune`: measure in the new environment and make the tuned profile the managed one."""
    from envkit.bench.context import load_context
    from envkit.checks.recommend import TUNED_SUFFIX
    from envkit.install.managed import write_state
    from envkit.tune.session import parse_budget, run_tune

    start = profile.name.removesuffix(TUNED_SUFFIX)  # tune from the shipped profile, never on top of itself
    ui.say(f"tuning from profile {start} for {budget} (envkit tune)")
    ctx = load_context(None, None, start, venv_python)
    out = run_tune(ctx, parse_budget(budget), on_run=lambda row: ui.say(
        f"  {row['run']:<24} {row['status']:<5} " + (f"{row['per_second']:,.0f} {row['unit']}/s" if row["per_second"] else row["reason"])))
    for d in out.result.decisions:
        ui.say(f"  {'*' if d.changed else '='} {d.section}.{d.key} = {d.value}: {d.reason}")
    if out.profile and out.path:
        if root is not None and (root / "state.json").is_file():
            write_state(root, profile=out.profile)
        ui.say(f"wrote profile {out.profile}: {out.path}")
    else:
        ui.say("envkit tune decided nothing within the budget: the profile stays " + profile.name, err=True)


def _selftest(venv_python: str, profile, selftest: bool, ui) -> int:
    if selftest:
        from envkit.selftest import run_selftest

        report = run_selftest(python=venv_python, device="auto", profile=profile.name, quick=True)
        ui.selftest_report(report)
        if not report.ok:
            ui.say("the self-test failed: torch is installed and verified, but the device misbehaves (see above)", err=True)
            return 1
    return 0


class _Profile:
    """The profile as setup needs it: name, env, resolved values (and the real object when loaded)."""

    def __init__(self, name: str, env: dict, resolved: dict, obj=None):
        self.name, self.env, self.resolved, self.obj = name, env, resolved, obj


def load_setup_profile(name: str, facts, lock, say) -> _Profile:
    if lock is not None and name == "auto" and lock.profile.get("name"):
        name = lock.profile["name"]
    if name == "auto":
        from envkit.checks.recommend import recommend_profile

        name, warning = recommend_profile(facts)
        if warning:
            say(f"note: {warning}", err=True)
    from envkit.profiles import load_profile

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
    from envkit.checks import best_device

    want = (getattr(profile, "train", None) or {}).get("device", "auto")
    have = best_device(facts)
    if want in ("auto", "cpu", have):
        return
    check = "mps" if want == "mps" else "cuda"
    raise EnvkitError(f"profile {profile.name} trains on {want}, which this machine does not have (it trains on {have}; doctor check '{check}')",
                      where="--profile", fix="use --profile auto, or plan for that machine with `envkit setup --replay SNAPSHOT --dry-run`")
