"""Run a sweep's combinations as ordinary run folders: runs/<experiment>/<combination>/.

Each combination is planned as `envkit run` plans a run (envkit/plan/: the same resolved config and
refusals) and started through its parent side (launcher.py): the same run files and child process.
A folder whose summary says completed is skipped; an unfinished one is resumed from its newest
checkpoint; a folder started with a different config stops the sweep before anything runs (nothing
is overwritten). A run folder another process trains in (a second `envkit sweep` of the same grid,
an `envkit run` of it) is skipped, said in one line naming that process: the sweep holds each run
folder's owner lock (runfolder.owner.take_owner_lock) while it trains it, and its trainers die with it
(spawn.spawn_child). `parallel` runs at once; on a machine with several CUDA GPUs each run gets its
own (CUDA_VISIBLE_DEVICES)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from envkit.errors import EnvkitError
from envkit.plan import Plan, RunRequest, make_plan
from envkit.plan.grid import Combination
from envkit.plan.model import RunState
from envkit.plan.run_folders import run_state
from envkit.launch import launcher
from envkit.launch.spawn import release_child, spawn_child
from envkit.launch.torchrun import child_command
from envkit.sweep.pack import choose as choose_pack
from envkit.sweep.request import SweepRequest
from envkit.runfolder.owner import owner_holder, read_owner, take_owner_lock
from envkit.runfolder.applog import open_append
from envkit.runfolder.progress import Summary
from envkit.runfolder.folder import RunFolder


@dataclass
class SweepRun:
    combo: Combination
    plan: Plan  # this combination's plan (its config; the machine, profile and interpreter are the sweep's)
    run_dir: Path
    start: RunState  # what its folder held when last looked at (completed: skipped)
    status: str | None = None  # once it ran, its own (summary.json's, else "exited N"); "in use" when another process trains it
    rc: int | None = None
    recording: object = None  # the thread finishing its record (launcher.write_run_files), joined when it ends

    @property
    def shown(self) -> str:
        """Its word in the table where summary.json has none: the status it ended with, else its start."""
        return self.status or self.start


def prepare(req: SweepRequest, slurm_nodes: int | None = None) -> list[SweepRun]:
    """Every combination resolved, placed and checked (envkit/plan/), before anything runs: a bad
    value stops it all here. slurm_nodes: submitted with --slurm to that many nodes (the login node
    is not the machine that trains: nothing is held against it)."""
    p = make_plan(RunRequest(req.config, tuple(req.overrides), req.profile, req.python, sweep=True, max_runs=req.max_runs,
                             slurm_nodes=slurm_nodes))
    runs = []
    for r in p.runs:
        assert r.combination is not None  # make_plan gives each of a sweep's runs its combination
        runs.append(SweepRun(r.combination, p.of(r), r.run_dir, r.state))
    return runs


def train_here(runs: list[SweepRun], req: SweepRequest, pack: int | Literal["auto"] | None, say) -> bool:
    """Train what is not completed on this machine, `req.at_once(pack)` at a time (--pack auto:
    measured first); whether Ctrl-C interrupted it."""
    if runs and runs[0].plan.managed is None and not req.python:
        say(f"note: no `envkit setup` environment here: training with {sys.executable}")
    todo = sum(r.start != "completed" for r in runs)
    parallel = _packed(runs, say) if pack == "auto" and runs else req.at_once(pack)
    say(f"sweep: {len(runs)} runs ({len(runs) - todo} completed, {todo} to run, {parallel} at a time) "
        f"under {runs[0].run_dir.parent if runs else '?'}")
    return execute(runs, parallel=parallel, gpus=gpu_count(runs[0].plan.facts) if runs else 0,
                   stop_after=req.stop_after, debug=req.debug, say=say, quiet_stdout=req.as_json)  # --json: stdout holds the JSON alone


def _packed(runs: list[SweepRun], say) -> int:
    """--pack auto: one run per GPU where there are several, else the count measured on the one device."""
    gpus = gpu_count(runs[0].plan.facts)
    if gpus > 1:  # the runs already spread one per GPU: packing measures one device
        say(f"pack: {gpus} at a time, one run per GPU ({gpus} GPUs here; --pack auto measures a single device)")
        return gpus
    return choose_pack([r for r in runs if r.start != "completed"], runs[0].plan.python,
                       launcher.child_environ(runs[0].plan.profile, 1, runs[0].plan.python), say)


def execute(runs: list[SweepRun], *, parallel: int = 1, gpus: int = 0, stop_after: int | None = None,
            debug: bool = False, say=print, quiet_stdout: bool = False) -> bool:
    """Run what is not completed, `parallel` at a time. Ctrl-C: the runs checkpoint and stop (they
    share the terminal's signal), no new run starts, and the next `envkit sweep` resumes them.
    Returns whether it was interrupted so."""
    todo = [r for r in runs if r.start != "completed"]
    for r in runs:
        if r.start == "completed":
            say(f"skip    {r.combo.run_id}: completed ({r.run_dir})")
    free_slots = list(range(max(1, parallel)))
    active: dict[subprocess.Popen, tuple[SweepRun, int, IO]] = {}  # the run, its slot, its owner lock (open)
    interrupted = {"yes": False}

    def on_sigint(signum, frame):  # the children got it too: let them checkpoint, start nothing new
        interrupted["yes"] = True

    old = signal.signal(signal.SIGINT, on_sigint)
    try:
        while (todo and not interrupted["yes"]) or active:
            while todo and free_slots and not interrupted["yes"]:
                r = todo.pop(0)
                owner = _own(r, say)
                if owner is None:
                    continue
                slot = free_slots.pop(0)
                try:
                    active[_start(r, slot, gpus, parallel, stop_after, debug, say, owner, quiet_stdout)] = (r, slot, owner)
                except BaseException:
                    owner.close()
                    raise
            time.sleep(0.2)
            for proc in [p for p in active if p.poll() is not None]:
                r, slot, owner = active.pop(proc)
                release_child(proc)
                launcher.sealed_when_ended(r.run_dir, r.recording)  # the results under the seal, while the folder is ours
                owner.close()  # the run folder is free again
                r.rc = proc.returncode
                r.status = (RunFolder(r.run_dir).summary() or Summary()).status or f"exited {r.rc}"
                free_slots.append(slot)
                say(f"{'done' if r.status == 'completed' else r.status:<8}{r.combo.run_id} (exit {r.rc})")
                if r.rc == 2 and todo:  # a bad config or data file: every other run would meet it too
                    say(f"stopping: {r.combo.run_id} stopped on bad input (exit 2; its error is above or in {r.run_dir})")
                    todo.clear()
    finally:
        signal.signal(signal.SIGINT, old)
    if interrupted["yes"]:
        say("interrupted: `envkit sweep` again resumes the unfinished runs and skips the completed ones")
    return interrupted["yes"]


def _own(r: SweepRun, say):
    """The run folder's owner lock, or None (said in one line) when another process trains in it or
    has completed it since the sweep started: skipped, not waited for, so two sweeps of one grid (or a
    sweep and a Slurm array of it) share its runs instead of training one twice. Whether it is done is
    decided here, holding the lock, at the moment it would start, not once when the sweep began."""
    if r.start == "new":
        r.run_dir.mkdir(parents=True, exist_ok=True)
    try:
        lock = take_owner_lock(r.run_dir, "envkit sweep")
    except EnvkitError:
        _, who = owner_holder(read_owner(r.run_dir))
        say(f"skip    {r.combo.run_id}: in use by {who}, "
            f"which trains it; not trained twice (`envkit monitor {r.run_dir}` watches it)")
        r.status = "in use"
        return None
    try:  # decided again now, under the lock: another sweep or a Slurm task may have finished it since prepare()
        assert r.plan.cfg is not None  # a sweep's plans are each made from its train.yaml
        r.start = run_state(r.plan.cfg, r.run_dir)
    except BaseException:
        lock.close()
        raise
    if r.start == "completed":
        lock.close()
        say(f"skip    {r.combo.run_id}: completed by another process since this sweep started ({r.run_dir}); not trained twice")
        return None
    return lock


def _start(r: SweepRun, slot: int, gpus: int, parallel: int, stop_after, debug: bool, say, owner=None,
           quiet_stdout: bool = False) -> subprocess.Popen:
    env = launcher.child_environ(r.plan.profile, 1, r.plan.python)
    where = ""
    if gpus > 1 and parallel > 1:
        env["CUDA_VISIBLE_DEVICES"] = str(slot % gpus)  # one GPU per run
        where = f" (GPU {env['CUDA_VISIBLE_DEVICES']})"
    elif parallel > 1 and _on_cpu(r):
        # runs training side by side on the CPU share its cores: the profile's one thread per core in
        # each of two runs made every step eight times slower on 2 cores. A value the user exported stays.
        env["OMP_NUM_THREADS"] = launcher.omp_threads_per_process(r.plan.profile.env if r.plan.profile else {}, env, parallel)
        where = f" ({env['OMP_NUM_THREADS']} CPU thread{'s' if env['OMP_NUM_THREADS'] != '1' else ''})"
    r.recording = launcher.write_run_files(r.plan, r.run_dir, env)
    cmd = child_command(r.plan.python, r.run_dir, stop_after=stop_after, resume="auto", nproc=1, debug=debug)
    say(f"{'resume' if r.start == 'resume' else 'start':<8}{r.combo.run_id} -> {r.run_dir}{where}")
    if parallel > 1:  # several at once: each run's console output goes to its folder, not interleaved here
        out = os.fdopen(open_append(r.run_dir / "console.log"), "ab")
        try:
            return spawn_child(cmd, env, owner, stdout=out, stderr=subprocess.STDOUT)
        finally:
            out.close()
    return spawn_child(cmd, env, owner, **({"stdout": sys.stderr} if quiet_stdout else {}))


def _on_cpu(r: SweepRun) -> bool:
    cfg = getattr(r.plan, "cfg", None)
    return getattr(getattr(cfg, "device", None), "type", None) == "cpu"


def gpu_count(facts) -> int:
    """The GPUs CUDA_VISIBLE_DEVICES hands out: NVIDIA's, or AMD's under ROCm (HIP honours it too);
    an Intel GPU is not one the trainer uses."""
    return len([g for g in getattr(facts, "gpus", None) or [] if getattr(g, "vendor", "nvidia") in ("nvidia", "amd")])
