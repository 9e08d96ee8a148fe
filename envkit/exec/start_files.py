"""The run folder of an exec run, runs/<name>/<run-id>/, laid out like the trainer's so that
`envkit runs`, `monitor` and `plot` read both: config.json (what ran, kind "exec"),
environment.json (redacted: envkit/redact.py), train.log, metrics.jsonl (envkit.track),
heartbeat.json (from envkit's process) and summary.json."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

from envkit.install.lock import single
from envkit.redact import is_secret, recorded_env, redact_argv
from envkit.runfolder.folder import RunFolder
from envkit.runfolder.links import refuse_links

_PYTHONS = re.compile(r"^(python[\d.]*|pypy[\d.]*|torchrun|accelerate|uv|deepspeed)$")


def run_name(argv: list[str]) -> str:
    """The script's stem: `python -u train.py` -> train, `python -m pkg.train` -> train, `./go.sh` -> go."""
    args = list(argv)
    if args and _PYTHONS.match(Path(args[0]).name):
        rest = args[1:]
        while rest:
            a = rest.pop(0)
            if a == "-m" and rest:
                return _clean(rest[0].rpartition(".")[2])
            if a in ("-c",):
                break
            if not a.startswith("-"):
                return _clean(Path(a).stem)
    return _clean(Path(args[0]).stem) if args else "exec"


def _clean(name: str) -> str:
    return re.sub(r"[^\w.-]+", "-", name).strip("-.") or "exec"


def write_start_files(run_dir: Path, *, command: list[str], launched: list[str], env, child_env: dict, managed, versions: dict,
                      options: dict):
    """config.json (the command and options), environment.json (where it ran) and the run's code
    state (record/start.py), before it starts; returns the thread making the environment's lock,
    which the caller joins before it returns (record.json is written then). A folder holding a
    symlink where envkit writes is refused first (runfolder.links.refuse_links)."""
    refuse_links(run_dir)
    folder = RunFolder(run_dir)
    folder.write_config({
        "kind": "exec", "name": run_dir.parent.name, "command": redact_argv(command), "launched": redact_argv(launched), "cwd": os.getcwd(),
        "profile": env.profile, "options": options, "created_at": time.time()})
    folder.write_environment({
        "created_at": time.time(), "argv": redact_argv(sys.argv), "cwd": os.getcwd(), "command": redact_argv(command),
        "managed": str(managed.root) if managed else None, "venv": env.venv, "profile": env.profile,
        # which value each profile variable has and who set it; a user's secret-named variable shows no value
        "profile_env": {k: ({**v, "value": "***"} if _secret(k) else v) for k, v in env.won.items()},
        "lock": lock_info(managed), "versions": versions, "environ": recorded_env(child_env)})
    from envkit.record.start import write_run_record

    return write_run_record(run_dir, python=versions.get("interpreter"), command=list(command),
                            profile=env.profile)  # pylock.toml, code/, record.json


def _secret(name: str) -> bool:
    return is_secret(name)


def lock_info(managed) -> dict | None:
    """The lock the managed env was built from: its path and sha256 (None without one)."""
    import hashlib

    path = ((getattr(managed, "state", None) or {}).get("lock")) if managed else None
    if not path or not Path(path).is_file():
        found = single.default_path()  # pylock.machine.toml, else an envkit.lock from before the rename
        path = str(found) if found else None
    if not path:
        return None
    return {"path": str(Path(path).resolve()), "sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest()}
