"""The combinations a run cannot start with, each refused here in one line (exit 2) before any
process starts or anything is written, whichever command asked: the nodes and their rendezvous,
what --slurm cannot take, the device and precision against the machine (naming doctor's check),
and the process count against the config (one Apple GPU, a sharding plan, training.batch_size
auto decided per machine and by `envkit run` alone). A sweep's combinations are checked each, and
a refusal the grid caused names the run and sweep.grid. (The run folder's own refusals are
run_folders.py's, the grid's grid.py's.)"""

from __future__ import annotations

import dataclasses
import re

from envkit.errors import EnvkitError
from envkit.config.batch_auto import is_auto
from envkit.plan.model import Nodes, PlannedRun, RunRequest
from envkit.config.config import Config, where_set
from envkit.train.run.sharding import config_problem


def check_slurm_request(request: RunRequest) -> None:
    """What --slurm cannot take: it places the nodes itself, returns at once, and resumes a run
    folder by its name."""
    if request.here:
        return
    if request.nodes.nnodes > 1:
        raise EnvkitError("--slurm places the nodes itself: --nnodes is for starting each node by hand",
                          where="--nnodes", fix="use --nodes N with --slurm")
    if request.detach:
        raise EnvkitError("--slurm returns as soon as the job is queued: --detach has nothing to add", where="--detach",
                          fix="drop --detach")
    if request.config is not None and request.resume not in ("auto", "never"):
        raise EnvkitError("--slurm resumes a run folder by itself (--run-id), not from a checkpoint file", where="--resume",
                          fix="--run-id <the run's folder name>")


def nodes_for(request: RunRequest) -> Nodes:
    """--nnodes, --node-rank and the rendezvous of machines started by hand, checked."""
    nnodes, node_rank, endpoint = request.nodes.nnodes, request.nodes.node_rank, request.nodes.rdzv_endpoint
    if nnodes > 1 and not endpoint:
        raise EnvkitError(f"--nnodes {nnodes} needs --rdzv-endpoint HOST:PORT (node 0's address, the same on every node)",
                          where="--rdzv-endpoint", fix="e.g. --rdzv-endpoint 10.0.0.1:29500")
    if node_rank >= nnodes:
        raise EnvkitError(f"--node-rank {node_rank} is not below --nnodes {nnodes}", where="--node-rank", fix=f"0 .. {nnodes - 1}")
    if endpoint and not re.fullmatch(r"\[?[\w.:-]+\]?:\d+", endpoint):
        raise EnvkitError(f"--rdzv-endpoint {endpoint!r} is not HOST:PORT", where="--rdzv-endpoint", fix="e.g. 10.0.0.1:29500")
    return dataclasses.replace(request.nodes, rdzv_id=request.nodes.rdzv_id or request.run_id)


def check_processes(cfg: Config, request: RunRequest) -> None:
    """The process count and the nodes against the config: one Apple GPU, and a sharding plan for
    this many processes (train/run/sharding.py)."""
    nproc = 1 if request.sweep else request.nproc
    if nproc > 1 and cfg.device.type == "mps":
        # One Apple GPU per machine, and neither gloo nor nccl carries MPS tensors (accelerate docs).
        raise EnvkitError(f"--nproc-per-node {nproc} cannot train on MPS: it is one device and gloo/nccl do not work with it",
                          where="device.type", fix="drop --nproc-per-node (CUDA uses NCCL, the CPU gloo)")
    if problem := config_problem(cfg, request.world):
        raise EnvkitError(problem[0], where=where_set(cfg, "training.parallel"), fix=problem[1])
    if request.node_count > 1 and cfg.device.type == "mps":
        flag = "--nnodes" if request.here else "--nodes"
        raise EnvkitError(f"{flag} cannot train on MPS: gloo/nccl do not carry MPS tensors", where="device.type",
                          fix="CUDA machines use NCCL, CPUs gloo")


