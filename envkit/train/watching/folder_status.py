"""What a run folder says about its run, read from its files (no torch): summary.json (finished),
else heartbeat.json: "running" while it is fresh and its process lives, "stalled" when it is older
than STALL_SECONDS. Whether anything still runs in the folder is asked of its owner lock
(RUN/.owner.lock, runfolder.owner.take_owner_lock: the kernel releases it when its holders die), not of a
PID that may have been given to another program: "orphaned" while a process still holds it but the
supervisor that took it (envkit run/exec/sweep) is gone, "killed" once nothing holds it and no
summary was written; whoever notices that (`envkit runs`, `monitor`, `stop`, `run`) writes the
summary.json, marked as written after the fact (`liveness.notice_killed`). A folder without an owner
lock (from an older envkit) is judged by its heartbeat's PID: "dead" when it is gone. Used by
`envkit runs` and `envkit monitor`; the files alone, without this judgement, are `run_files`."""

from __future__ import annotations

import os
import time
from pathlib import Path

from envkit.runfolder.record_files import read_reproductions
from envkit.runfolder.owner import owner_lock_state
from envkit.train.watching.diagnose import HintContext, diagnose
from envkit.runfolder.liveness import notice_killed, owner_alive, pid_alive, summary_is_final
from envkit.runfolder.slurm_state import ACTIVE, slurm_fields
from envkit.runfolder.folder import RunFolder
from envkit.runfolder.progress import Heartbeat, Summary
from envkit.runfolder.records import RunStatus

STALL_SECONDS = 60.0
# The device fields of a metrics row that monitor shows and --json reports under "latest".
DEVICE_KEYS = ("device_util_pct", "renderer_util_pct", "device_mem_used_mb", "device_mem_total_mb", "torch_allocated_mb",
               "torch_reserved_mb", "torch_peak_mb", "torch_driver_mb", "power_w", "temp_c", "system_mem_free_pct", "cpu_pct",
               "rss_mb", "dataloader_workers", "data_wait_fraction")


def run_state(run_dir: Path, now: float | None = None, noticed_by: str = "envkit runs") -> dict:
    """{status, step, max_steps, loss, best_val_loss, eta_seconds, age_seconds, ...} of one run."""
    now = now or time.time()
    folder = RunFolder(run_dir)
    heartbeat, summary = folder.heartbeat(), folder.summary()
    beat = heartbeat or Heartbeat()
    out = {"run": run_dir.name, "experiment": run_dir.parent.name, "path": str(run_dir),
           "step": beat.step, "max_steps": beat.max_steps, "loss": beat.loss,
           "eta_seconds": beat.get("eta_seconds"), "best_val_loss": None, "epochs": beat.get("epochs")}
    age = now - beat.updated_at if beat.updated_at is not None else None
    out["age_seconds"] = age
    if beat.last_output_at is not None:  # exec runs: when the command last printed or logged
        out["quiet_seconds"] = now - max(beat.last_output_at, beat.last_metric_at or 0)
    rows = folder.metrics()
    settings = folder.settings()  # envkit.track.config: a script's own settings
    if settings:
        out["settings"] = {str(k): v for k, v in list(settings.items())[:50] if isinstance(v, (int, float, str, bool))}
    if done := read_reproductions(run_dir):  # `envkit reproduce`: the newest outcome, and how many
        out["reproduced"] = {"outcome": done[-1].get("outcome"), "run": done[-1].get("run"), "count": len(done)}
    slurm = slurm_fields(run_dir)
    if slurm is not None:
        out["slurm"] = slurm
    queued = bool(slurm) and slurm["state"] in ACTIVE and slurm["state"] != "RUNNING"
    same_host = beat.host in (None, os.uname().nodename if hasattr(os, "uname") else None)
    lock = owner_lock_state(run_dir) if same_host else None
    if queued and lock != "held" and not (summary and summary.completed):
        out["status"] = RunStatus.QUEUED.value  # waiting for Slurm (submitted, or requeued after a checkpoint): nobody was killed
        return out
    if lock == "held" and summary and summary.state is RunStatus.KILLED:
        summary = None  # a killed run being resumed: its new owner speaks, not the old summary
    elif lock == "free" and not summary_is_final(summary, heartbeat) and not (slurm and slurm["state"] in ACTIVE):
        summary = notice_killed(run_dir, noticed_by) or summary
    _device_state(out, folder, rows, beat, summary)
    if summary_is_final(summary, heartbeat):
        out.update(status=summary.status, step=summary.steps, max_steps=summary.max_steps,
                   loss=summary.final_loss, best_val_loss=summary.best_val_loss, accuracy=summary.get("accuracy"),
                   tokens_per_second=summary.get("tokens_per_second"), samples_per_second=summary.get("samples_per_second"),
                   epochs=summary.get("epochs"))
        return out
    if lock == "held" and not owner_alive(run_dir):
        out["status"] = RunStatus.ORPHANED.value  # the supervisor is gone, its command still runs (and holds the folder)
    elif heartbeat is None:
        out["status"] = (RunStatus.RUNNING if lock == "held" else RunStatus.NEW).value
        return out
    elif lock is None and (pid_alive(beat.pid) if same_host else None) is False:
        out["status"] = RunStatus.DEAD.value
    elif age is not None and age > STALL_SECONDS:
        out["status"] = RunStatus.STALLED.value
    else:
        out["status"] = beat.status or RunStatus.RUNNING.value
    best = None
    for row in rows:
        if "val_loss" in row and (best is None or row["val_loss"] < best):
            best = row["val_loss"]
    out["best_val_loss"] = best
    _newest_logged(out, rows)
    return out


