"""`envkit setup`: create or reuse a venv, install PyTorch (stable, pinned, nightly, test) from the
index this machine needs, verify it, roll back on failure, write env scripts, profile and lock.

The flow: facts -> profile -> choice of build and index (install/variants.py) -> resolution by
reading the index (install/resolve.py) -> plan (install/plan.py, shown before anything happens)
-> install + verify with rollback (install/execute.py, install/rollback.py) -> lock, env scripts,
self-test. All validation happens before the first write: bad input changes nothing.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import click

from envkit.errors import EnvkitError

COMPANIONS = ("torchvision", "torchaudio")
# Installed beside torch unless --no-numpy: torch warns at import without it ("Failed to initialize
# NumPy"), torch.from_numpy, DataLoader collation of arrays and nearly every training script need it.
DEFAULT_EXTRAS = ("numpy",)


def _say(text: str = "", err: bool = False) -> None:
    click.echo(text, err=err)


@click.command()
@click.option("--profile", "profile_name", default="auto", show_default=True, help="A profile name, or auto (recommended for this machine).")
@click.option("--torch", "torch_req", default="stable", show_default=True, metavar="WHAT",
              help="stable, nightly, test (release candidate), a version (2.5.1) or a specifier ('>=2.5,<2.7').")
@click.option("--with", "with_", default="", metavar="PKGS", help="Also install, paired with torch: torchvision,torchaudio.")
@click.option("--no-numpy", is_flag=True, help="Do not install numpy beside torch (installed by default: see README).")
@click.option("--venv", "venv_opt", metavar="PATH", help="The venv to create or reuse (default .envkit/venv; 'active' = $VIRTUAL_ENV).")
@click.option("--python", "python_opt", metavar="PATH", help="The Python that creates the venv (default: the one running envkit).")
@click.option("--installer", type=click.Choice(["auto", "pip", "uv"]), default="auto", show_default=True,
              help="auto: uv when it is on PATH or beside envkit's Python, pip otherwise.")
@click.option("--index-url", "index_url", metavar="URL", help="Read and install torch from this index (a mirror), or a folder of wheels. Also ENVKIT_INDEX_URL.")
@click.option("--dry-run", is_flag=True, help="Show the plan and stop.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--lock", "lock_opt", metavar="FILE", help="Rebuild from this lock if it exists, else write the lock here (default envkit.lock).")
@click.option("--no-selftest", is_flag=True, help="Skip the self-test at the end.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.option("--replay", metavar="SNAPSHOT", type=click.Path(dir_okay=False), help="Plan for a recorded machine (implies --dry-run).")
def setup(profile_name, torch_req, with_, no_numpy, venv_opt, python_opt, installer, index_url, dry_run, yes, lock_opt,
          no_selftest, as_json, replay) -> None:
    """Install or upgrade PyTorch into a reproducible, containerless environment."""
    from envkit.install import lockfile
    from envkit.install.variants import parse_request

    # ---- validate everything before touching the disk -------------------------------------------
    request = parse_request(torch_req)
    companions = _parse_with(with_)
    if replay:
        dry_run = True
    root = Path.cwd() / ".envkit"
    lock_path = Path(lock_opt or "envkit.lock")
    lock_in = lockfile.read(lock_path) if lock_opt and lock_path.exists() else None
    if lock_opt and lock_path.exists() and lock_path.is_dir():
        raise EnvkitError("is a folder, not a lock file", where=str(lock_path))
    venv = _venv_path(venv_opt, root)
    base_python = python_opt or sys.executable
    override, override_why = index_url, "--index-url"
    if not override and os.environ.get("ENVKIT_INDEX_URL"):
        override, override_why = os.environ["ENVKIT_INDEX_URL"], "ENVKIT_INDEX_URL"
    if override and "://" not in override and not Path(override).is_dir():
        raise EnvkitError(f"--index-url {override!r} is neither a URL nor a folder of wheels", fix="pass e.g. https://mirror.example/simple")
    if override and "://" not in override:
        override = str(Path(override).resolve())  # the lock and the state name it from anywhere

    from envkit.facts import gather, machine_label

    facts = gather(replay, runtime=False, gpu_detail=False, python=None if replay else python_opt)
    profile = _load_profile(profile_name, facts, lock_in)
    asked_installer = installer
    installer = _installer(installer, replay=bool(replay))

    if lock_in is not None:
        return _from_lock(lock_in, lock_path, facts, profile, venv, base_python, installer, dry_run, yes, as_json,
                          no_selftest, root)

    from envkit.install import plan as planmod
    from envkit.install.variants import choose

    choice = choose(facts, request, override, override_why)
    venv_python = _venv_python(venv)
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
    _show(plan.to_dict(), as_json)
    if plan.nothing_to_do and dry_run:
        _say(f"nothing to change: {', '.join(f'{k} {v}' for k, v in versions.items())} already installed in {venv} (dry run: nothing written)", err=as_json)
        return
    if plan.nothing_to_do:
        _write_outputs(root, venv, venv_python, profile, plan, facts, lock_path, report=None, cached={}, quiet_if_same=True)
        _say(f"nothing to change: {', '.join(f'{k} {v}' for k, v in versions.items())} already installed in {venv}", err=as_json)
        return
    if dry_run:
        return
    _confirm(yes)

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
        _install(venv, venv_python, base_python, installer, create, cmd, versions, _verify_device(choice))
        # uv has no `--report`: the hashes come from the index entries the resolver read and pinned
        known = _index_hashes(venv_python, [("torch", resolved.torch)] + list(resolved.companions.items())
                              + list(resolved.extras.items()),
                              index_used if installer == "uv" else None, installed)
        _write_outputs(root, venv, venv_python, profile, plan, facts, lock_path, report=report, cached=cached,
                       known_hashes=known)
    _finish(venv_python, profile, no_selftest)


# ---- steps ---------------------------------------------------------------------------------------

def _install(venv: Path, venv_python: str, base_python: str, installer: str, create: bool, cmd: list[str],
             versions: dict[str, str], device: str, after=None) -> None:
    """Create the venv if needed, install with rollback on failure or Ctrl-C, verify."""
    from envkit.install import execute, rollback
    from envkit.install.plan import venv_command

    if create:
        _say(f"creating the venv {venv}", err=True)
        try:
            execute.run_step(venv_command(installer, base_python, str(venv)), "creating the venv")
        except (execute.StepFailed, KeyboardInterrupt) as exc:
            import shutil

            shutil.rmtree(venv, ignore_errors=True)
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise EnvkitError(str(exc), fix="check that the --python interpreter can create venvs (python3-venv on Debian/Ubuntu)")
    backup = rollback.take(venv_python, venv / ".envkit-rollback")
    try:
        _say("installing: " + " ".join(cmd), err=True)
        execute.run_step(cmd, "the install")
        if after:
            after()
        _say("verifying in " + venv_python, err=True)
        result = execute.verify(venv_python, versions, device)
        if not result["ok"]:
            raise execute.StepFailed("verification failed: " + "; ".join(result["problems"]))
    except (execute.StepFailed, KeyboardInterrupt) as exc:
        _say("putting the environment back as it was before ...", err=True)
        diffs = rollback.restore(venv_python, backup)
        backup.discard()
        back = ("the environment was put back exactly as it was (" + (f"{len(backup.before)} packages" if backup.before else "empty") + ")"
                if not diffs else "could not put back: " + ", ".join(f"{n} {a} -> {b}" for n, (a, b) in sorted(diffs.items())))
        if isinstance(exc, KeyboardInterrupt):
            _say(f"envkit: interrupted; {back}", err=True)
            raise
        raise EnvkitError(f"{exc}; {back}", fix="read the installer output above; the previous environment keeps working")
    backup.discard()


def _write_outputs(root: Path, venv: Path, venv_python: str, profile, plan, facts, lock_path: Path, *, report,
                   cached: dict, quiet_if_same: bool = False, known_hashes: dict | None = None) -> None:
    from envkit import __version__
    from envkit.fsutil import atomic_write_text
    from envkit.install import interp, lockfile
    from envkit.managed import write_state

    import json

    target = interp.probe(venv_python)
    previous = None
    if lock_path.is_file():
        try:
            previous = lockfile.read(lock_path)
        except EnvkitError:
            previous = None
    lock = lockfile.build(
        target,
        platform=lockfile.platform_of(facts, device=plan.choice.device, backend=plan.choice.backend),
        profile={"name": profile.name, "sha256": lockfile.profile_hash(profile.resolved)},
        source={"torch": plan.request, "channel": plan.choice.channel, "installer": plan.installer,
                "index_urls": [plan.index_url] if plan.index_url else []},
        env=profile.env, report={**{lockfile.canon(k): v for k, v in (known_hashes or {}).items() if v.get("sha256")},
                                 **lockfile.hashes_from_report(report)},
        previous=previous, cached=cached,
        envkit_version=__version__)
    if lockfile.write(lock_path, lock):
        _say(f"wrote {lock_path}", err=True)
    state = {"profile": profile.name, "venv": str(venv), "python": venv_python, "torch": target.installed.get("torch"),
             "index_url": plan.index_url, "lock": str(lock_path.resolve())}
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
            from envkit.envscripts import write_env_scripts
        except ImportError:
            return
        try:
            written = write_env_scripts(root, profile.obj, venv, False)
        except EnvkitError as exc:  # a script the user edited is left alone
            _say(f"note: env scripts not rewritten: {exc.one_line()}", err=True)
            return
        if written:
            _say("wrote " + ", ".join(str(p) for p in written), err=True)


def _finish(venv_python: str, profile, no_selftest: bool) -> None:
    if not no_selftest:
        try:
            from envkit.selftest import render_report, run_selftest
        except ImportError:
            _say("self-test: not available in this envkit (skipped)", err=True)
        else:
            report = run_selftest(python=venv_python, device="auto", profile=profile.name, quick=True)
            out = render_report(report)
            if isinstance(out, str):
                _say(out)
            if not getattr(report, "ok", False):
                _say("the self-test failed: torch is installed and verified, but the device misbehaves (see above)", err=True)
                sys.exit(1)
    if Path("train.yaml").is_file():
        _say("next: source .envkit/activate, then envkit run train.yaml")
    else:
        _say("next: source .envkit/activate, then envkit init train.yaml && envkit run train.yaml")


def _from_lock(lock, lock_path: Path, facts, profile, venv: Path, base_python: str, installer: str, dry_run: bool,
               yes: bool, as_json: bool, no_selftest: bool, root: Path) -> None:
    """Rebuild exactly the locked set: every package pinned (hashes enforced where all are known),
    --no-deps, nightly wheels from envkit's cache when the index has dropped them."""
    from envkit.install import execute, interp, lockfile
    from envkit.install.plan import index_args, venv_command

    device = "mps" if facts.is_apple_silicon else "cuda" if facts.gpus else "cpu"
    here = lockfile.platform_of(facts, device=device)
    diffs = lockfile.platform_differences(lock.platform, here)
    if diffs:
        raise EnvkitError(f"the lock was made on another platform: {'; '.join(diffs)}", where=str(lock_path),
                          fix="run `envkit setup` without --lock on this machine to make its own lock")
    venv_python = _venv_python(venv)
    create = not Path(venv_python).exists()
    installed = {} if create else {k: d["version"] for k, d in interp.probe(venv_python).dists.items() if not d.get("editable")}
    drift = lockfile.compare(lock, installed)
    reqs, hashed = lockfile.requirements_text(lock)
    cache = execute.wheel_cache()
    cmd = [venv_python, "-m", "pip", "install", "--no-deps"] + (["--require-hashes"] if hashed else [])
    for url in lock.index_urls:
        cmd += index_args(url)
    if any(p.get("cached") for p in lock.packages) and cache.is_dir():
        cmd += ["--find-links", str(cache)]
    extras = sorted(drift["added"])
    plan = {"from_lock": str(lock_path), "venv": str(venv), "create_venv": create, "profile": profile.name,
            "hashes_enforced": hashed, "packages": len(lock.packages), "changes": drift["lines"],
            "nothing_to_do": not create and not drift["changed"],
            "commands": ([" ".join(venv_command("pip", base_python, str(venv)))] if create else [])
            + [" ".join(cmd + ["-r", "<locked requirements>"])]
            + ([f"{venv_python} -m pip uninstall -y {' '.join(extras)}"] if extras else [])}
    if as_json:
        from envkit.console import print_json

        print_json(plan)
    else:
        _say(f"rebuild from {lock_path}: {len(lock.packages)} packages into {venv}"
             + (" (new venv)" if create else "") + (", sha256 enforced" if hashed else ", no hashes (some packages lack one)"))
        for line in drift["lines"]:
            _say(f"  {line}")
        for c in plan["commands"]:
            _say(f"  $ {c}")
    if plan["nothing_to_do"]:
        _say(f"nothing to change: {venv} matches {lock_path}", err=as_json)
        return
    if dry_run:
        return
    _confirm(yes)
    with tempfile.TemporaryDirectory(prefix="envkit-lock-") as tmp:
        req_file = Path(tmp) / "requirements.txt"
        req_file.write_text(reqs)

        def uninstall_extras():
            if extras:
                execute.run_step([venv_python, "-m", "pip", "uninstall", "-y", *extras], "removing packages not in the lock")
            now = {k: d["version"] for k, d in interp.probe(venv_python).dists.items() if not d.get("editable")}
            left = lockfile.compare(lock, now)
            if left["changed"]:
                raise execute.StepFailed("the environment still differs from the lock: " + "; ".join(left["lines"]))

        want = {k: v for k, v in lock.versions.items() if k in ("torch", "torchvision", "torchaudio")}
        _install(venv, venv_python, base_python, "pip", create, cmd + ["-r", str(req_file)], want,
                 "cpu-only" if lock.platform.get("backend") == "cpu" and "+cpu" in want.get("torch", "") else device,
                 after=uninstall_extras)
    from envkit.managed import write_state

    write_state(root, profile=profile.name, venv=str(venv), python=venv_python, lock=str(lock_path.resolve()))
    if profile.obj is not None:
        try:
            from envkit.envscripts import write_env_scripts

            write_env_scripts(root, profile.obj, venv, False)
        except ImportError:
            pass
        except EnvkitError as exc:
            _say(f"note: env scripts not rewritten: {exc.one_line()}", err=True)
    _finish(venv_python, profile, no_selftest)


