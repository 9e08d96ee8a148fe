"""A run folder's files as the watchers read them, with no judgement of the run (so cheap to
import: `plot`, `exec`, `sweep`, `reproduce` and the trainer's telemetry need only this): a JSON
object file, metrics.jsonl as the run stands, the run folders under a root and the one a command
names. Whether the run still runs is `liveness`; its status for `runs` and `monitor` is `folder_status`."""

from __future__ import annotations

from pathlib import Path

from envkit.errors import EnvkitError
from envkit.runfolder import names
from envkit.runfolder.metrics import REWOUND, read_metrics

__all__ = ["REWOUND", "find_runs", "read_metrics", "resolve_run", "started_at"]




def find_runs(root: Path) -> list[Path]:
    """Run folders (holding config.json) under root: root itself, root/<exp>/<run>, or root/runs/<exp>/<run>."""
    root = Path(root)
    if (root / names.CONFIG).is_file():
        return [root]
    marks = (names.CONFIG, "slurm/job.json")  # a run submitted to Slurm has only its job until a node starts it
    found = [p.parents[len(m.split("/")) - 1] for m in marks for p in [*root.glob(f"*/*/{m}"), *root.glob(f"*/{m}")]]
    if (root / "runs").is_dir() and not found:
        found = [p.parents[len(m.split("/")) - 1] for m in marks for p in (root / "runs").glob(f"*/*/{m}")]
    return sorted(set(found), key=started_at, reverse=True)


def started_at(run_dir: Path) -> float:
    """When the run started: its config.json's time (written once at the start, again at a resume),
    else its Slurm job's. Not the folder's: a record or a summary written late touches that, and a
    run that ended made "the newest run" look like the one started after it."""
    for mark in (names.CONFIG, "slurm/job.json"):
        try:
            return (run_dir / mark).stat().st_mtime
        except OSError:
            continue
    return 0.0


def resolve_run(run_dir: str | None) -> Path:
    if run_dir:
        p = Path(run_dir)
        if not (p / names.CONFIG).is_file():
            found = find_runs(p) if p.is_dir() else []
            if not found:
                raise EnvkitError("not a run folder (no config.json)", where=str(p), fix="`envkit runs` lists the runs")
            return found[0]
        return p
    found = find_runs(Path("runs")) if Path("runs").is_dir() else []
    if not found:
        raise EnvkitError("no runs under ./runs", fix="give a RUN_DIR, or start one with `envkit run train.yaml`")
    return found[0]
