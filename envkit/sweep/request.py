"""What `envkit sweep` was asked, as one typed record (the command line parsed once, at the edge),
and the judgement made on it before anything is resolved: how many runs train at once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from envkit.errors import EnvkitError
from envkit.plan.grid import MAX_RUNS
from envkit.sweep.pack import parse_pack


@dataclass(frozen=True, kw_only=True)
class SweepRequest:
    """`envkit sweep`'s options, one field per option (commands/sweep.py's click parameters, by
    name; the Slurm options are the SlurmRequest beside it)."""

    config: str = "train.yaml"
    overrides: tuple[str, ...] = ()
    profile: str | None = None
    parallel: int = 1
    parallel_given: bool = False  # --parallel on the command line, not its default
    pack: str | None = None  # as typed: auto or N (`packing` reads it)
    stop_after: int | None = None
    python: str | None = None
    as_json: bool = False
    plot: str | None = None  # the PNG to draw the runs' curves into
    report_only: bool = False
    max_runs: int = MAX_RUNS
    debug: bool = False

    def packing(self, on_slurm: bool) -> int | Literal["auto"] | None:
        """--pack as given (auto, N or None), refused with --parallel or --slurm: before anything is resolved."""
        pack = parse_pack(self.pack)  # a typo is one line, exit 2
        if pack is not None and self.parallel_given:
            raise EnvkitError("--pack and --parallel both say how many runs at once", where="--pack",
                              fix="--pack auto to measure it, or --parallel N alone")
        if pack is not None and on_slurm:
            raise EnvkitError("--pack measures this machine, not the cluster's nodes", where="--pack",
                              fix="with --slurm, --parallel N sets how many array tasks run at once")
        return pack

    def at_once(self, pack: int | Literal["auto"] | None) -> int:
        """Runs at once before --pack auto measures it: --pack N, else --parallel."""
        return pack if isinstance(pack, int) else self.parallel
