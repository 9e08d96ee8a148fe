"""What `envkit run` was asked, as one typed record (the command line parsed once, at the edge): the
part the plan checks (`request()`, a RunRequest) and how the planned run is started and shown."""

from __future__ import annotations

from dataclasses import dataclass

from envkit.plan.model import Resume, RunRequest, resume_option


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
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    rdzv_backend: str = "static"
    rdzv_id: str | None = None
    profile_steps: str | None = None  # as typed, A:B (the launcher's parse_profile_steps reads it)
    debug: bool = False

    def __post_init__(self) -> None:  # click gives --resume's text
        object.__setattr__(self, "resume", resume_option(self.resume))
        object.__setattr__(self, "overrides", tuple(self.overrides))

    def request(self, slurm_nodes: int | None) -> RunRequest:
        """What the plan checks: --print-config resolves the config alone; slurm_nodes: submitted with
        --slurm to that many nodes, else trained here."""
        return RunRequest(self.config, self.overrides, self.profile, self.python, nproc=self.nproc_per_node, nnodes=self.nnodes,
                          node_rank=self.node_rank, rdzv_endpoint=self.rdzv_endpoint, rdzv_backend=self.rdzv_backend,
                          rdzv_id=self.rdzv_id, slurm_nodes=slurm_nodes, run_id=self.run_id, resume=self.resume,
                          purpose="print-config" if self.print_config else "train")
