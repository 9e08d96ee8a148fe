"""The parent side of `envkit run` (no torch here): given a Plan (envkit/plan/), write the run's
config and environment files and start the trainer as a child of the managed environment's Python
(or this interpreter), with the profile's environment set before that Python starts; torchrun for
several processes (torchrun.py). The parent passes signals on and reads how the child ended.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from envkit.config.config import Config, to_yaml
from envkit.errors import EnvkitError
from envkit.facts import bytecode_cache
from envkit.fsutil import atomic_write_text
from envkit.launch import auto_batch
from envkit.launch.spawn import ask_to_checkpoint, release_child, spawn_child
from envkit.launch.torchrun import child_command, child_entry
from envkit.config.batch_auto import is_auto
from envkit.plan.model import Plan
from envkit.record.code import InsideRunFolder, git
from envkit.redact import recorded_env, redact_argv
from envkit.train.run.stopping import exit_code  # the trainer's own rule, shared with its process
from envkit.runfolder.owner import owner_lock_state, take_owner_lock
from envkit.runfolder.seal import seal_results
from envkit.runfolder.liveness import notice_killed
from envkit.runfolder.progress import Summary
from envkit.runfolder.folder import RunFolder
from envkit.runfolder.records import RunStatus

if TYPE_CHECKING:
    from envkit.profiles.resolve import Profile


def _config(p: Plan) -> Config:
    """The run's config (cfg and facts are None only in a plan of `envkit exec`, which never reaches here)."""
    if p.cfg is None:
        raise ValueError("a plan without a config (envkit exec's) has no run files")
    return p.cfg


# ---------------------------------------------------------------- files


def clean_environ(env: dict) -> dict:
    """What environment.json records of the child's environment: the allow-list of envkit/redact.py."""
    return recorded_env(env)


def git_commit(folder: Path) -> dict | None:
    """The commit of the repository holding `folder`, and whether its tracked files differ from it,
    for environment.json. Through record/code.py's one git helper: a repository's own hooks and
    fsmonitor run nothing (this used to call plain `git status`, which ran a core.fsmonitor program
    from the repository's config on every `envkit run` there), and no index lock is taken."""
    try:
        head = git(folder, "rev-parse", "HEAD", timeout=5)
        if head is None or head.returncode != 0:
            return None
        dirty = git(folder, "status", "--porcelain", "--untracked-files=no", timeout=10)
    except InsideRunFolder:  # a config inside a run folder: that folder's repository is data, not the code
        return None
    return {"commit": head.stdout.decode(errors="replace").strip(),
            "dirty": bool(dirty is not None and dirty.stdout.strip()), "folder": str(folder)}


class DiskFullAtStart(EnvkitError):
    """No space left while writing a run's files before training: nothing was changed (each file
    is written atomically, so config.json and the checkpoints are as they were). A fact about the
    machine, not bad input: exit code 1, as for a run that stopped on a full disk (disk_full)."""

    exit_code = 1


def write_run_files(p: Plan, run_dir: Path, child_env: dict):
    """config.json, config.yaml, environment.json; a full disk is one line (disk_full), nothing lost.
    Returns the thread finishing the run's record (None: a resumed run's record is its start's)."""
    import errno

    try:
        return _write_run_files(p, run_dir, child_env)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        what = Path(exc.filename).name if exc.filename else "the run's files"
        raise DiskFullAtStart(f"disk_full: no space left on the device while writing {what} in {run_dir} before training; "
                              "nothing was changed (config.json and the checkpoints are as they were)", where=str(run_dir),
                              fix="free some space, then run the same command again: it resumes") from None


def _inject_disk_full_at_start(path: Path) -> None:
    """ENVKIT_TRAIN_INJECT=diskfull@start: the first file written before training meets a full disk
    (train/recovery/injection.py's other faults fire inside the trainer; this one in envkit's process)."""
    from envkit.train.recovery import injection

    inject = injection.from_env()
    if inject:
        inject.fail_at_start(path)


