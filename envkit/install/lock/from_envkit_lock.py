"""`envkit setup --lock FILE` when FILE exists: rebuild exactly the locked set on the platform that
made it. Returns True when the environment was rebuilt (the self-test runs then)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.install.act.apply import install_with_rollback, leave_only_locked
from envkit.install.setup.options import venv_python_of


def rebuild_from_lock(lock, lock_path: Path, facts, profile, venv: Path, base_python: str, dry_run: bool, yes: bool,
                      as_json: bool, root: Path, ui) -> bool:
    """Rebuild exactly the locked set: every package pinned (hashes enforced where all are known),
    --no-deps, nightly wheels from envkit's cache when the index has dropped them."""
    from envkit.install.act import execute
    from envkit.install.act import interp
    from envkit.install.lock import record as lockfile
    from envkit.install.act.plan import index_args, venv_command

    from envkit.checks import accel

    device = ("mps" if facts.is_apple_silicon else "cuda" if facts.gpus or accel.rocm_usable(facts)
              else "xpu" if any(accel.xpu_supported(g) for g in facts.intel_gpus) else "cpu")
    here = lockfile.platform_of(facts, device=device)
    diffs = lockfile.platform_differences(lock.platform, here)
    if diffs:
        raise EnvkitError(f"the lock was made on another platform: {'; '.join(diffs)}", where=str(lock_path),
                          fix="run `envkit setup` without --lock on this machine to make its own lock")
    venv_python = venv_python_of(venv)
    say = ui.say
    create = not Path(venv_python).exists()
    installed = {} if create else {k: d["version"] for k, d in interp.probe(venv_python).dists.items() if not d.get("editable")}
    drift = lockfile.compare(lock, installed)
    reqs, hashed = lockfile.requirements_text(lock)
    cache = execute.wheel_cache()
    cmd = [venv_python, "-m", "pip", "install", "--no-deps"] + (["--require-hashes"] if hashed else [])
    for url in lock.index_urls:
        cmd += index_args(_with_credentials(url))
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
        ui.show_json(plan)
    else:
        say(f"rebuild from {lock_path}: {len(lock.packages)} packages into {venv}"
             + (" (new venv)" if create else "") + (", sha256 enforced" if hashed else ", no hashes (some packages lack one)"))
        for line in drift["lines"]:
            say(f"  {line}")
        for c in plan["commands"]:
            say(f"  $ {c}")
    if plan["nothing_to_do"]:
        say(f"nothing to change: {venv} matches {lock_path}", err=as_json)
        return False
    if dry_run:
        return False
    ui.confirm(yes)
    with tempfile.TemporaryDirectory(prefix="envkit-lock-") as tmp:
        req_file = Path(tmp) / "requirements.txt"
        req_file.write_text(reqs)

        want = {k: v for k, v in lock.versions.items() if k in ("torch", "torchvision", "torchaudio")}
        install_with_rollback(venv, venv_python, base_python, "pip", create, cmd + ["-r", str(req_file)], want,
                 "cpu-only" if lock.platform.get("backend") == "cpu" and "+cpu" in want.get("torch", "") else device,
                              say, after=leave_only_locked(venv_python, extras, lock))
    from envkit.install.setup.managed import write_state

    write_state(root, profile=profile.name, venv=str(venv), python=venv_python, lock=str(lock_path.resolve()))
    if profile.obj is not None:
        from envkit.profiles.envscripts import write_env_scripts

        try:
            write_env_scripts(root, profile.obj, venv, False)
        except EnvkitError as exc:
            say(f"note: env scripts not rewritten: {exc.one_line()}", err=True)
    return True


def _with_credentials(url: str) -> str:
    """The lock names its index without credentials; where PIP_INDEX_URL or ENVKIT_INDEX_URL is
    the same index with a user and password, the install uses that (pip's netrc/keyring otherwise)."""
    import os

    from envkit.redact import strip_userinfo

    for name in ("ENVKIT_INDEX_URL", "PIP_INDEX_URL", "UV_INDEX_URL"):
        value = os.environ.get(name, "")
        if value and value != url and strip_userinfo(value) == url:
            return value
    return url
