"""What `run --slurm`, `exec --slurm` and `sweep --slurm` submit: the run folders they would have
made on this machine, and for each the envkit command its nodes run (node.py adds the rendezvous)."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import click

from envkit.slurm.options import SlurmRequest
from envkit.slurm.submit import need_sbatch, submit


def _made(folder: Path) -> list[Path]:
    """The top-most folder that creating `folder` makes (removed again if sbatch refuses)."""
    top = None
    p = folder
    while not p.exists():
        top = p
        p = p.parent
    return [top] if top is not None else []


def gpus_for(device: str, nproc: int, req: SlurmRequest) -> int:
    if req.gpus_per_node is not None:
        return req.gpus_per_node
    return nproc if device == "cuda" else 0


def _common(overrides, profile, python) -> list[str]:
    out = []
    for o in overrides:
        out += ["--set", o]
    if profile:
        out += ["--profile", profile]
    if python:
        out += ["--python", python]
    return out


def run_job(p, config: str, *, overrides, profile, python, run_id, resume, nproc, stop_after, req: SlurmRequest) -> dict:
    from envkit.train.run import launcher

    need_sbatch()
    if resume not in ("auto", "never"):
        from envkit.errors import EnvkitError

        raise EnvkitError("--slurm resumes a run folder by itself (--run-id), not from a checkpoint file", where="--resume",
                          fix="--run-id <the run's folder name>")
    run_dir, resuming, note = launcher.choose_run_dir(p.cfg, run_id, resume)
    if note:
        click.echo(note, err=True)
    config_arg = [] if config == "<defaults>" else [str(Path(config).resolve())]
    argv = ["run", *config_arg, "--run-id", run_dir.name, "--nproc-per-node", str(nproc),
            *_common(overrides, profile, python), *(["--stop-after", str(stop_after)] if stop_after else [])]
    return submit(kind="run", req=req, folder=run_dir / "slurm", tasks=[{"run_dir": str(run_dir), "argv": argv}],
                  command=_shown(), job_name=f"envkit-{run_dir.parent.name}", gpus=gpus_for(p.cfg.values["device"]["type"], nproc, req),
                  made=_made(run_dir))


def exec_job(run_dir: Path, *, command: list[str], options: list[str], nproc: int, device: str, req: SlurmRequest,
             made: list[Path]) -> dict:
    need_sbatch()
    argv = ["exec", "--run-dir", str(run_dir), "--nproc-per-node", str(nproc), *options, "--", *command]
    return submit(kind="exec", req=req, folder=run_dir / "slurm", tasks=[{"run_dir": str(run_dir), "argv": argv}],
                  command=_shown(), job_name=f"envkit-{run_dir.parent.name}", gpus=gpus_for(device, nproc, req), made=made)


def sweep_job(runs, config: str, *, overrides, profile, python, parallel: int | None, stop_after, req: SlurmRequest) -> dict | None:
    """One array job, one task per combination not yet completed."""
    need_sbatch()
    todo = [r for r in runs if r.state != "completed"]
    if not todo:
        return None
    root = todo[0].run_dir.parent.parent  # the runs folder (experiment.output_dir)
    stem = re.sub(r"[^\w.-]+", "-", Path(config).stem)
    folder = root / ".slurm" / f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    tasks = [{"run_dir": str(r.run_dir),
              "argv": ["run", str(Path(config).resolve()), "--run-id", r.run_dir.name, *_common([*overrides, *r.combo.set_args()], profile, python),
                       *(["--stop-after", str(stop_after)] if stop_after else [])]} for r in todo]
    device = todo[0].plan.cfg.values["device"]["type"]
    return submit(kind="sweep", req=req, folder=folder, tasks=tasks, command=_shown(), job_name=f"envkit-sweep-{Path(config).stem}",
                  gpus=gpus_for(device, 1, req), made=_made(folder), array_throttle=parallel)


def _shown() -> list[str]:
    from envkit.redact import redact_argv

    return ["envkit", *redact_argv(sys.argv)[1:]]


def announce(record: dict, as_json: bool) -> None:
    """One line (or the JSON) for the user; --dry-run prints the script."""
    if record.get("dry_run"):
        if as_json:
            click.echo(json.dumps({"dry_run": True, "script": record["script"], "tasks": record["tasks"]}, indent=2))
        else:
            click.echo(record["script"], nl=False)
        return
    folder = Path(record["tasks"][0]["run_dir"]) if record["kind"] != "sweep" else None
    if as_json:
        click.echo(json.dumps({"job_id": record["job_id"], "kind": record["kind"], "runs": [t["run_dir"] for t in record["tasks"]]}, indent=2))
        return
    if folder is not None:
        click.echo(f"submitted Slurm job {record['job_id']}: run folder {folder} (script {folder / 'slurm' / 'job.sbatch'}); "
                   f"`envkit runs` shows its state, `envkit monitor {folder}` follows it")
    else:
        click.echo(f"submitted Slurm array job {record['job_id']}: {len(record['tasks'])} runs; `envkit sweep` (without --slurm) shows the table")
