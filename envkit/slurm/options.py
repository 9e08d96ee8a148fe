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


def check(req: SlurmRequest) -> SlurmRequest:
    """The Slurm options as sbatch would read them; what --slurm cannot take with the run's own
    options (--nnodes, --detach, --resume CHECKPOINT) is envkit/plan/refusals.py's."""
    if req.nodes < 1:
        raise EnvkitError(f"--nodes {req.nodes}: a job needs at least one node", where="--nodes", fix="--nodes 1 or more")
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


# Every Slurm option, declared once: (the keyword the command gets, the flag, click's settings).
# `slurm_options` builds the click options from it and `pop_request` knows them all by it.
SLURM_OPTIONS: tuple[tuple[str, str, dict], ...] = (
    ("s_nodes", "--nodes", dict(type=int, default=1, show_default=True, help="--slurm: nodes for the job.")),
    ("s_gpus", "--gpus-per-node", dict(type=int, help="--slurm: GPUs on each node (default: what the device needs, 0 on the CPU).")),
    ("s_cpus", "--cpus-per-task", dict(type=int, help="--slurm: CPUs for envkit's one task on each node.")),
    ("s_mem", "--mem", dict(help="--slurm: memory per node (64G).")),
    ("s_time", "--time", dict(help="--slurm: time limit (02:00:00, 1-12).")),
    ("s_partition", "--partition", dict(help="--slurm: partition.")),
    ("s_account", "--account", dict(help="--slurm: account.")),
    ("s_qos", "--qos", dict(help="--slurm: quality of service.")),
    ("s_args", "--sbatch-arg", dict(multiple=True, metavar="ARG",
                                    help="--slurm: any other sbatch option, e.g. --sbatch-arg=--constraint=h100 (repeatable).")),
    ("s_grace", "--slurm-grace", dict(type=click.IntRange(min=10), default=120, show_default=True,
                                      help="--slurm: seconds of warning (SIGUSR1) before the time limit: the run checkpoints and the job requeues.")),
    ("s_no_requeue", "--no-requeue", dict(is_flag=True, help="--slurm: checkpoint on the warning or a preemption, but do not requeue.")),
    ("s_dry_run", "--dry-run", dict(is_flag=True, help="--slurm: print the sbatch script, submit nothing.")),
)
SLURM_KEYS = ("slurm_on", *(key for key, _, _ in SLURM_OPTIONS))


def slurm_options(fn):
    """The options `run`, `exec` and `sweep` share; the command gets one `slurm` argument (a
    SlurmRequest, or None without --slurm)."""
    opts = [click.option("--slurm", "slurm_on", is_flag=True, help="Submit to a Slurm cluster with sbatch and return (see --nodes ... below).")]
    opts += [click.option(flag, key, **settings) for key, flag, settings in SLURM_OPTIONS]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def _given(key: str, value) -> bool:
    """Whether the user gave this option: click's own record where a command is running, else a
    value other than the default."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.get_parameter_source(key) is not None:
        return ctx.get_parameter_source(key) not in (click.core.ParameterSource.DEFAULT, click.core.ParameterSource.DEFAULT_MAP)
    default = next(settings.get("default") for k, _, settings in SLURM_OPTIONS if k == key)
    return value not in (default, (), None, False)


def pop_request(kwargs: dict) -> SlurmRequest | None:
    """Take the Slurm options out of a command's kwargs: a SlurmRequest with --slurm, else None.
    Every Slurm-only option given without --slurm is refused: one that would be ignored silently
    (`--mem 64G` on a run that trains here) is a mistake the user should hear about."""
    v = {k: kwargs.pop(k) for k in SLURM_KEYS}
    if not v["slurm_on"]:
        given = [flag for key, flag, _ in SLURM_OPTIONS if _given(key, v[key])]
        if given:
            raise EnvkitError("a Slurm option, given without --slurm" if len(given) == 1 else "Slurm options, given without --slurm",
                              where=", ".join(given), fix="add --slurm to submit the job, or drop " + ", ".join(given))
        return None
    return SlurmRequest(nodes=v["s_nodes"], gpus_per_node=v["s_gpus"], cpus_per_task=v["s_cpus"], mem=v["s_mem"], time=v["s_time"],
                        partition=v["s_partition"], account=v["s_account"], qos=v["s_qos"], sbatch_args=list(v["s_args"]),
                        grace=v["s_grace"], requeue=not v["s_no_requeue"], dry_run=v["s_dry_run"])
