"""What `envkit run` was asked, as one typed record (the command line parsed once, at the edge): the
part the plan checks (`request()`, a RunRequest) and how the planned run is started and shown."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import get_args

import click

from envkit.plan.model import Nodes, RdzvBackend, Resume, RunRequest, resume_option


def node_options(fn):
    """The options of machines started by hand (`envkit run` and `exec`), given to the command as one
    `nodes` (a Nodes, as asked: plan/refusals.py checks it)."""

    @functools.wraps(fn)
    def with_nodes(*args, **kw):
        kw["nodes"] = Nodes(kw.pop("nnodes"), kw.pop("node_rank"), kw.pop("rdzv_endpoint"), kw.pop("rdzv_backend"), kw.pop("rdzv_id"))
        return fn(*args, **kw)

    for option in reversed((
        click.option("--nnodes", type=click.IntRange(min=1), default=1, show_default=True, help="Machines taking part (torchrun rendezvous)."),
        click.option("--node-rank", type=click.IntRange(min=0), default=0, show_default=True,
                     help="This machine's rank; node 0 writes the run folder."),
        click.option("--rdzv-endpoint", metavar="HOST:PORT", help="Rendezvous address, on node 0 (needed with --nnodes > 1)."),
        click.option("--rdzv-backend", type=click.Choice(get_args(RdzvBackend)), default="static", show_default=True,
                     help="torchrun's rendezvous backend (static keeps global rank 0 on node 0)."),
        click.option("--rdzv-id", help="Rendezvous id shared by all nodes (default: the run id)."),
    )):
        with_nodes = option(with_nodes)
    return with_nodes


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """`envkit run`'s options, one field per option (commands/train.py's click parameters, by name;
    the Slurm options are the SlurmRequest beside it)."""

    config: str = "train.yaml"
    overrides: tuple[str, ...] = ()
    profile: str | None = None
    run_id: str | None = None
    resume: Resume = "auto"
    stop_after: int | None = None
    print_config: bool = False
    as_json: bool = False
    selftest: bool = False
    nproc_per_node: int = 1
    python: str | None = None
    nodes: Nodes = Nodes()
    profile_steps: str | None = None  # as typed, A:B (the launcher's parse_profile_steps reads it)
    debug: bool = False

    def __post_init__(self) -> None:  # click gives --resume's text
        object.__setattr__(self, "resume", resume_option(self.resume))
        object.__setattr__(self, "overrides", tuple(self.overrides))

    def request(self, slurm_nodes: int | None) -> RunRequest:
        """What the plan checks: --print-config resolves the config alone; slurm_nodes: submitted with
        --slurm to that many nodes, else trained here."""
        return RunRequest(self.config, self.overrides, self.profile, self.python, nproc=self.nproc_per_node, nodes=self.nodes,
                          slurm_nodes=slurm_nodes, run_id=self.run_id, resume=self.resume,
                          purpose="print-config" if self.print_config else "train")
