"""The job's batch step (`envkit slurm-batch RECORD -- srun ...`, the last line of job.sbatch).

It starts srun (one envkit task per node) and waits. SIGUSR1 (Slurm's warning, --signal=B:USR1@GRACE,
or `scancel --signal=USR1 --batch`) and SIGTERM (a preemption) are passed to srun as SIGUSR1, which
srun forwards to every node's task: each asks its trainer to checkpoint at the next step. When the
tasks have ended, a run that was signalled and has not completed is requeued (`scontrol requeue`,
an array task by its own id): the same job runs again and resumes from that checkpoint. `envkit
stop` leaves RUN/slurm/stop-requested first, so a stopped run is not requeued."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from envkit.fsutil import atomic_write_text
from envkit.slurm.submit import read_record

STOP_FILE = "stop-requested"


def job_id() -> str:
    """This job's id as scontrol takes it: an array task is ARRAYJOB_TASK, its own id otherwise."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return f"{array}_{task}"
    return os.environ.get("SLURM_JOB_ID", "")


def this_task(record: dict) -> dict:
    tasks = record["tasks"]
    index = int(os.environ.get("SLURM_ARRAY_TASK_ID") or 0) if record.get("kind") == "sweep" else 0
    return tasks[index]


def note_job(run_dir: Path, record_path: Path, record: dict) -> None:
    """RUN/slurm/job.json names the job now running the run (a requeue keeps the id; `sbatch
    job.sbatch` again, or an array task, gives another): `envkit runs` and `envkit stop` read it."""
    folder = run_dir / "slurm"
    folder.mkdir(parents=True, exist_ok=True)
    mine = folder / "job.json"
    current = dict(record) if mine.resolve() == record_path.resolve() else {"kind": record.get("kind"), "record": str(record_path)}
    current.update(job_id=job_id(), restarts=int(os.environ.get("SLURM_RESTART_COUNT") or 0), started_at=time.time())
    atomic_write_text(mine, json.dumps(current, indent=2, default=str) + "\n")


def _stop_requested(run_dir: Path) -> bool:
    """`envkit stop` asked this job (by its id) to end: a later submission of the run is not bound by it."""
    try:
        return (run_dir / "slurm" / STOP_FILE).read_text().strip() == job_id()
    except OSError:
        return False


def status_of(run_dir: Path) -> str | None:
    try:
        return json.loads((run_dir / "summary.json").read_text()).get("status")
    except (OSError, ValueError, AttributeError):
        return None


def main(record_path: str, srun: list[str]) -> int:
    path = Path(record_path).resolve()
    record = read_record(path)
    task = this_task(record)
    run_dir = Path(task["run_dir"])
    note_job(run_dir, path, record)
    say = lambda m: print(f"envkit slurm: {m}", file=sys.stderr, flush=True)  # noqa: E731 (the job's output file)
    got: list[str] = []
    proc = subprocess.Popen(srun)

    def on_signal(signum, frame):
        name = signal.Signals(signum).name
        got.append(name)
        say(f"{name}: asking every node to checkpoint at the next step")
        try:
            proc.send_signal(signal.SIGUSR1)  # srun forwards it to each node's task (one node: the task itself)
        except ProcessLookupError:
            pass

    for s in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(s, on_signal)
    rc = proc.wait()
    status = status_of(run_dir)
    stopped = _stop_requested(run_dir)
    if got and record["request"].get("requeue", True) and status != "completed" and not stopped:
        say(f"run {run_dir.name} {status or 'not finished'} after {got[0]}: requeueing job {job_id()}")
        out = subprocess.run(["scontrol", "requeue", job_id()], capture_output=True, text=True)
        if out.returncode != 0:
            say(f"scontrol requeue failed: {(out.stderr or out.stdout).strip()} (submit again: `sbatch {path.parent / 'job.sbatch'}`)")
            return 1
        return 0
    say(f"run {run_dir.name}: {status or 'no summary'} (srun exit code {rc})" + (" after `envkit stop`" if stopped else ""))
    if stopped and status == "interrupted":
        return 0  # stopped as asked, with its checkpoint: not a failed job
    return 0 if status == "completed" or (status is None and rc == 0) else 1