def _write_run_files(p: Plan, run_dir: Path, child_env: dict):
    from envkit.checks.report import diagnose

    cfg = _config(p)
    if p.facts is None:
        raise ValueError("a plan without the machine's facts (envkit exec's) has no run files")
    folder = RunFolder(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    _inject_disk_full_at_start(folder.config_file)
    folder.checkpoints.mkdir(exist_ok=True)
    resolved = cfg.resolved()
    resolved["torch_settings"] = _torch_settings(p.profile)
    folder.write_config(resolved, redacted=False)
    atomic_write_text(folder.config_yaml, f"# resolved config (profile {cfg.profile or 'none'}); origins in config.json\n" + to_yaml(cfg))
    d = diagnose(p.facts).to_dict()
    src = Path(cfg.source).resolve().parent if cfg.source not in ("<defaults>",) else Path.cwd()
    env_doc = {
        "created_at": time.time(), "python": p.python, "argv": redact_argv(sys.argv),
        "managed": str(p.managed.root) if p.managed else None,
        "profile": cfg.profile, "profile_env": dict(p.profile.env) if p.profile else {},
        "user_env": p.profile.user_kept() if p.profile is not None else {},
        "doctor": d, "packages": d["facts"].get("packages"),
        "environ": clean_environ(child_env), "git": git_commit(src),
    }

    # argv, the profile's variables and doctor's facts may hold URLs too: none keeps its credentials
    folder.write_environment(env_doc)
    from envkit.record.start import write_run_record

    return write_run_record(run_dir, python=p.python, config=cfg, project=src, facts=p.facts,  # pylock.toml, code/, record.json
                            processes={"world": p.request.world, "nodes": p.request.node_count})



# ---------------------------------------------------------------- the child


def stage_for_node(p: Plan, run_dir: Path, node_rank: int) -> Path:
    """Node R > 0 writes nothing into the run folder (rank 0 of node 0 alone does): its processes
    read the resolved config from a private folder, whose checkpoints/ is the run folder's when
    that folder is visible here (a shared filesystem: resume works on every node)."""
    import tempfile

    stage = Path(tempfile.mkdtemp(prefix=f"envkit-node{node_rank}-"))
    resolved = _config(p).resolved()
    resolved["torch_settings"] = _torch_settings(p.profile)
    RunFolder(stage).write_config(resolved, redacted=False)
    if RunFolder(run_dir).checkpoints.is_dir():
        RunFolder(stage).checkpoints.symlink_to(RunFolder(run_dir).checkpoints, target_is_directory=True)
    return stage


def _torch_settings(profile: Profile | None) -> dict | None:
    """What the child applies before it builds anything (the profile's [torch] table)."""
    return dict(profile.torch) if profile else None


def child_environ(profile: Profile | None, nproc: int = 1, python: str | None = None) -> dict:
    """The trainer's environment: the profile's variables, and for `python` envkit's bytecode cache where
    one was made for it (facts/bytecode_cache.py)."""
    env = profile.child_environ(dict(os.environ)) if profile is not None else dict(os.environ)
    env = bytecode_cache.child_environ(env, python)
    env["PYTHONUNBUFFERED"] = "1"
    if nproc > 1:
        env["OMP_NUM_THREADS"] = omp_threads_per_process(profile.env if profile else {}, env, nproc)
    return env


def omp_threads_per_process(profile_env: Mapping[str, str], env: dict, nproc: int) -> str:
    """OpenMP threads for each of nproc torchrun processes. The profile's OMP_NUM_THREADS (in
    `profile_env`, its variables) is meant for the whole machine (one per physical core), so each
    process gets its share; without one, the machine's cores are shared out. A value the user
    exported is kept as it is (per process, as torchrun reads it). Either way torchrun finds the
    variable set and does not print its banner."""
    from_profile = profile_env.get("OMP_NUM_THREADS")
    if os.environ.get("OMP_NUM_THREADS"):
        return os.environ["OMP_NUM_THREADS"]
    try:
        total = int(from_profile) if from_profile is not None else (os.cpu_count() or 1)
    except ValueError:
        total = os.cpu_count() or 1
    return str(max(1, total // nproc))


def launch(cmd: list[str], env: dict, owner=None, stdout=None) -> int:
    """Run the child; the parent ignores Ctrl-C meanwhile so the child can checkpoint cleanly. The
    child dies with envkit's process and holds the owner lock with it (spawn_child). `stdout`: where
    the child's lines go (`--json` sends them to stderr: stdout holds the JSON alone)."""
    proc = spawn_child(cmd, env, owner, **({"stdout": stdout} if stdout is not None else {}))
    # SIGUSR1 (Slurm's warning before a time limit, passed on by envkit's job script): the trainer
    # checkpoints after this step and stops. SIGTERM (`timeout`, `kill`, a Slurm preemption) goes on as
    # SIGTERM: the same, but a step still under way seconds later is given up (train/run/stopping.py),
    # so the whole tree ends promptly; torchrun passes it to its workers. This process waits for it.
    def ask(signum, frame) -> None:
        ask_to_checkpoint(proc)

    def stop(signum, frame) -> None:
        _terminate(proc)

    old = {s: signal.signal(s, h) for s, h in ((signal.SIGINT, signal.SIG_IGN), (signal.SIGTERM, stop), (signal.SIGUSR1, ask))}
    try:
        return proc.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        release_child(proc)


def _terminate(proc: subprocess.Popen) -> None:
    try:
        proc.send_signal(signal.SIGTERM)
    except ProcessLookupError:
        pass


def interrupted_exit_code(rc: int, summary: Summary | None) -> int | None:
    """The exit code of a run that was interrupted (summary.json says so): 128 + the signal's number,
    as a shell reports a process that signal ended (130 Ctrl-C, 143 SIGTERM), so `envkit run && next`
    does not go on as if it had finished. None for a run that was not interrupted."""
    if rc == 130 and not (summary and summary.state is RunStatus.INTERRUPTED):
        return 130  # aborted by a second Ctrl-C before its summary
    if not summary or summary.state is not RunStatus.INTERRUPTED:
        return None
    return exit_code(summary.get("signal"))


# ---------------------------------------------------------------- one run, start to end


def start(p: Plan, *, stop_after: int | None, debug: bool, profile_steps: tuple[int, int] | None, say, stdout=None) -> int:
    """Train the one run of a plan: its batch decided, its folder owned and its files written (node
    0; another node stages a private folder), the child started and waited for. Returns the child's
    exit code. `say` gets the lines for the user (stderr)."""
    run, nodes, nproc = p.runs[0], p.nodes, p.request.nproc
    if run.note:
        say(run.note)
    env = child_environ(p.profile, nproc, p.python)
    if run.batch_note:
        say(run.batch_note)
    p = decide_batch(p, say)
    child_dir, owner, recording = run.run_dir, None, None
    if nodes.node_rank == 0:
        if run.resuming:  # a folder whose owner died without a summary: say so in it before resuming
            if owner_lock_state(run.run_dir) == "free":
                notice_killed(run.run_dir, "envkit run")  # nothing when its summary is the newest word
        owner = take_owner_lock(run.run_dir, "envkit run")  # one process trains in a run folder; released when it dies
        recording = write_run_files(p, run.run_dir, env)
    else:
        child_dir = stage_for_node(p, run.run_dir, nodes.node_rank)
    cmd = child_command(p.python, child_dir, stop_after=stop_after, resume=p.request.resume, nproc=nproc, debug=debug,
                        nodes=nodes, profile_steps=profile_steps)
    say(f"{'resuming' if run.resuming else 'starting'} run {run.run_dir}")
    try:
        rc = launch(cmd, env, owner, stdout=stdout)
        if nodes.node_rank == 0:
            sealed_when_ended(run.run_dir, recording)
        return rc
    finally:
        if nodes.node_rank > 0:
            import shutil

            shutil.rmtree(child_dir, ignore_errors=True)


def sealed_when_ended(run_dir: Path, recording) -> None:
    """The record finished, then the seal made again over the run's results (runfolder/seal.py:
    seal_results), while this process still owns the folder."""
    if recording is not None:
        recording.join()
    seal_results(run_dir)


def decide_batch(p: Plan, say) -> Plan:
    """training.batch_size: auto -> a number, probed on this machine before the run (a resumed run
    kept the number it started with: the plan has it); said in one line before the run starts."""
    if not is_auto(_config(p)):
        return p
    cfg, choice = auto_batch.resolve(_config(p), python=p.python, env=child_environ(p.profile, 1, p.python), child_entry=child_entry(),
                                     torch_settings=_torch_settings(p.profile), world=p.request.world, echo=say)
    say(choice.note)
    return p.with_cfg(cfg)
