"""Write the job (RECORD/job.json: what each node runs; job.sbatch: the script) and hand it to
sbatch. Nothing is left behind when sbatch refuses: the folders this submission made are removed,
and sbatch's own words are the error (exit 2)."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Literal

from envkit.errors import EnvkitError
from envkit.fsutil import atomic_write_text
from envkit.slurm import script
from envkit.slurm.options import SlurmRequest
from envkit.runfolder.slurm_state import ACTIVE, job_of, job_state

JobKind = Literal["run", "exec", "sweep"]  # what a job trains: one run, one exec, or a sweep's array


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


def submit(*, kind: JobKind, req: SlurmRequest, folder: Path, tasks: list[dict], command: list[str], job_name: str,
           gpus: int, made: list[Path], array_throttle: int | None = None, files: dict | None = None, say=print) -> dict:
    """folder: where job.sbatch and job.json go (RUN/slurm, or the sweep's own folder); tasks: one
    per array index ({"run_dir", "argv"}: the envkit command each node runs); made: the folders
    this submission created, removed again if sbatch refuses; files: {path: text} the job reads
    (the config snapshot), written only once no other job owns the run folders. Returns the record
    (with job_id, or dry_run)."""
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
    with ownership_lock(Path(tasks[0]["run_dir"])):  # two submissions of one run folder: the second sees the first's job
        # refused: nothing is removed. The folder is the owning job's (a submission racing this one may
        # have made it a moment ago, and this one, seeing it absent at its start, counted it as its own)
        refuse_owned([Path(t["run_dir"]) for t in tasks])
        folder.mkdir(parents=True, exist_ok=True)
        for path, content in (files or {}).items():
            atomic_write_text(Path(path), content)
        write_record(folder, record)
        atomic_write_text(folder / "job.sbatch", text)
        record["job_id"] = _sbatch(folder / "job.sbatch", made)
        write_record(folder, record)
        if kind == "sweep":
            for i, t in enumerate(tasks):  # each run folder names its own task, for `envkit runs` and the next submission
                claim = {"kind": "sweep", "record": str(folder / "job.json"), "job_id": f"{record['job_id']}_{i}"}
                write_record(Path(t["run_dir"]) / "slurm", claim)
    return record


def _sbatch(path: Path, made: list[Path]) -> str:
    try:
        out = subprocess.run(["sbatch", "--parsable", str(path)], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        _undo(made)
        raise EnvkitError(f"sbatch did not answer: {exc}", where="sbatch", fix="`sinfo` should answer first; see `envkit doctor --slurm`") from None
    if out.returncode != 0:
        _undo(made)
        words = [ln.strip() for ln in (out.stderr or out.stdout).splitlines() if ln.strip()]
        raise EnvkitError(f"sbatch refused the job: {words[-1] if words else f'exit code {out.returncode}'}", where="sbatch",
                          fix="correct that option (nothing was submitted, no run folder was kept)")
    return out.stdout.strip().split(";")[0]


# ---------------------------------------------------------------- one job per run folder


def _lock_file(run_dir: Path) -> Path:
    """One lock for every run folder under the runs folder (RUNS/<experiment>/<run>): submissions
    and batch steps that start take it while they look at, and write, RUN/slurm/job.json."""
    return Path(run_dir).resolve().parent.parent / ".slurm" / "owner.lock"


@contextlib.contextmanager
def ownership_lock(run_dir: Path, timeout: float = 120):
    import fcntl

    path = _lock_file(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise EnvkitError(f"{path} stayed locked for {timeout:.0f} s", where=str(path),
                                      fix="another envkit submission or job start holds it; try again") from None
                time.sleep(0.1)
        yield  # closing the file releases the lock


def live_owner(run_dir: Path, mine: str | None = None) -> tuple[str, str] | None:
    """(job id, state) of the Slurm job RUN/slurm/job.json names, while that job is pending or
    running and is not `mine`; None when no job owns the folder (none recorded, or it has ended)."""
    job = job_of(run_dir)
    if job is None or str(job["job_id"]) == str(mine):
        return None
    state = job_state(str(job["job_id"]))
    return (str(job["job_id"]), state) if state in ACTIVE else None


def refuse_owned(run_dirs: list[Path]) -> None:
    for run_dir in run_dirs:
        owner = live_owner(run_dir)
        if owner is not None:
            raise EnvkitError(f"run folder {run_dir} already has Slurm job {owner[0]} ({owner[1].lower()}): one job trains a run folder",
                              where=str(run_dir), fix=f"wait for job {owner[0]}, or `envkit stop {run_dir}` first; "
                                                      "--run-id NEW submits a separate run")


def _undo(made: list[Path]) -> None:
    for d in made:
        shutil.rmtree(d, ignore_errors=True)
