"""What a command asks for (`RunRequest`) and what the plan stage answers (`Plan`, with its `Nodes`):
frozen values, so that what was checked is what runs. No torch here."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NewType, get_args

from envkit.plan.grid import MAX_RUNS, Combination

if TYPE_CHECKING:  # types only: the plan is made without importing what these modules start
    from envkit.facts.model import Facts
    from envkit.install.setup.managed import Managed
    from envkit.profiles.resolve import Profile
    from envkit.config.config import Config

# train: every check; validate: the config and the machine; print-config: the config alone
Purpose = Literal["train", "validate", "print-config"]
# --resume: auto (the newest unfinished run of this config), never (a new run), or a checkpoint's
# path as typed (refusals and the child's command line say it as the user wrote it)
CheckpointPath = NewType("CheckpointPath", str)
Resume = Literal["auto", "never"] | CheckpointPath
# A run folder as planned: new, resumed, or (a sweep's) completed and skipped
RunState = Literal["new", "resume", "completed"]


def resume_option(text: str) -> Resume:
    """--resume's text as a Resume: auto, never, or a checkpoint's path."""
    return text if text == "auto" or text == "never" else CheckpointPath(text)


# torchrun's rendezvous backends (torch/distributed/elastic/rendezvous): static keeps global rank
# 0 on node 0 (rank = node_rank * nproc + local rank); the others let ranks be given as nodes join
RdzvBackend = Literal["static", "c10d", "etcd", "etcd-v2"]


@dataclass(frozen=True)
class Nodes:
    """Several machines: passed through to torchrun's rendezvous (the engine PyTorch ships; its
    command line is envkit/launch/torchrun.py's). As asked (options.node_options) until
    plan/refusals.py checks it and names the rendezvous."""

    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    rdzv_backend: RdzvBackend = "static"
    rdzv_id: str | None = None


@dataclass(frozen=True)
class RunRequest:
    """Everything `envkit run`, `sweep`, `validate` and `exec` were asked, as options, before any of
    it is checked. `config=None` is a command of the user's own (`envkit exec`): no train.yaml, so
    only the process count, the nodes and Slurm are planned."""

    config: str | None = "train.yaml"
    overrides: tuple[str, ...] = ()
    profile: str | None = None
    python: str | None = None
    replay: str | None = None  # a doctor snapshot to hold the config against (`envkit validate --replay`)
    nproc: int = 1  # processes per node (--nproc-per-node)
    nodes: Nodes = Nodes()  # machines started by hand (--nnodes ... --rdzv-endpoint), as asked
    slurm_nodes: int | None = None  # None: trains here; N: submitted with --slurm to N nodes
    detach: bool = False  # `envkit exec --detach`
    run_id: str | None = None
    resume: Resume = "auto"
    sweep: bool = False  # every combination of the config's sweep.grid, each its own run
    max_runs: int = MAX_RUNS
    purpose: Purpose = "train"

    def __post_init__(self):
        if self.purpose not in get_args(Purpose):
            raise ValueError(f"purpose {self.purpose!r} is not one of {get_args(Purpose)}")

    @property
    def here(self) -> bool:
        """Whether this machine trains (without --slurm the login node is not the one that trains)."""
        return self.slurm_nodes is None

    @property
    def node_count(self) -> int:
        return self.nodes.nnodes if self.slurm_nodes is None else self.slurm_nodes  # (self.here, spelt out: the type narrows)

    @property
    def world(self) -> int:
        """Processes in all: each of a sweep's runs is one process per node."""
        return (1 if self.sweep else self.nproc) * self.node_count


@dataclass(frozen=True)
class PlannedRun:
    """One run folder and the config trained in it."""

    cfg: Config
    run_dir: Path
    state: RunState  # completed: a sweep's finished run, skipped
    note: str | None = None  # why this folder: resuming an unfinished run, or not resuming one whose config differs
    batch_note: str | None = None  # training.batch_size auto: the number kept from the run's start, said before it
    combination: Combination | None = None  # a sweep's: the grid values this run trains

    @property
    def resuming(self) -> bool:
        return self.state == "resume"


@dataclass(frozen=True)
class Plan:
    """A request checked against the config, the profile and the machine: nothing here is refused
    later for a reason known now. `cfg` is the run's config (a sweep's before its grid); `runs`
    one PlannedRun for `envkit run`, one per combination for a sweep, none for validate and
    print-config. The config fields are None for a command of the user's own (`envkit exec`)."""

    request: RunRequest
    nodes: Nodes
    cfg: Config | None = None
    facts: Facts | None = None
    profile: Profile | None = None
    python: str = ""
    managed: Managed | None = None
    warnings: tuple[str, ...] = ()  # said before the run: the profile's warnings, the machine's (compile), the profile's note
    runs: tuple[PlannedRun, ...] = field(default_factory=tuple)

    @property
    def run(self) -> PlannedRun:
        """The one run of `envkit run`."""
        if len(self.runs) != 1:
            raise ValueError(f"a plan of {len(self.runs)} runs has no single run")
        return self.runs[0]

    def of(self, run: PlannedRun) -> Plan:
        """The plan of one of its runs (a sweep's combination): that run's config."""
        return dataclasses.replace(self, cfg=run.cfg, runs=(run,))

    def with_cfg(self, cfg: Config) -> Plan:
        """The same plan with a config the run decided when it started (training.batch_size auto)."""
        runs = tuple(dataclasses.replace(r, cfg=cfg) for r in self.runs)
        return dataclasses.replace(self, cfg=cfg, runs=runs)
