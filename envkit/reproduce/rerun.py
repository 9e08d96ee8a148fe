"""Train again, into a new run folder beside the original (`<run-id>-repro1`, `-repro2`, ...), as the
user would, exactly as the plan says (plan.py): `envkit run` with the run's declared config (its
values exactly, so the config hash is the same; the runs folder given as an absolute path, which the
hash leaves out) and the run's profile, training with the reproduction's venv (--python); `envkit
exec --run-dir` with the plan's command in the plan's working directory, the venv made the managed
one (ENVKIT_HOME). `--steps N`: `--stop-after N` for `envkit run`; for exec, ENVKIT_STOP_AFTER_STEP=N
(in the plan's variables), which envkit.track.log honours by ending the script (exit 0) once it has
logged step N. Both go through this envkit's command line in a child process, with the run's own
envkit code first on PYTHONPATH when it was put back in a worktree."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
import yaml

from envkit.config.batch_auto import KEY, declared_auto
from envkit.errors import EnvkitError
from envkit.reproduce.check import CannotReproduce
from envkit.reproduce.restore import temp_folder
from envkit.reproduce.venv import python_of

from envkit.reproduce.plan import Plan


def next_dir(run_dir: Path) -> Path:
    """RUN-reproN beside the run, made here (mkdir, never exist_ok): two reproductions started at
    once each get their own, the second taking the next N."""
    for i in range(1, 1000):
        d = run_dir.parent / f"{run_dir.name}-repro{i}"
        try:
            d.mkdir()
            return d
        except FileExistsError:
            continue
        except OSError as exc:
            raise CannotReproduce(f"cannot make the reproduction's folder {d}: {exc.strerror or exc}", where=str(run_dir),
                                  fix="reproduce a run folder in a place you can write") from None
    raise CannotReproduce("too many reproductions beside this run", where=str(run_dir))


def _slug(name: str) -> str:
    """A folder name as `envkit run` makes it (plan/run_folders.py: experiment_dir)."""
    return re.sub(r"[^\w.-]+", "-", name).strip("-") or "run"


def _declared(plan: Plan) -> dict:
    """{values, origin, derived} of the run's config: the sealed record's (record.json `config`);
    config.json's only for a record from before it kept the declared values."""
    cfg = plan.record.config
    if cfg.get("declared"):
        return {"values": cfg["declared"], "origin": cfg.get("origin") or {}, "derived": cfg.get("derived_at_start") or {}}
    return plan.folder.config

def run_config(plan: Plan, new_dir: Path) -> tuple[Path, list[str], list[str]]:
    """(a train.yaml of the run's declared values, the --set pins, notes). batch_size auto is pinned
    to the number the probe chose when the run started: probing again could choose another."""
    run_dir = plan.folder.path
    saved = _declared(plan)
    for what, name in (("folder holding the run folder", run_dir.parent.name), ("run folder", new_dir.name)):
        if _slug(name) != name:  # `envkit run` would train into another folder
            exp = (saved.get("values") or {}).get("experiment", {}).get("name") or "NAME"
            raise CannotReproduce(f"the {what}'s name {name!r} is not one `envkit run` can train beside (letters, digits, "
                                  "'.', '_' and '-' only)", where=str(run_dir),
                                  fix=f"move the run folder to runs/{_slug(str(exp))}/{_slug(run_dir.name)}/ and reproduce it there")
    origin = saved.get("origin") or {}
    # the values that were set (train.yaml, --set, the profile): a default stays a default, and a key
    # that does not apply to the model is never written (config.py refuses it)
    values: dict = {}
    for section, kv in (saved.get("values") or {}).items():
        for key, value in kv.items():
            if origin.get(f"{section}.{key}", "default") != "default":
                values.setdefault(section, {})[key] = value
    # beside the run wherever its folder is now (unpacked or moved under another name): the runs
    # folder and the experiment's name are the run folder's own (the config hash leaves both out)
    values.setdefault("experiment", {})["output_dir"] = str(run_dir.parent.parent.resolve())
    values["experiment"]["name"] = run_dir.parent.name
    pins, notes = [], []
    derived = saved.get("derived") or {}
    if declared_auto(values) and KEY in derived:
        pins.append(f"{KEY}={derived[KEY]}")
        notes.append(f"{KEY} auto: pinned to {derived[KEY]}, as the probe chose when the run started")
    path = temp_folder("config") / "train.yaml"  # removed by rerun; a killed one's by the next reproduction
    path.write_text(f"# envkit reproduce {run_dir}: the run's declared config\n" + yaml.safe_dump(values, sort_keys=False))
    return path, pins, notes


def processes(plan: Plan, say) -> list[str]:
    """`--nproc-per-node N` for the run's own process count (plan.py: the sealed record's): how a
    batch is split over processes and their gradients summed is part of the arithmetic. A run of
    several machines is trained here with all its processes (the same splits and sums)."""
    if plan.processes <= 1:
        return []
    if plan.record.nodes > 1:
        say(f"note: the run trained on {plan.record.nodes} machines, {plan.processes} processes in all: trained here with "
            f"--nproc-per-node {plan.processes}")
    return ["--nproc-per-node", str(plan.processes)]

def command(plan: Plan, new_dir: Path, steps: int | None, device: str | None, elsewhere: bool, say) -> tuple[list[str], Path | None]:
    """(the command that trains the reproduction, a temporary folder to remove after it)."""
    if plan.kind == "exec":
        new_dir.mkdir(parents=True, exist_ok=True)  # next_dir made it
        return [sys.executable, "-m", "envkit", "exec", *(["--profile", plan.profile] if plan.profile else []),
                "--run-dir", str(new_dir), "--", *plan.command], None
    path, pins, notes = run_config(plan, new_dir)
    for n in notes:
        say(f"note: {n}")
    profile = None if elsewhere else plan.record.config.get("profile")
    if elsewhere and device is None:
        device = "auto"
    pins += [f"device.type={device}"] if device else []
    return [sys.executable, "-m", "envkit", "run", str(path), "--run-id", new_dir.name, "--resume", "never",
            "--python", python_of(plan.venv), *(["--profile", profile] if profile else []),
            *[a for p in pins for a in ("--set", p)], *(["--stop-after", str(steps)] if steps else []),
            *processes(plan, say)], path.parent


def rerun(plan: Plan, new_dir: Path, steps: int | None, say, device: str | None = None, elsewhere: bool = False) -> int:
    """Train the reproduction as planned; its exit code. `device`: train on it (--device). A run from
    another machine trains with this machine's profile and device (its own named an MPS device, say,
    that a CUDA box has not); every value the run had stays pinned in its config, batch size included."""
    env = {**os.environ, **plan.env}
    for note in plan.threads_notes:
        say(f"note: {note}")
    threads = {k: v for k, v in plan.env.items() if k in plan.threads}
    if threads:
        say("threads as the run had them (its environment.json): " + ", ".join(f"{k}={v}" for k, v in threads.items()))
    if any(plan.cwd.is_relative_to(tree) for tree in plan.folders.values()):
        plan.cwd.mkdir(parents=True, exist_ok=True)  # a folder of the tree that git holds no file of
    temp = None
    try:
        cmd, temp = command(plan, new_dir, steps, device, elsewhere, say)
        say(f"training again into {new_dir}: {' '.join(cmd[3:])}")
        return subprocess.run(cmd, env=env, cwd=plan.cwd, stdout=sys.stderr, check=False).returncode
    except EnvkitError:
        if new_dir.is_dir() and not any(new_dir.iterdir()):
            new_dir.rmdir()  # nothing trained: the next reproduction takes the same N
        raise
    finally:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)
