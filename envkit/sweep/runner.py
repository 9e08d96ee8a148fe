"""Run a sweep's combinations as ordinary run folders: runs/<experiment>/<combination>/.

Each combination goes through `envkit run`'s parent side (launcher.py): the same resolved config,
run files and child process. A folder whose summary says completed is skipped; an unfinished one is
resumed from its newest checkpoint; a folder started with a different config stops the sweep
before anything runs (nothing is overwritten). A run folder another process trains in (a second
`envkit sweep` of the same grid, an `envkit run` of it) is skipped, said in one line naming that
process: the sweep holds each run folder's owner lock (fsutil.take_owner_lock) while it trains it,
and its trainers die with it (launcher.spawn_child). `parallel` runs at once; on a machine with several
CUDA GPUs each run gets its own (CUDA_VISIBLE_DEVICES)."""

from __future__ import annotations

import dataclasses
import signal
import sys
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.fsutil import check_inside, check_name
from envkit.sweep.grid import MAX_RUNS, Combination, expand
from envkit.train.run import launcher
from envkit.train.run.config import load_config, read_yaml


@dataclass
class SweepRun:
    combo: Combination
    plan: launcher.Plan
    run_dir: Path
    state: str  # completed (skipped) | resume | new, then the run's own status after it ran
    rc: int | None = None


def prepare(config: str, overrides=(), profile_name: str | None = None, python: str | None = None,
            max_runs: int = MAX_RUNS, hold: bool = True) -> list[SweepRun]:
    """Every combination resolved and placed, before anything runs (a bad value stops it all here)."""
    base = launcher.plan(config, overrides=overrides, profile_name=profile_name, python=python)
    combos = expand(base.cfg.values["sweep"]["grid"], config, max_runs)
    data = read_yaml(config)
    runs = []
    for combo in combos:
        cfg = load_config(config, overrides=[*overrides, *combo.set_args()], profile=base.profile, data=data)
        p = dataclasses.replace(base, cfg=cfg, notes=list(base.notes))
        launcher.absolutise_paths(p.cfg)
        exp = launcher.experiment_dir(p.cfg)
        run_dir = check_inside(exp, exp / check_name(combo.run_id, f"{config}: sweep.grid", "run name"), f"{config}: sweep.grid")
        runs.append(SweepRun(combo, p, run_dir, _state(p, run_dir)))
    if hold:
        _hold_each_against_machine(runs, base, config)
    return runs


def _hold_each_against_machine(runs: list[SweepRun], base: launcher.Plan, config: str) -> None:
    """Every combination, not only the base config: a grid may switch the device or precision, and a
    combination this machine cannot train should stop the sweep before its first run, not at its turn."""
    launcher.hold_against_machine(base.cfg, base.facts)
    seen = set()
    for r in runs:
        v = r.plan.cfg.values
        key = (v["device"]["type"], v["training"]["precision"], v["training"]["compile"])
        if key in seen:
            continue
        seen.add(key)
        try:
            launcher.hold_against_machine(r.plan.cfg, base.facts)
        except EnvkitError as exc:
            raise EnvkitError(f"run {r.combo.run_id}: {exc.message}", where=f"{config}: sweep.grid",
                              fix="take that value out of sweep.grid (`envkit doctor` says what this machine can do)") from exc


def _state(p: launcher.Plan, run_dir: Path) -> str:
    if not (run_dir / "config.json").is_file():
        return "new"
    saved = launcher.read_json(run_dir / "config.json") or {}
    if saved.get("config_hash") != p.cfg.config_hash():
        raise EnvkitError(f"{run_dir} was started with a different config (hash {saved.get('config_hash')}, "
                          f"now {p.cfg.config_hash()})", where=str(run_dir),
                          fix="restore the config it ran with, set another experiment.name, or move that folder away")
    summary = launcher.read_json(run_dir / "summary.json") or {}
    return "completed" if summary.get("status") in launcher.FINISHED else "resume"


