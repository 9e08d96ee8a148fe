"""Train again, into a new run folder beside the original (`<run-id>-repro1`, `-repro2`, ...), as the
user would: `envkit run` with the run's declared config (its values exactly, so the config hash is
the same; the runs folder given as an absolute path, which the hash leaves out) and the run's
profile, training with the reproduction's venv (--python); `envkit exec --run-dir` with the run's
command in the restored code, the venv made the managed one (ENVKIT_HOME). `--steps N`: `--stop-after
N` for `envkit run`; for exec, ENVKIT_STOP_AFTER_STEP=N, which envkit.track.log honours by ending the
script (exit 0) once it has logged step N; the command's absolute paths into a recorded tree
are rewritten into its worktree, and it runs in the same relative working directory there (never
the run folder). Both go through this
envkit's command line in a child process, with the run's own envkit code first on PYTHONPATH when it
was put back in a worktree."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from envkit.checks.gates import gates
from envkit.errors import EnvkitError
from envkit.record.code import refuse_inside_run
from envkit.reproduce.check import CannotReproduce
from envkit.reproduce.restore import temp_folder
from envkit.reproduce.venv import HOME, python_of
from envkit.runfolder.bounded import RunFolderError
from envkit.runfolder.folder import RunFolder
from envkit.runfolder.records import MAX_PROCESSES
from envkit.track import STOP_VAR

if TYPE_CHECKING:
    from envkit.config.schema import DeviceType


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


def _env(restored, venv: Path) -> dict:
    env = dict(os.environ)
    envkit_tree = restored.folders.get("envkit")
    if envkit_tree is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(envkit_tree), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    env["ENVKIT_HOME"] = str(venv / HOME)
    return env


def _same_threads(run_dir: Path, env: dict, say) -> None:
    """The thread counts the run had (OMP_NUM_THREADS and friends, from its environment.json): on
    the CPU they are part of the arithmetic (how a sum is split between threads), so a run of a
    sweep that shared the cores, or one started with a count exported, differs at another count.
    Not for another machine or device, which train with this machine's profile."""
    try:
        recorded = RunFolder(run_dir).environment.environ  # read bounded; only string values kept
    except RunFolderError:
        return
    names = gates()["env"]["threads"]["names"]
    # a run folder may come from someone else: only a count (a positive integer) is applied
    kept = {n: str(recorded[n]) for n in names if n in recorded}
    bad = {n: v for n, v in kept.items() if not re.fullmatch(r"[1-9][0-9]{0,5}", v)}
    if bad:
        say("note: not applied, not a thread count: " + ", ".join(f"{k}={v[:40]!r}" for k, v in bad.items()))
    cores = os.cpu_count() or 1
    over = {n: v for n, v in kept.items() if n not in bad and int(v) > cores}
    if over:  # a count from another machine (or a crafted one): never more threads than this machine has cores
        say("note: capped at this machine's " + f"{cores} cores: " + ", ".join(f"{k}={v}" for k, v in over.items()))
        kept.update({n: str(cores) for n in over})
    changed = {n: v for n, v in kept.items() if n not in bad and env.get(n) != v}
    if changed:
        env.update(changed)
        say("threads as the run had them (its environment.json): " + ", ".join(f"{k}={v}" for k, v in changed.items()))


def _cwd(restored, recorded: str | None, run_dir: Path, fallback: Path | None = None) -> Path:
    """The run's working directory, in its worktree when it lay in a restored tree (the same
    relative folder; made there when git holds no file of it). Never inside the run folder. A
    folder gone from outside the trees: `fallback` (an `envkit run` run: its paths are absolute), else exit 2."""
    if recorded:
        refuse_inside_run(recorded, "working directory", run_dir)
        here = restored.inside(recorded)
        if here is not None:
            here.mkdir(parents=True, exist_ok=True)
            return here
        if Path(recorded).is_dir():
            return Path(recorded)
    if fallback is not None:
        return fallback
    raise CannotReproduce(f"the run's working directory {recorded or '(not recorded)'} is not on this machine", where=str(run_dir),
                          fix="make that folder again (or clone the run's repository there), then reproduce again")


def _saved_profile(run_dir: Path) -> str | None:
    """An exec run recorded before its record named the profile: config.json's, where it is a name."""
    profile = RunFolder(run_dir).config.get("profile")
    return profile if isinstance(profile, str) else None


def in_venv(command: list[str], recorded_python: str | None, venv: Path) -> list[str]:
    """The command with the run's interpreter, named by its absolute path, replaced by the
    reproduction venv's: the run's packages are that venv's now (a bare `python` finds it on PATH)."""
    if command and recorded_python and Path(command[0]).is_absolute():
        same = command[0] == recorded_python or Path(command[0]).parent == Path(recorded_python).parent
        if same and Path(command[0]).name.startswith("python"):
            return [python_of(venv), *command[1:]]
    return command


