"""A run's Slurm job as `envkit runs` and `envkit stop` see it: RUN/slurm/job.json names the job,
squeue (then scontrol, then sacct) says its state; None where no command answers (the heartbeat
speaks then)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path


# Slurm job states in which the job will still run (or runs): its folder is not abandoned
ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING",
          "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD", "SPECIAL_EXIT")


def job_of(run_dir: Path) -> dict | None:
    try:
        data = json.loads((Path(run_dir) / "slurm" / "job.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("job_id") else None


def _ask(cmd: list[str]) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def job_state(job_id: str) -> str | None:
    """PENDING, RUNNING, COMPLETED, CANCELLED, ... or None when Slurm does not know or cannot say."""
    state = _ask(["squeue", "-h", "-j", str(job_id), "-o", "%T"])
    if state:
        return state.split()[0]
    shown = _ask(["scontrol", "show", "job", "-o", str(job_id)])
    if shown:
        for tok in shown.split():
            if tok.startswith("JobState="):
                return tok.split("=", 1)[1]
    acct = _ask(["sacct", "-n", "-X", "-P", "-j", str(job_id), "-o", "State"])
    if acct:
        return acct.splitlines()[0].split()[0]
    return None


def slurm_fields(run_dir: Path) -> dict | None:
    job = job_of(run_dir)
    if job is None:
        return None
    return {"job_id": str(job["job_id"]), "state": job_state(str(job["job_id"])), "restarts": job.get("restarts", 0)}