def _newest_logged(out: dict, rows: list[dict]) -> None:
    """One step count for a live run: the heartbeat is written every few seconds, the metrics as the
    run logs them, so where the metrics are ahead (a best val loss read at step 20 beside a heartbeat
    of step 10), the step and loss are the newest logged row's."""
    logged = [r for r in rows if isinstance(r.get("step"), int) and not isinstance(r.get("step"), bool)]
    if not logged:
        return
    newest = max(logged, key=lambda r: r["step"])
    if out.get("step") is None or (isinstance(out["step"], int) and newest["step"] > out["step"]):
        out["step"] = newest["step"]
        losses = [r for r in logged if r["step"] == newest["step"] and isinstance(r.get("loss", r.get("train_loss")), (int, float))]
        if losses:
            out["loss"] = losses[-1].get("loss", losses[-1].get("train_loss"))


def _device_state(out: dict, folder: RunFolder, rows: list[dict], beat: Heartbeat, summary: Summary | None) -> None:
    """latest: the newest training row's throughput and device fields; avg_device_util_pct; hints
    (the trainer's, from summary.json, else judged from metrics.jsonl by the same pure function)."""
    train = [r for r in rows if "loss" in r]
    latest = {k: train[-1][k] for k in ("step", "dt_ms", "tokens_per_second", "samples_per_second", *DEVICE_KEYS)
              if train and k in train[-1]}
    if not latest and beat.device:  # an exec run: the sample envkit took from outside
        latest = {k: beat.device[k] for k in DEVICE_KEYS if k in beat.device}
    out["latest"] = latest
    utils = [r["device_util_pct"] for r in train if isinstance(r.get("device_util_pct"), (int, float))]
    out["avg_device_util_pct"] = (summary.get("avg_device_util_pct") if summary else None) or (round(sum(utils) / len(utils), 1) if utils else None)
    if summary and summary.hints is not None:
        out["hints"] = summary.hints
        return
    doc = folder.config()
    config = {s: {**kv, **{p.split(".", 1)[1]: v for p, v in (doc.get("derived") or {}).items() if p.split(".")[0] == s}}
              for s, kv in (doc.get("values") or {}).items() if isinstance(kv, dict)}  # the values the run used
    device = (summary.get("device") if summary else None) or beat.device.get("device") or "cpu"
    out["hints"] = [h.to_dict() for h in diagnose(rows, HintContext.from_config(config, device))]