def check_batch(cfg: Config, request: RunRequest) -> None:
    """training.batch_size auto still undecided (a resumed run keeps its number): on several nodes
    each machine would probe on its own and could decide differently; a sweep's runs here are
    started without `envkit run`'s probe."""
    if not is_auto(cfg):
        return
    if request.node_count > 1:
        raise EnvkitError(f"training.batch_size auto is decided per machine; with {request.node_count} nodes every node "
                          "needs the same number", where=where_set(cfg, "training.batch_size"),
                          fix="run once on one node to see the probed batch, then --set training.batch_size=N")
    if request.sweep and request.here:  # a task of `sweep --slurm` is an `envkit run`: it probes on its node
        raise EnvkitError("training.batch_size auto is decided by `envkit run`'s probe, which a sweep's runs do not take",
                          where=where_set(cfg, "training.batch_size"),
                          fix="`envkit run` once to see the probed batch, then --set training.batch_size=N (or list numbers in sweep.grid)")


def hold_against_machine(cfg: Config, facts) -> list[str]:
    """Refuse a device/precision this machine cannot do, naming the doctor check; returns warnings."""
    from envkit.checks import run_checks, trainer_device

    checks = {c.id: c for c in run_checks(facts)}
    best = trainer_device(facts)
    dev = cfg.device.type
    dev_where = where_set(cfg, "device.type")
    real = best if dev == "auto" else dev
    warnings = []

    def refuse(check_id: str, what: str, where: str):
        c = checks.get(check_id)
        msg = c.message if c else "not available"
        fix = (c.fix if c and c.fix else None) or f"run `envkit doctor`; or set {where.split(': ')[-1]} to a supported value"
        raise EnvkitError(f"{what} cannot run here: {msg} (doctor check '{check_id}')", where=where, fix=fix)

    torch_check = checks.get("torch")
    if torch_check is not None and torch_check.status == "fail":
        raise EnvkitError(f"no usable PyTorch: {torch_check.message} (doctor check 'torch')", where="environment",
                          fix=torch_check.fix or "`envkit setup` creates an environment with the right torch build")
    if real in ("mps", "cuda") and real != best:
        refuse(real, f"device.type {real}", dev_where)
    prec = cfg.training.precision
    if prec == "bf16" and real in ("mps", "cuda"):
        c = checks.get("bf16")
        if c is not None and c.status not in ("pass",):
            refuse("bf16", f"training.precision bf16 on {real}", where_set(cfg, "training.precision"))
    if real in ("mps", "cuda") and checks.get(real) is not None and checks[real].status == "fail":
        refuse(real, f"device.type {real}", dev_where)
    if prec == "fp16" and real == "mps":
        from envkit.checks.gates import V, gates

        need = gates()["autocast"]["mps"]["fp16_torch"]
        tv, need_v = V(facts.torch.base_version), V(need)
        if tv is not None and need_v is not None and tv < need_v:
            raise EnvkitError(f"fp16 autocast on MPS needs torch {need}+ (installed {facts.torch.base_version})",
                              where=where_set(cfg, "training.precision"), fix="`envkit setup --torch stable`, or training.precision: fp32")
    comp = cfg.training.compile
    c = checks.get("compile")
    if comp is True and c is not None and c.status == "warn":
        warnings.append(f"training.compile: true, but {c.message}; the trainer falls back to eager if compilation fails")
    return warnings


def check_combinations(runs: list[PlannedRun], base_cfg: Config, request: RunRequest, facts) -> None:
    """A sweep's every combination, not only its base config, before its first run starts: a grid may
    switch the device, the precision or training.parallel."""
    config = request.config
    if request.here:
        hold_against_machine(base_cfg, facts)
        seen = set()
        for r in runs:
            c = r.cfg
            key = (c.device.type, c.training.precision, c.training.compile)
            if key in seen:
                continue
            seen.add(key)
            try:
                hold_against_machine(c, facts)
            except EnvkitError as exc:
                raise EnvkitError(f"run {_run_id(r)}: {exc.message}", where=f"{config}: sweep.grid",
                                  fix="take that value out of sweep.grid (`envkit doctor` says what this machine can do)") from exc
    for r in runs:
        for check in (check_processes, check_batch):
            try:
                check(r.cfg, request)
            except EnvkitError as exc:
                check(base_cfg, request)  # the file's own values are refused too: said as `envkit run` says it
                raise EnvkitError(f"run {_run_id(r)}: {exc.message}", where=f"{config}: sweep.grid",
                                  fix="take that value out of sweep.grid") from exc


def _run_id(run: PlannedRun) -> str:
    """A sweep's run is its combination's (make_plan gives each one)."""
    assert run.combination is not None, "a sweep's run without its combination"
    return run.combination.run_id
