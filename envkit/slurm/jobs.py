"""What `run --slurm`, `exec --slurm` and `sweep --slurm` submit: the run folders they would have
made on this machine, and for each the envkit command its nodes run (node.py adds the rendezvous)."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import click

from envkit.errors import EnvkitError

from envkit.slurm.options import SlurmRequest
from envkit.slurm.submit import need_sbatch, submit


NETWORK_FS = ("nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "smb3", "cephfs", "panfs", "wekafs", "9p", "virtiofs")


def filesystem_of(path: Path) -> tuple[str, str] | None:
    """(mount point, type) holding path, from /proc/mounts (Linux); None elsewhere."""
    try:
        mounts = [line.split()[1:3] for line in open("/proc/mounts")]
    except OSError:
        return None
    target = str(Path(path).resolve())
    best = None
    for mnt, fstype in mounts:
        if (target == mnt or target.startswith(mnt.rstrip("/") + "/")) and (best is None or len(mnt) > len(best[0])):
            best = (mnt, fstype)
    return best


def local_note(python: str) -> str | None:
    """The nodes run envkit's Python and the managed venv from the paths seen here: on a local or
    in-memory filesystem they are likely missing there. A warning, since a one-machine cluster
    (or a local disk every node images alike) is fine; the job checks again and says so."""
    fs = filesystem_of(Path(python).parent)
    if fs and (fs[1] in ("tmpfs", "overlay", "ramfs") or str(Path(python).resolve()).startswith(("/tmp/", "/var/tmp/", "/dev/shm/"))):
        return (f"warning: {python} is on {fs[0]} ({fs[1]}), which compute nodes usually do not see; "
                "`envkit doctor --slurm` runs it on a node to check")
    if fs and not any(fs[1] == t or fs[1].startswith("fuse") for t in NETWORK_FS):
        return (f"note: {python} is on a local filesystem ({fs[1]} at {fs[0]}): the nodes must have it at the same path "
                "(`envkit doctor --slurm` checks)")
    return None


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
        raise EnvkitError("--slurm resumes a run folder by itself (--run-id), not from a checkpoint file", where="--resume",
                          fix="--run-id <the run's folder name>")
    from envkit.train.run import auto_batch

    if auto_batch.is_auto(p.cfg) and req.nodes > 1:  # each node would probe on its own and could decide differently
        raise EnvkitError("training.batch_size auto is decided per machine; with --nodes every node needs the same number",
                          where=launcher._where(p.cfg, "training.batch_size"),
                          fix="run once on one node (--nodes 1) to see the probed batch, then --set training.batch_size=N")
    from envkit.train.run.sharding import config_problem

    if problem := config_problem(p.cfg.values, nproc * req.nodes):  # before the job waits in the queue
        raise EnvkitError(problem[0], where=launcher._where(p.cfg, "training.parallel"), fix=problem[1])
    run_dir, resuming, note = launcher.choose_run_dir(p.cfg, run_id, resume)
    if note:
        click.echo(note, err=True)
    if p.cfg.values["device"]["type"] == "auto" and req.gpus_per_node is None:
        click.echo("note: device.type auto is decided on the node: this job asks for no GPUs "
                   "(--gpus-per-node N, or device.type: cuda, asks for them)", err=True)
    config_arg = [] if config == "<defaults>" else [str(Path(config).resolve())]
    argv = ["run", *config_arg, "--run-id", run_dir.name, "--nproc-per-node", str(nproc),
            *_common(overrides, profile, python), *(["--stop-after", str(stop_after)] if stop_after else [])]
    record = submit(kind="run", req=req, folder=run_dir / "slurm", tasks=[{"run_dir": str(run_dir), "argv": argv}],
                    command=_shown(), job_name=f"envkit-{run_dir.parent.name}", gpus=gpus_for(p.cfg.values["device"]["type"], nproc, req),
                    made=_made(run_dir))
    record["trainer_python"] = p.python
    return record


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
    note = local_note(record.get("trainer_python") or record["python"])
    if note and not record.get("dry_run"):
        click.echo(note, err=True)  # after sbatch took the job: a refused option stays one line
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