def execute(runs: list[SweepRun], *, parallel: int = 1, gpus: int = 0, stop_after: int | None = None,
            debug: bool = False, say=print, quiet_stdout: bool = False) -> None:
    """Run what is not completed, `parallel` at a time. Ctrl-C: the runs checkpoint and stop (they
    share the terminal's signal), no new run starts, and the next `envkit sweep` resumes them."""
    todo = [r for r in runs if r.state != "completed"]
    for r in runs:
        if r.state == "completed":
            say(f"skip    {r.combo.run_id}: completed ({r.run_dir})")
    free_slots = list(range(max(1, parallel)))
    active: dict[subprocess.Popen, tuple[SweepRun, int, object]] = {}
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
                launcher.release_child(proc)
                owner.close()  # the run folder is free again
                r.rc = proc.returncode
                r.state = (launcher.read_json(r.run_dir / "summary.json") or {}).get("status") or f"exited {r.rc}"
                free_slots.append(slot)
                say(f"{'done' if r.state == 'completed' else r.state:<8}{r.combo.run_id} (exit {r.rc})")
                if r.rc == 2 and todo:  # a bad config or data file: every other run would meet it too
                    say(f"stopping: {r.combo.run_id} stopped on bad input (exit 2; its error is above or in {r.run_dir})")
                    todo.clear()
    finally:
        signal.signal(signal.SIGINT, old)
    if interrupted["yes"]:
        say("interrupted: `envkit sweep` again resumes the unfinished runs and skips the completed ones")


def _own(r: SweepRun, say):
    """The run folder's owner lock, or None (said in one line) when another process trains in it:
    skipped, not waited for, so two sweeps of one grid share its runs instead of training one twice."""
    from envkit.fsutil import read_owner, take_owner_lock

    if r.state == "new":
        r.run_dir.mkdir(parents=True, exist_ok=True)
    try:
        return take_owner_lock(r.run_dir, "envkit sweep")
    except EnvkitError:
        owner = read_owner(r.run_dir)
        say(f"skip    {r.combo.run_id}: in use by {owner.get('command', 'another envkit process')} (PID {owner.get('pid', '?')}), "
            f"which trains it; not trained twice (`envkit monitor {r.run_dir}` watches it)")
        r.state = "in use"
        return None


def _start(r: SweepRun, slot: int, gpus: int, parallel: int, stop_after, debug: bool, say, owner=None,
           quiet_stdout: bool = False) -> subprocess.Popen:
    env = launcher.child_environ(r.plan.profile, 1)
    if gpus > 1 and parallel > 1:
        env["CUDA_VISIBLE_DEVICES"] = str(slot % gpus)  # one GPU per run
    launcher.write_run_files(r.plan, r.run_dir, env)
    cmd = launcher.child_command(r.plan.python, r.run_dir, stop_after=stop_after, resume="auto", nproc=1, debug=debug)
    say(f"{'resume' if r.state == 'resume' else 'start':<8}{r.combo.run_id} -> {r.run_dir}"
        + (f" (GPU {env['CUDA_VISIBLE_DEVICES']})" if "CUDA_VISIBLE_DEVICES" in env and gpus > 1 and parallel > 1 else ""))
    if parallel > 1:  # several at once: each run's console output goes to its folder, not interleaved here
        out = open(r.run_dir / "console.log", "ab")
        try:
            return launcher.spawn_child(cmd, env, owner, stdout=out, stderr=subprocess.STDOUT)
        finally:
            out.close()
    return launcher.spawn_child(cmd, env, owner, **({"stdout": sys.stderr} if quiet_stdout else {}))


def gpu_count(facts) -> int:
    """The GPUs CUDA_VISIBLE_DEVICES hands out: NVIDIA's, or AMD's under ROCm (HIP honours it too);
    an Intel GPU is not one the trainer uses."""
    return len([g for g in getattr(facts, "gpus", None) or [] if getattr(g, "vendor", "nvidia") in ("nvidia", "amd")])