# ---- helpers -------------------------------------------------------------------------------------

class _Profile:
    """The profile as setup needs it: name, env, resolved values (and the real object when loaded)."""

    def __init__(self, name: str, env: dict, resolved: dict, obj=None):
        self.name, self.env, self.resolved, self.obj = name, env, resolved, obj


def _load_profile(name: str, facts, lock) -> _Profile:
    if lock is not None and name == "auto" and lock.profile.get("name"):
        name = lock.profile["name"]
    if name == "auto":
        from envkit.recommend import recommend_profile

        name, warning = recommend_profile(facts)
        if warning:
            _say(f"note: {warning}", err=True)
    try:
        from envkit.profiles import load_profile
    except ImportError:
        return _Profile(name, {}, {"name": name})
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


def _parse_with(text: str) -> list[str]:
    names = [n.strip().lower() for n in (text or "").replace(" ", ",").split(",") if n.strip()]
    for n in names:
        if n not in COMPANIONS:
            raise EnvkitError(f"--with {n!r}: envkit pairs only {', '.join(COMPANIONS)} with torch",
                              fix="install other packages with pip once the environment exists")
    return list(dict.fromkeys(names))


def _venv_path(opt: str | None, root: Path) -> Path:
    if opt == "active":
        active = os.environ.get("VIRTUAL_ENV")
        if not active:
            raise EnvkitError("--venv active, but no venv is active ($VIRTUAL_ENV is empty)", fix="activate one, or pass --venv PATH")
        path = Path(active)
    elif opt:
        path = Path(opt).expanduser()
    else:
        from envkit.managed import find_managed

        m = find_managed(Path.cwd())
        path = m.venv if m is not None and m.root.resolve() == root.resolve() else root / "venv"
    path = path.absolute()
    if path.exists() and not path.is_dir():
        raise EnvkitError("is a file, not a venv folder", where=str(path), fix="pass --venv with a folder path (it is created if missing)")
    if path.is_dir() and any(path.iterdir()) and not (path / "pyvenv.cfg").is_file():
        raise EnvkitError("is a folder that is not a venv (no pyvenv.cfg)", where=str(path),
                          fix="pass --venv with an empty or new folder, or an existing venv")
    return path


