"""Write the job (RECORD/job.json: what each node runs; job.sbatch: the script) and hand it to
sbatch. Nothing is left behind when sbatch refuses: the folders this submission made are removed,
and sbatch's own words are the error (exit 2)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.fsutil import atomic_write_text
from envkit.slurm import script
from envkit.slurm.options import SlurmRequest


def need_sbatch() -> None:
    if shutil.which("sbatch") is None:
        raise EnvkitError("--slurm needs Slurm's sbatch, which is not on PATH here", where="--slurm",
                          fix="run this on the cluster's login node (or `module load slurm`), or drop --slurm")


def write_record(folder: Path, record: dict) -> Path:
    path = folder / "job.json"
    atomic_write_text(path, json.dumps(record, indent=2, default=str) + "\n")
    return path


def read_record(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise EnvkitError(f"cannot read the job record {path}: {exc}", where=str(path),
                          fix="submit again with --slurm (the record is written at submission)") from None
    return data


def submit(*, kind: str, req: SlurmRequest, folder: Path, tasks: list[dict], command: list[str], job_name: str,
           gpus: int, made: list[Path], array_throttle: int | None = None, say=print) -> dict:
    """folder: where job.sbatch and job.json go (RUN/slurm, or the sweep's own folder); tasks: one
    per array index ({"run_dir", "argv"}: the envkit command each node runs); made: the folders
    this submission created, removed again if sbatch refuses. Returns the record (with job_id,
    or dry_run)."""
    folder.mkdir(parents=True, exist_ok=True)
    array = None
    if kind == "sweep":
        array = f"0-{len(tasks) - 1}" + (f"%{array_throttle}" if array_throttle else "")
    record = {"kind": kind, "cwd": str(Path.cwd()), "python": sys.executable, "command": command,
              "request": req.to_dict(), "gpus_per_node": gpus, "tasks": tasks, "submitted_at": time.time(), "job_id": None}
    output = str(folder / ("slurm-%A_%a.out" if array else "slurm-%j.out"))
    text = script.render(req=req, gpus=gpus, job_name=job_name, run_dir=Path(tasks[0]["run_dir"]) if kind != "sweep" else folder,
                         record=folder / "job.json", script=folder / "job.sbatch", output=output, cwd=Path.cwd(),
                         python=sys.executable, command=command, array=array)
    if req.dry_run:
        for d in made:
            shutil.rmtree(d, ignore_errors=True)
        record["dry_run"] = True
        record["script"] = text
        return record
    write_record(folder, record)
    atomic_write_text(folder / "job.sbatch", text)
    try:
        out = subprocess.run(["sbatch", "--parsable", str(folder / "job.sbatch")], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        _undo(made)
        raise EnvkitError(f"sbatch did not answer: {exc}", where="sbatch", fix="`sinfo` should answer first; see `envkit doctor --slurm`") from None
    if out.returncode != 0:
        _undo(made)
        words = [ln.strip() for ln in (out.stderr or out.stdout).splitlines() if ln.strip()]
        raise EnvkitError(f"sbatch refused the job: {words[-1] if words else f'exit code {out.returncode}'}", where="sbatch",
                          fix="correct that option (nothing was submitted, no run folder was kept)")
    record["job_id"] = out.stdout.strip().split(";")[0]
    write_record(folder, record)
    return record


def _undo(made: list[Path]) -> None:
    for d in made:
        shutil.rmtree(d, ignore_errors=True)
