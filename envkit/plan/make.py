"""`make_plan`: the one way from a command's options to a run that can start. `envkit run` (here or
--slurm), every combination of `envkit sweep`, `envkit validate` and `envkit exec` (its process
count and nodes) all come through it, so a combination is refused in the same words whichever
command met it, and before anything is written or started."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from envkit.plan.grid import expand
from envkit.plan.model import Nodes, Plan, PlannedRun, RunRequest
from envkit.plan.refusals import (
    check_batch,
    check_combinations,
    check_processes,
    check_slurm_request,
    hold_against_machine,
    nodes_for,
)
from envkit.plan.resolve import Resolved, combination_configs, resolve
from envkit.plan.run_folders import (
    choose_for_run,
    experiment_dir,
    place_combination,
)
from envkit.config.config import per_process_batch
from envkit.config.batch_auto import is_auto, keep_resumed
from envkit.runfolder.create import folder_name

if TYPE_CHECKING:
    from envkit.config.config import Config


def make_plan(request: RunRequest) -> Plan:
    """The request checked and resolved: every refusal is raised here (EnvkitError, one line, exit 2)."""
    if request.run_id is not None:
        folder_name(request.run_id, "--run-id", "run id")  # before anything else is said or done
    nodes = Nodes()
    if request.purpose == "train":  # validate and --print-config start nothing: no nodes, no Slurm
        check_slurm_request(request)
        nodes = nodes_for(request)
    if request.config is None:  # a command of the user's own: no config to resolve
        return Plan(request, nodes)
    r = resolve(request.config, overrides=request.overrides, profile_name=request.profile, replay=request.replay,
                python=request.python)
    base = Plan(request, nodes, r.cfg, r.facts, r.profile, r.python, r.managed)
    if request.purpose == "validate":
        return _said(base, r, hold_against_machine(r.cfg, r.facts))
    if request.purpose == "print-config":
        experiment_dir(r.cfg)  # experiment.name is one folder inside the runs folder
        return base
    if request.sweep:
        return _sweep(base, r.cfg, request.config)
    return _one_run(base, r)


def _said(p: Plan, r: Resolved, machine: list[str]) -> Plan:
    """What the command says before the run: the profile's warnings, the machine's, why the profile
    could not be loaded; in that order."""
    return dataclasses.replace(p, warnings=(*r.notes, *machine, *([r.profile_note] if r.profile_note else [])))


def _one_run(base: Plan, r: Resolved) -> Plan:
    """`envkit run`: the machine and the process count, then the run folder (resumed only with its
    own config, and at the batch it started with), then what depends on it."""
    req, cfg = base.request, r.cfg
    machine = hold_against_machine(cfg, r.facts) if req.here else []  # the login node is not the machine that trains
    check_processes(cfg, req)
    cfg = per_process_batch(cfg, req.world)  # training.global_batch_size: refused here, before anything starts, if it does not split
    run_id = req.run_id or (base.nodes.rdzv_id if base.nodes.nnodes > 1 else None)  # every node names the same run
    run_dir, resuming, note, saved = choose_for_run(cfg, run_id, req.resume)
    batch_note = None
    if resuming:
        if is_auto(cfg) and (kept := keep_resumed(cfg, saved)) is not None:
            cfg = kept  # its checkpoints and data position were written at that batch
            batch_note = f"training.batch_size {cfg.training.batch_size}: decided by the probe when this run started"
    check_batch(cfg, req)
    run = PlannedRun(cfg, run_dir, "resume" if resuming else "new", note, batch_note)
    return dataclasses.replace(_said(base, r, machine), cfg=cfg, runs=(run,))


def _sweep(base: Plan, base_cfg: Config, config: str) -> Plan:
    """Every combination resolved, placed and checked before anything runs (a bad value stops it all here)."""
    req = base.request
    combos = expand(base_cfg.sweep.grid, config, req.max_runs)
    runs = [PlannedRun(cfg, *place_combination(cfg, combo.run_id, config), combination=combo)
            for combo, cfg in zip(combos, combination_configs(config, req.overrides, combos, base.profile))]
    check_combinations(runs, base_cfg, req, base.facts)
    return dataclasses.replace(base, runs=tuple(runs))
