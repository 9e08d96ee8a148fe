"""What a Slurm user asks for on the command line (`--nodes`, `--time`, ...), checked before
anything is written: a value sbatch would refuse is one line here, exit 2."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import click

from envkit.errors import EnvkitError

# sbatch(1) --time: minutes, minutes:seconds, hours:minutes:seconds, days-hours,
# days-hours:minutes, days-hours:minutes:seconds; "UNLIMITED"/"INFINITE" too.
_TIME = re.compile(r"\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+|\d+-\d+:\d{1,2}|\d+-\d+:\d{1,2}:\d{1,2}")
_MEM = re.compile(r"\d+[KMGT]?", re.IGNORECASE)


@dataclass
class SlurmRequest:
    nodes: int = 1
    gpus_per_node: int | None = None  # None: what the run's device needs
    cpus_per_task: int | None = None
    mem: str | None = None
    time: str | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    sbatch_args: list[str] = field(default_factory=list)
    grace: int = 120
    requeue: bool = True
    dry_run: bool = False

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def time_seconds(text: str) -> int | None:
    """sbatch's --time in seconds (None: unlimited); EnvkitError when sbatch could not read it."""
    t = text.strip()
    if t.upper() in ("UNLIMITED", "INFINITE", "-1"):
        return None
    if not _TIME.fullmatch(t):
        raise EnvkitError(f"--time {text!r} is not a time sbatch reads", where="--time",
                          fix="minutes (30), HH:MM:SS (02:00:00), or D-HH[:MM[:SS]] (1-12)")
    days, _, rest = t.rpartition("-") if "-" in t else ("0", "", t)
    parts = [int(x) for x in rest.split(":")]
    if "-" in t:  # days-hours[:minutes[:seconds]]
        h, m, s = (parts + [0, 0])[:3]
    elif len(parts) == 1:
        h, m, s = 0, parts[0], 0
    elif len(parts) == 2:
        h, m, s = 0, parts[0], parts[1]
    else:
        h, m, s = parts
    return int(days) * 86400 + h * 3600 + m * 60 + s


def check(req: SlurmRequest, *, nnodes: int = 1, detach: bool = False) -> SlurmRequest:
    if req.nodes < 1:
        raise EnvkitError(f"--nodes {req.nodes}: a job needs at least one node", where="--nodes", fix="--nodes 1 or more")
    if nnodes > 1:
        raise EnvkitError("--slurm places the nodes itself: --nnodes is for starting each node by hand",
                          where="--nnodes", fix="use --nodes N with --slurm")
    if detach:
        raise EnvkitError("--slurm returns as soon as the job is queued: --detach has nothing to add", where="--detach",
                          fix="drop --detach")
    if req.gpus_per_node is not None and req.gpus_per_node < 0:
        raise EnvkitError("--gpus-per-node cannot be negative", where="--gpus-per-node", fix="0 on CPU nodes")
    if req.time is not None:
        limit = time_seconds(req.time)
        if limit is not None and req.requeue and limit <= req.grace:
            raise EnvkitError(f"--time {req.time} is not longer than the {req.grace} s warning before it (--slurm-grace)",
                              where="--time", fix="a longer --time, or a shorter --slurm-grace")
    if req.mem is not None and not _MEM.fullmatch(req.mem):
        raise EnvkitError(f"--mem {req.mem!r} is not a size sbatch reads", where="--mem", fix="e.g. 64G or 16000M")
    return req


def slurm_options(fn):
    """The options `run`, `exec` and `sweep` share; the command gets one `slurm` argument (a
    SlurmRequest, or None without --slurm)."""
    opts = [
        click.option("--slurm", "slurm_on", is_flag=True, help="Submit to a Slurm cluster with sbatch and return (see --nodes ... below)."),
        click.option("--nodes", "s_nodes", type=int, default=1, show_default=True, help="--slurm: nodes for the job."),
        click.option("--gpus-per-node", "s_gpus", type=int, help="--slurm: GPUs on each node (default: what the device needs, 0 on the CPU)."),
        click.option("--cpus-per-task", "s_cpus", type=int, help="--slurm: CPUs for envkit's one task on each node."),
        click.option("--mem", "s_mem", help="--slurm: memory per node (64G)."),
        click.option("--time", "s_time", help="--slurm: time limit (02:00:00, 1-12)."),
        click.option("--partition", "s_partition", help="--slurm: partition."),
        click.option("--account", "s_account", help="--slurm: account."),
        click.option("--qos", "s_qos", help="--slurm: quality of service."),
        click.option("--sbatch-arg", "s_args", multiple=True, metavar="ARG", help="--slurm: any other sbatch option, e.g. --sbatch-arg=--constraint=h100 (repeatable)."),
        click.option("--slurm-grace", "s_grace", type=click.IntRange(min=10), default=120, show_default=True,
                     help="--slurm: seconds of warning (SIGUSR1) before the time limit: the run checkpoints and the job requeues."),
        click.option("--no-requeue", "s_no_requeue", is_flag=True, help="--slurm: checkpoint on the warning or a preemption, but do not requeue."),
        click.option("--dry-run", "s_dry_run", is_flag=True, help="--slurm: print the sbatch script, submit nothing."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


SLURM_KEYS = ("slurm_on", "s_nodes", "s_gpus", "s_cpus", "s_mem", "s_time", "s_partition", "s_account", "s_qos", "s_args",
              "s_grace", "s_no_requeue", "s_dry_run")


def pop_request(kwargs: dict) -> SlurmRequest | None:
    """Take the Slurm options out of a command's kwargs: a SlurmRequest with --slurm, else None
    (and a Slurm-only option given without --slurm is refused)."""
    v = {k: kwargs.pop(k) for k in SLURM_KEYS}
    if not v["slurm_on"]:
        given = [k for k, default in (("s_nodes", 1), ("s_gpus", None), ("s_time", None), ("s_partition", None),
                                      ("s_dry_run", False), ("s_args", ())) if v[k] not in (default, (), None) and v[k] != default]
        if given:
            name = "--" + {"s_nodes": "nodes", "s_gpus": "gpus-per-node", "s_time": "time", "s_partition": "partition",
                           "s_dry_run": "dry-run", "s_args": "sbatch-arg"}[given[0]]
            raise EnvkitError("a Slurm option, given without --slurm", where=name, fix="add --slurm to submit the job, or drop it")
        return None
    return SlurmRequest(nodes=v["s_nodes"], gpus_per_node=v["s_gpus"], cpus_per_task=v["s_cpus"], mem=v["s_mem"], time=v["s_time"],
                        partition=v["s_partition"], account=v["s_account"], qos=v["s_qos"], sbatch_args=list(v["s_args"]),
                        grace=v["s_grace"], requeue=not v["s_no_requeue"], dry_run=v["s_dry_run"])