def _venv_python(venv: Path) -> str:
    return str(venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python"))


def _installer(choice: str, replay: bool = False) -> str:
    from envkit.install.execute import which_uv

    if choice == "uv" and not which_uv():
        raise EnvkitError("--installer uv, but uv is neither on PATH nor beside envkit's Python",
                          fix="`pip install uv` (or https://docs.astral.sh/uv/), or use --installer pip")
    if choice == "auto":  # a recorded machine may not have uv: plan for pip, which every venv has
        return "uv" if which_uv() and not replay else "pip"
    return choice


def _index_hashes(venv_python: str, picked: list, deps_index: str | None = None,
                  before: dict[str, str] | None = None) -> dict[str, dict]:
    """name -> {version, sha256, url} from the index's own hashes (PEP 691 `hashes`, PEP 503
    `#sha256=`; a folder's wheels are hashed on disk): the lock's hashes where the installer
    reports none (uv has no `--report`). First the wheels the resolver pinned; with `deps_index`,
    also the dependencies this install added or changed, looked up on that index. A hash is kept
    only where the installed distribution carries the same wheel tags as the file it names."""
    from envkit.install import index, interp
    from envkit.install.interp import BOOTSTRAP

    dists = interp.probe(venv_python).dists
    out = {}

    def take(name: str, cand) -> bool:
        d = dists.get(name)
        if not d or d.get("version") != str(cand.version) or not d.get("path"):
            return False
        try:
            wheel = (Path(d["path"]) / "WHEEL").read_text(errors="replace")
        except OSError:
            return False
        tags = {line.split(":", 1)[1].strip() for line in wheel.splitlines() if line.startswith("Tag:")}
        if not tags or tags != set(cand.tags):
            return False
        digest = cand.sha256 or _local_sha256(cand.url)
        if digest:
            out[name] = {"version": str(cand.version), "sha256": digest, "url": cand.url}
        return bool(digest)

    for name, cand in picked:
        take(name, cand)
    if deps_index:
        before = before or {}
        for name, d in dists.items():
            if name in out or name in BOOTSTRAP or d.get("editable") or before.get(name) == d.get("version"):
                continue
            try:
                cands = index.fetch(deps_index, name)
            except EnvkitError:
                continue
            for cand in cands:
                if str(cand.version) == d.get("version") and take(name, cand):
                    break
    return out


def _local_sha256(url: str) -> str | None:
    if not url.startswith("file://"):
        return None
    from urllib.parse import unquote, urlsplit

    from envkit.install.execute import sha256_file

    path = Path(unquote(urlsplit(url).path))
    return sha256_file(path) if path.is_file() else None


def _verify_device(choice) -> str:
    if choice.device == "cpu" and choice.local:
        return "cpu-only"
    return choice.device


def _confirm(yes: bool) -> None:
    if yes:
        return
    from envkit.console import is_tty

    if not is_tty(sys.stdin):
        raise EnvkitError("setup needs a confirmation and stdin is not a terminal", fix="pass --yes to proceed without asking")
    if not click.confirm("Proceed?", default=True):
        raise click.exceptions.Abort()


def _show(plan: dict, as_json: bool) -> None:
    if as_json:
        from envkit.console import print_json

        print_json(plan)
        return
    _say(f"envkit setup  {plan['machine']}")
    _say(f"  profile   {plan['profile']}")
    _say(f"  torch     {plan['request']} -> " + (", ".join(f"{k} {v}" for k, v in plan["versions"].items()) if plan["versions"] else plan["spec"]))
    _say(f"  build     {plan['device']} ({plan['backend']}, {plan['channel']})")
    _say(f"  index     {plan['index_url'] or 'pip configured sources: ' + ', '.join(plan['sources'])}  [{plan['index_why']}]")
    if plan["limit"]:
        _say(f"  limit     torch {plan['limit']}: {'; '.join(plan['limit_why'])}")
    _say(f"  venv      {plan['venv']}" + (" (new)" if plan["create_venv"] else ""))
    _say(f"  installer {plan['installer']}")
    for c in plan["changes"]:
        _say(f"  change    {c['name']}: {c['from'] or 'not installed'} -> {c['to']}")
    for c in plan["commands"]:
        _say(f"  $ {c}")
    for n in plan["notes"]:
        _say(f"  note: {n}")
