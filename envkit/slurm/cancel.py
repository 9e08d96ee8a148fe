"""`envkit stop RUN` for a run that a Slurm job trains: ask it to checkpoint first (SIGUSR1 to the
job's batch step, which passes it to every rank), with RUN/slurm/stop-requested telling that step
not to requeue; then `scancel` whatever is left after the grace period. A job still pending is
simply cancelled: it has nothing to save."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from envkit.fsutil import atomic_write_text
from envkit.slurm.batch import STOP_FILE
from envkit.runfolder.slurm_state import ACTIVE, job_of, job_state


def _scancel(*args: str) -> str | None:
    out = subprocess.run(["scancel", *args], capture_output=True, text=True, timeout=60)
    return None if out.returncode == 0 else (out.stderr or out.stdout).strip()


def stop_job(run_dir: Path, grace: float, say=print) -> str | None:
    """What was done, or None when no live Slurm job trains this run (the local rules apply)."""
    job = job_of(run_dir)
    if job is None:
        return None
    job_id = str(job["job_id"])
    state = job_state(job_id)
    if state is None or state not in ACTIVE:
        return None
    atomic_write_text(Path(run_dir) / "slurm" / STOP_FILE, f"{job_id}\n")  # this job only: a resubmission may requeue again
    if state == "PENDING":
        err = _scancel(job_id)
        return f"cancelled Slurm job {job_id} (it had not started)" + (f": {err}" if err else "")
    say(f"asking Slurm job {job_id} to checkpoint (SIGUSR1 to its batch step), then scancel after {grace:g} s")
    err = _scancel("--signal=USR1", "--batch", job_id)
    if err:
        say(f"scancel --signal=USR1: {err}")
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if job_state(job_id) not in ACTIVE:
            return f"Slurm job {job_id} checkpointed and ended"
        time.sleep(1)
    err = _scancel(job_id)
    return f"Slurm job {job_id} cancelled after {grace:g} s" + (f" ({err})" if err else "")
