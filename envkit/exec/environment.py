"""The environment `envkit exec` gives a command: the same profile `envkit env` would pick, its
variables (a value the user already exported wins, and the run records which won), the managed
venv's bin/ first on PATH, and ENVKIT_RUN_DIR for envkit.track."""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.facts import gather
from envkit.fsutil import atomic_write_text, cache_dir
from envkit.track import RUN_DIR_VAR


def resolve_profile_name(profile_name: str | None, managed, facts=None) -> tuple[str, str | None, object]:
    """(name, warning, facts) by `envkit env`'s rule: --profile; else the managed env's profile;
    else the recommended one (this machine's tuned profile when `envkit tune` wrote one)."""
    warning = None
    if profile_name in (None, "auto"):
        if managed and managed.profile and profile_name is None:
            return managed.profile, None, facts
        from envkit.checks.recommend import recommend_profile

        facts = facts or gather(runtime=False, gpu_detail=False)
        profile_name, warning = recommend_profile(facts)
    return profile_name, warning, facts


@dataclass
class ExecEnv:
    environ: dict[str, str]
    profile: str
    won: dict[str, dict] = field(default_factory=dict)  # variable -> {"value", "by": profile|user, "profile_value"}
    venv: str | None = None


def build_environ(profile, venv: Path | None, base: dict[str, str] | None = None) -> ExecEnv:
    """The child's environment: `base` (the calling shell) plus the profile's variables where the
    shell did not set them; the venv activated (bin/ first on PATH, VIRTUAL_ENV)."""
    env = dict(os.environ if base is None else base)
    won = {}
    for name, value in (getattr(profile, "env", None) or {}).items():
        if name in env and env[name] != str(value):
            won[name] = {"value": env[name], "by": "user", "profile_value": str(value)}
        else:
            env[name] = str(value)
            won[name] = {"value": str(value), "by": "profile"}
    if venv is not None:
        bin_dir = Path(venv) / ("Scripts" if os.name == "nt" else "bin")
        env["PATH"] = os.pathsep.join([str(bin_dir), *[p for p in env.get("PATH", "").split(os.pathsep) if p and p != str(bin_dir)]])
        env["VIRTUAL_ENV"] = str(venv)
        env.pop("PYTHONHOME", None)
    env.setdefault("PYTHONUNBUFFERED", "1")  # a Python command's lines reach train.log as they are printed
    env["PYTHONPATH"] = os.pathsep.join([p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p] + [str(track_path())])
    return ExecEnv(env, getattr(profile, "name", str(profile)), won, str(venv) if venv else None)


def with_run_dir(env: dict[str, str], run_dir: Path) -> dict[str, str]:
    return {**env, RUN_DIR_VAR: str(Path(run_dir).resolve())}


def track_path() -> Path:
    """A folder holding only a link to envkit, put LAST on the command's PYTHONPATH so that any
    interpreter can `import envkit.track` without envkit's other dependencies shadowing its own."""
    pkg = Path(__file__).resolve().parents[1]
    key = hashlib.sha256(str(pkg).encode()).hexdigest()[:12]
    base = cache_dir() / "track" / key
    if not (base / "envkit").exists():
        base.mkdir(parents=True, exist_ok=True)
        try:
            (base / "envkit").symlink_to(pkg, target_is_directory=True)
        except FileExistsError:
            pass  # a concurrent exec made it
    shim = base / "sitecustomize.py"
    try:
        current = shim.read_text()
    except OSError:
        current = None
    if current != SITECUSTOMIZE:
        atomic_write_text(shim, SITECUSTOMIZE)
    return base


# Imported by the command's interpreter at start (site.py) from the folder above: the audit hook of
# envkit/exec/opened.py installed, then the sitecustomize this one shadows (a distribution's own) run.
SITECUSTOMIZE = """\
# Written by envkit exec: records the files the command opens (envkit/exec/opened.py), then runs the
# sitecustomize this file shadows. Nothing happens outside `envkit exec` (no ENVKIT_RUN_DIR).
import os as _os
import sys as _sys

if _os.environ.get("ENVKIT_RUN_DIR") or _os.environ.get("ENVKIT_READ_ONLY"):
    try:
        from envkit.exec.opened import install as _install

        _install()
    except Exception as _exc:  # recording is never worth a command that does not start
        print(f"envkit: not recording opened files: {_exc}", file=_sys.stderr)


def _chain():
    here = _os.path.dirname(_os.path.abspath(__file__))
    saved = list(_sys.path)
    _sys.path[:] = [p for p in _sys.path if _os.path.abspath(p or ".") != here]
    mine = _sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # noqa: F401  (the next one on the path, if any)
    except ImportError:
        pass
    finally:
        _sys.path[:] = saved
        if mine is not None:
            _sys.modules["sitecustomize"] = mine


_chain()
"""


# Python's options that take a value as the next argument (python --help): the script comes after them
_PY_OPTS_WITH_VALUE = ("-W", "-X", "--check-hash-based-pycs")
_PYTHONS = ("python", "pypy")


def check_script(argv: list[str]) -> None:
    """`python [options] SCRIPT ...`: the script exists (relative to this folder), checked before a
    run folder is made, so a typo is one line and exit 2, not a failed run (nor --restart-on-failure
    retrying it). `-m module` and `-c code` are not files; other programs are found by find_command."""
    if not argv or not os.path.basename(argv[0]).startswith(_PYTHONS):
        return
    rest = list(argv[1:])
    while rest:
        a = rest.pop(0)
        if a in ("-m", "-c", "-") or a.startswith(("-m", "-c")) and len(a) > 2:
            return
        if a in _PY_OPTS_WITH_VALUE:
            rest = rest[1:]
            continue
        if a.startswith("-"):
            continue
        if not os.path.isfile(a) and not os.path.isfile(os.path.join(a, "__main__.py")):
            what = "is a folder, not a script" if os.path.isdir(a) else "script not found"
            raise EnvkitError(f"{what}: {a} (looked in {os.getcwd()})", where="envkit exec",
                              fix="check the script's path; it is read relative to the folder you run envkit in")
        return


def find_command(argv: list[str], env: dict[str, str]) -> str:
    """The program's path as the child will find it (the venv's bin/ first): EnvkitError if none."""
    if not argv:
        raise EnvkitError("no command to run", where="envkit exec", fix="put the command after --, e.g. envkit exec -- python train.py")
    prog = argv[0]
    if os.sep in prog:
        if os.path.isfile(prog) and os.access(prog, os.X_OK):
            return prog
        raise EnvkitError("not found or not executable", where=prog, fix="check the path (chmod +x for a script)")
    found = shutil.which(prog, path=env.get("PATH"))
    if not found:
        raise EnvkitError(f"command not found: {prog}", where="envkit exec",
                          fix="check the name; the managed venv's bin/ and your PATH were searched")
    return found
