"""The job's batch step (`envkit slurm-batch RECORD -- srun ...`, the last line of job.sbatch).

It first claims the run folder (RUN/slurm/job.json names this job) unless another live job owns
it: one job trains a run folder. It starts srun (one envkit task per node) and waits. SIGUSR1
(Slurm's warning, --signal=B:USR1@GRACE, or `scancel --signal=USR1 --batch`) and SIGTERM (`scancel`,
the end of the job, a preemption) are passed to srun as SIGUSR1, which srun forwards to every
node's task: each asks its trainer to checkpoint at the next step. When the tasks have ended, a run
that got the SIGUSR1 envkit asked for and has not completed is requeued (`scontrol requeue`, an
array task by its own id): the same job runs again and resumes from that checkpoint. A bare SIGTERM
(as submitit reads it, the user's cancel) ends the job with the checkpoint kept; a job Slurm
requeued itself is left to Slurm. `envkit stop` leaves RUN/slurm/stop-requested first, so a
stopped run is not requeued."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from envkit.fsutil import atomic_write_text
from envkit.slurm.submit import live_owner, ownership_lock, read_record
from envkit.runfolder.folder import RunFolder

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
    summary = RunFolder(run_dir).summary()
    return summary.status if summary else None


def slurm_view() -> dict:
    """This job as slurmctld sees it now (JobState, Restarts, ...); {} when scontrol does not answer."""
    try:
        out = subprocess.run(["scontrol", "show", "job", "-o", job_id()], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return {}
    return dict(tok.split("=", 1) for tok in out.stdout.split() if "=" in tok) if out.returncode == 0 else {}


def requeued_by_slurm(view: dict) -> bool:
    """Slurm has put this job back in the queue itself (`scontrol requeue`, a preemption with
    PreemptMode=REQUEUE, a node failure): another requeue fails ("Job is pending execution")."""
    restarts = int(view.get("Restarts") or 0)
    return view.get("JobState", "").startswith(("PENDING", "REQUEUE")) or restarts > int(os.environ.get("SLURM_RESTART_COUNT") or 0)


def resubmit_hint(record_path: Path, record: dict) -> str:
    """The command that runs this run folder again, and nothing else: an array's one task."""
    script = record_path.parent / "job.sbatch"
    task = os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"sbatch --array={task} {script}" if record.get("kind") == "sweep" and task else f"sbatch {script}"


def claim(run_dir: Path, path: Path, record: dict) -> tuple[str, str] | None:
    """Note this job in RUN/slurm/job.json unless another live job owns the folder (then its id and
    state): a second submission of a run (`sbatch job.sbatch` by hand) must not train beside it."""
    with ownership_lock(run_dir):
        owner = live_owner(run_dir, mine=job_id())
        if owner is None:
            note_job(run_dir, path, record)
        return owner


def main(record_path: str, srun: list[str]) -> int:
    path = Path(record_path).resolve()
    record = read_record(path)
    task = this_task(record)
    run_dir = Path(task["run_dir"])

    def say(m: str) -> None:  # into the job's output file
        print(f"envkit slurm: {m}", file=sys.stderr, flush=True)

    owner = claim(run_dir, path, record)
    if owner is not None:
        say(f"run folder {run_dir} belongs to Slurm job {owner[0]} ({owner[1].lower()}): job {job_id()} leaves it alone "
            "(one job trains a run folder)")
        return 1
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
    return after(run_dir, path, record, got, rc, say)


def after(run_dir: Path, path: Path, record: dict, got: list[str], rc: int, say) -> int:
    """The tasks have ended. Only the warning envkit asked for (SIGUSR1: --signal before the time
    limit, `scancel --signal=USR1 --batch`, PreemptParameters=send_user_signal) requeues an
    unfinished run. A SIGTERM without it is `scancel` (or the job's end): the run keeps its
    checkpoint and the job ends. A job Slurm has requeued itself is left to Slurm."""
    status = status_of(run_dir)
    stopped = _stop_requested(run_dir)
    unfinished = status != "completed"
    if got and unfinished and not stopped:
        view = slurm_view()
        if requeued_by_slurm(view):
            say(f"run {run_dir.name} {status or 'not finished'} after {got[0]}: Slurm has requeued job {job_id()} "
                "itself; it resumes from the checkpoint when Slurm starts it again")
            return 0
        if "SIGUSR1" not in got:  # slurmctld shows a cancelled job as COMPLETING here: the signal is what tells
            say(f"run {run_dir.name} {status or 'not finished'}: job {job_id()} cancelled ({got[0]} without Slurm's warning: "
                "`scancel`, or the job's end), not requeued (only SIGUSR1, "
                f"Slurm's warning, requeues); its checkpoint is kept: `{resubmit_hint(path, record)}` resumes it")
            return 0 if status == "interrupted" else 1
        if record["request"].get("requeue", True):
            say(f"run {run_dir.name} {status or 'not finished'} after SIGUSR1: requeueing job {job_id()}")
            out = subprocess.run(["scontrol", "requeue", job_id()], capture_output=True, text=True)
            if out.returncode != 0:
                say(f"scontrol requeue failed: {(out.stderr or out.stdout).strip()} "
                    f"(submit this run again: `{resubmit_hint(path, record)}`)")
                return 1
            return 0
    say(f"run {run_dir.name}: {status or 'no summary'} (srun exit code {rc})" + (" after `envkit stop`" if stopped else ""))
    if stopped and status == "interrupted":
        return 0  # stopped as asked, with its checkpoint: not a failed job
    return 0 if status == "completed" or (status is None and rc == 0) else 1
