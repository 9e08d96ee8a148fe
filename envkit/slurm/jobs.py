"""What `run --slurm`, `exec --slurm` and `sweep --slurm` submit: the run folders they would have
made on this machine, and for each the envkit command its nodes run (node.py adds the rendezvous)."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import click

from envkit.config.config import read_yaml
from envkit.config.paths import resolve_path
from envkit.console import print_json
from envkit.redact import redact_argv
from envkit.slurm.options import SlurmRequest
from envkit.slurm.submit import need_sbatch, submit

if TYPE_CHECKING:
    from envkit.config.schema import DeviceType

NETWORK_FS = ("nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "smb3", "cephfs", "panfs", "wekafs", "9p", "virtiofs")


def filesystem_of(path: Path) -> tuple[str, str] | None:
    """(mount point, type) holding path, from /proc/mounts (Linux); None elsewhere."""
    try:
        with open("/proc/mounts") as f:
            mounts = [line.split()[1:3] for line in f]
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


def made_folders(folder: Path) -> list[Path]:
    """The top-most folder that creating `folder` makes (removed again if sbatch refuses)."""
    top = None
    p = folder
    while not p.exists():
        top = p
        p = p.parent
    return [top] if top is not None else []


def gpus_for(device: DeviceType | Literal[""], nproc: int, req: SlurmRequest) -> int:
    """`device`: device.type, or a profile's train.device for exec ("": no profile)."""
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


def run_job(p, *, stop_after, req: SlurmRequest) -> dict:
    """Submit the one run of a plan (envkit/plan/, checked there for a run on req.nodes nodes)."""
    need_sbatch()
    run, ask = p.run, p.request
    if run.note:
        click.echo(run.note, err=True)
    if p.cfg.device.type == "auto" and req.gpus_per_node is None:
        click.echo("note: device.type auto is decided on the node: this job asks for no GPUs "
                   "(--gpus-per-node N, or device.type: cuda, asks for them)", err=True)
    files = snapshot(p.cfg.source, run.run_dir / "slurm")
    argv = ["run", *files, "--run-id", run.run_dir.name, "--nproc-per-node", str(ask.nproc),
            *_common(ask.overrides, ask.profile, ask.python), *(["--stop-after", str(stop_after)] if stop_after else [])]
    record = submit(kind="run", req=req, folder=run.run_dir / "slurm", tasks=[{"run_dir": str(run.run_dir), "argv": argv}],
                    command=_shown(), job_name=f"envkit-{run.run_dir.parent.name}", gpus=gpus_for(p.cfg.device.type, ask.nproc, req),
                    made=made_folders(run.run_dir), files=files)
    record["trainer_python"] = p.python
    return record


def exec_job(run_dir: Path, *, command: list[str], options: list[str], nproc: int, device: DeviceType | Literal[""], req: SlurmRequest,
             made: list[Path]) -> dict:
    need_sbatch()
    argv = ["exec", "--run-dir", str(run_dir), "--nproc-per-node", str(nproc), *options, "--", *command]
    return submit(kind="exec", req=req, folder=run_dir / "slurm", tasks=[{"run_dir": str(run_dir), "argv": argv}],
                  command=_shown(), job_name=f"envkit-{run_dir.parent.name}", gpus=gpus_for(device, nproc, req), made=made)


def sweep_job(runs, config: str, *, overrides, profile, python, parallel: int | None, stop_after, req: SlurmRequest) -> dict | None:
    """One array job, one task per combination not yet completed."""
    need_sbatch()
    todo = [r for r in runs if r.start != "completed"]
    if not todo:
        return None
    root = todo[0].run_dir.parent.parent  # the runs folder (experiment.output_dir)
    stem = re.sub(r"[^\w.-]+", "-", Path(config).stem)
    folder = root / ".slurm" / f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    files = snapshot(config, folder)  # the grid as submitted: every task trains its combination of it
    tasks = [{"run_dir": str(r.run_dir),
              "argv": ["run", *files, "--run-id", r.run_dir.name, *_common([*overrides, *r.combo.set_args()], profile, python),
                       *(["--stop-after", str(stop_after)] if stop_after else [])]} for r in todo]
    device = todo[0].plan.cfg.device.type
    record = submit(kind="sweep", req=req, folder=folder, tasks=tasks, command=_shown(), job_name=f"envkit-sweep-{Path(config).stem}",
                    gpus=gpus_for(device, 1, req), made=made_folders(folder), array_throttle=parallel,
                    files=files)
    record["report"] = ["envkit", "sweep", config, *_common(overrides, profile, python), "--report-only"]
    return record


def snapshot(config: str, folder: Path) -> dict[str, str]:
    """{path: text} of the config as submitted, which the job trains (empty for the defaults): a job
    waits in the queue, and train.yaml edited meanwhile must not change what it trains. The file's
    own mapping, with a relative dataset.path made absolute from the file's folder (where the
    original would have found it); --set and --profile stay on the job's command line."""
    if config == "<defaults>":
        return {}
    import types

    import yaml

    data = read_yaml(config)
    ds = data.get("dataset")
    if isinstance(ds, dict) and isinstance(ds.get("path"), str) and ds["path"]:
        ds["path"] = str(resolve_path(types.SimpleNamespace(source=str(config)), ds["path"]).resolve())
    text = (f"# {Path(config).resolve()} as submitted to Slurm ({time.strftime('%Y-%m-%d %H:%M:%S')}): the job trains this copy\n"
            + yaml.safe_dump(data, sort_keys=False, default_flow_style=False))
    return {str(folder / "train.yaml"): text}


def _shown() -> list[str]:
    return ["envkit", *redact_argv(sys.argv)[1:]]


def announce(record: dict, as_json: bool) -> None:
    """One line (or the JSON) for the user; --dry-run prints the script."""
    note = local_note(record.get("trainer_python") or record["python"])
    if note and not record.get("dry_run"):
        click.echo(note, err=True)  # after sbatch took the job: a refused option stays one line
    if record.get("dry_run"):
        if as_json:
            print_json({"dry_run": True, "script": record["script"], "tasks": record["tasks"]})
        else:
            click.echo(record["script"], nl=False)
        return
    folder = Path(record["tasks"][0]["run_dir"]) if record["kind"] != "sweep" else None
    if as_json:
        print_json({"job_id": record["job_id"], "kind": record["kind"], "runs": [t["run_dir"] for t in record["tasks"]]})
        return
    if folder is not None:
        click.echo(f"submitted Slurm job {record['job_id']}: run folder {folder} (script {folder / 'slurm' / 'job.sbatch'}); "
                   f"`envkit runs` shows its state, `envkit monitor {folder}` follows it")
    else:
        import shlex

        report = " ".join(shlex.quote(a) for a in record.get("report") or ["envkit", "sweep", "--report-only"])
        click.echo(f"submitted Slurm array job {record['job_id']}: {len(record['tasks'])} runs; `{report}` shows the table "
                   "(it trains nothing here)")