def _slug(name: str) -> str:
    """A folder name as `envkit run` makes it (plan/rundirs.py: experiment_dir)."""
    return re.sub(r"[^\w.-]+", "-", name).strip("-") or "run"


def _declared(run_dir: Path, rec: dict) -> dict:
    """{values, origin, derived} of the run's config: the sealed record's (record.json `config`);
    config.json's only for a record from before it kept the declared values."""
    cfg = rec.get("config") or {}
    if cfg.get("declared"):
        return {"values": cfg["declared"], "origin": cfg.get("origin") or {}, "derived": cfg.get("derived_at_start") or {}}

    return RunFolder(run_dir).config


def run_config(run_dir: Path, new_dir: Path, rec: dict | None = None) -> tuple[Path, list[str], list[str]]:
    """(a train.yaml of the run's declared values, the --set pins, notes). batch_size auto is pinned
    to the number the probe chose when the run started: probing again could choose another."""
    saved = _declared(run_dir, rec or {})
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
    if values.get("training", {}).get("batch_size") == "auto" and "training.batch_size" in derived:
        pins.append(f"training.batch_size={derived['training.batch_size']}")
        notes.append(f"training.batch_size auto: pinned to {derived['training.batch_size']}, as the probe chose when the run started")
    path = temp_folder("config") / "train.yaml"  # removed by rerun; a killed one's by the next reproduction
    path.write_text(f"# envkit reproduce {run_dir}: the run's declared config\n" + yaml.safe_dump(values, sort_keys=False))
    return path, pins, notes


def processes(run_dir: Path, rec: dict, say) -> list[str]:
    """`--nproc-per-node N` for the run's own process count: how a batch is split over processes and
    their gradients summed is part of the arithmetic (one process trains another sum, and with a
    batch_size per process another batch). The sealed record's count; a record from before it kept
    one: summary.json's world_size. A run of several machines is trained here with all its processes
    (the same splits and sums; on the CPU gloo's, on GPUs it needs as many of them here)."""
    recorded = rec.get("processes") or {}
    world, nodes = recorded.get("world"), recorded.get("nodes") or 1
    if world is None:
        world = RunFolder(run_dir).summary.get("world_size")
    if not isinstance(world, int) or isinstance(world, bool) or not 1 < world <= MAX_PROCESSES:
        return []
    if nodes > 1:
        say(f"note: the run trained on {nodes} machines, {world} processes in all: trained here with --nproc-per-node {world}")
    return ["--nproc-per-node", str(world)]


def rerun(run_dir: Path, rec: dict, new_dir: Path, venv: Path, restored, steps: int | None, say, device: DeviceType | None = None,
          elsewhere: bool = False) -> int:
    """Train the reproduction; its exit code. `device`: train on it (--device). A run from another
    machine trains with this machine's profile and device (its own named an MPS device, say, that a
    CUDA box has not); every value the run had stays pinned in its config, batch size included."""
    env = _env(restored, venv)
    if not elsewhere and device is None:
        _same_threads(run_dir, env, say)
    temp = None
    try:
        if rec.get("kind") == "exec":
            if steps is not None:
                env[STOP_VAR] = str(steps)  # envkit.track.log ends the script once it logs step N
            new_dir.mkdir(parents=True, exist_ok=True)  # next_dir made it
            # the command, profile and working directory are the sealed record's, not config.json's
            profile = rec.get("profile") or _saved_profile(run_dir)
            command = in_venv(list(rec["command"]), rec.get("python"), venv)
            cmd = [sys.executable, "-m", "envkit", "exec", *(["--profile", profile] if profile else []),
                   "--run-dir", str(new_dir), "--", *restored.argv_for(command)]
            cwd = _cwd(restored, rec.get("cwd"), run_dir)
        else:
            path, pins, notes = run_config(run_dir, new_dir, rec)
            temp = path.parent
            for n in notes:
                say(f"note: {n}")
            profile = None if elsewhere else (rec.get("config") or {}).get("profile")
            if elsewhere and device is None:
                device = "auto"
            pins += [f"device.type={device}"] if device else []
            cmd = [sys.executable, "-m", "envkit", "run", str(path), "--run-id", new_dir.name, "--resume", "never",
                   "--python", python_of(venv), *(["--profile", profile] if profile else []),
                   *[a for p in pins for a in ("--set", p)], *(["--stop-after", str(steps)] if steps else []),
                   *processes(run_dir, rec, say)]
            cwd = _cwd(restored, rec.get("cwd"), run_dir, fallback=run_dir.parent.parent.parent)
        say(f"training again into {new_dir}: {' '.join(cmd[3:])}")
        return subprocess.run(cmd, env=env, cwd=cwd, stdout=sys.stderr, check=False).returncode
    except EnvkitError:
        if new_dir.is_dir() and not any(new_dir.iterdir()):
            new_dir.rmdir()  # nothing trained: the next reproduction takes the same N
        raise
    finally:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)
