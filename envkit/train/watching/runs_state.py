"""What a run folder says about its run, read from its files (no torch): summary.json (finished),
else heartbeat.json: "running" while it is fresh and its process lives, "stalled" when it is older
than STALL_SECONDS. Whether anything still runs in the folder is asked of its owner lock
(RUN/.owner.lock, runfolder.owner.take_owner_lock: the kernel releases it when its holders die), not of a
PID that may have been given to another program: "orphaned" while a process still holds it but the
supervisor that took it (envkit run/exec/sweep) is gone, "killed" once nothing holds it and no
summary was written; whoever notices that (`envkit runs`, `monitor`, `stop`, `run`) writes the
summary.json, marked as written after the fact. A folder without an owner lock (from an older
envkit) is judged by its heartbeat's PID: "dead" when it is gone. Used by `envkit runs`,
`envkit monitor` and `envkit plot`."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TypeGuard

from envkit.errors import EnvkitError
from envkit.runfolder import names

STALL_SECONDS = 60.0
# The key of the marker row a run writes to metrics.jsonl when it goes on from an earlier step.
REWOUND = "rewound_to_step"
# The device fields of a metrics row that monitor shows and --json reports under "latest".
DEVICE_KEYS = ("device_util_pct", "renderer_util_pct", "device_mem_used_mb", "device_mem_total_mb", "torch_allocated_mb",
               "torch_reserved_mb", "torch_peak_mb", "torch_driver_mb", "power_w", "temp_c", "system_mem_free_pct", "cpu_pct",
               "rss_mb", "dataloader_workers", "data_wait_fraction")


def _read(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def pid_alive(pid) -> bool | None:
    """True/False for a pid on this host; None when it cannot be told (no pid, an odd error)."""
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return None
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """A process that has exited but is not yet reaped still answers kill(0); on Linux /proc says
    it is a zombie (state Z), so `envkit stop` and the watchers need not wait for its parent."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # the state follows the command name, which is in parentheses and may itself hold ") "
    return stat[stat.rfind(")") + 2:stat.rfind(")") + 3] == "Z"


def _final(summary: dict | None, beat: dict) -> TypeGuard[dict]:
    """summary.json speaks for the run (not an older one's, left before a resume wrote a new heartbeat)."""
    return bool(summary) and (not beat or summary.get("updated_at", 0) >= beat.get("updated_at", 0) - 1)


def _owner_alive(run_dir: Path) -> bool:
    from envkit.process_lock import same_process
    from envkit.runfolder.owner import read_owner

    owner = read_owner(run_dir)
    return same_process(owner.get("pid"), owner.get("start_time"))


def owner_lock_state(run_dir: Path) -> str | None:
    from envkit.runfolder.owner import owner_lock_state as state

    return state(run_dir)


def notice_killed(run_dir: Path, noticed_by: str) -> dict | None:
    """The folder's owner is gone and left no summary: write summary.json, status "killed", marked as
    written after the fact (by whom, when, and the last sign of life). Done while holding the owner
    lock, so a run starting in the folder meanwhile is not mislabelled. None when the lock is held."""
    from envkit.fsutil import atomic_write_text
    from envkit.runfolder.owner import owner_lock_if_free, read_owner

    with owner_lock_if_free(run_dir) as free:
        if not free:
            return None
        beat = _read(run_dir / names.HEARTBEAT) or {}
        summary = _read(run_dir / names.SUMMARY)
        if _final(summary, beat):
            return summary  # written meanwhile by the run itself
        rows = [r for r in read_metrics(run_dir) if isinstance(r, dict)]
        steps = [r["step"] for r in rows if isinstance(r.get("step"), int) and "loss" in r]
        losses = [r["loss"] for r in rows if isinstance(r.get("loss"), (int, float))]
        config = _read(run_dir / names.CONFIG) or {}
        owner = read_owner(run_dir)
        now = time.time()
        out = {"kind": config.get("kind", "train"), "status": "killed", "written_after_the_fact": True,
               "noticed_by": noticed_by, "noticed_at": now, "updated_at": now,
               "last_heartbeat_at": beat.get("updated_at"), "owner_pid": owner.get("pid"), "owner_command": owner.get("command"),
               "steps": steps[-1] if steps else beat.get("step"), "max_steps": beat.get("max_steps"),
               "final_loss": losses[-1] if losses else None, "hints": [],
               "reason": "its supervisor died without a word (SIGKILL, a crash, the machine lost power); nothing runs in the folder"}
        try:
            atomic_write_text(run_dir / names.SUMMARY, json.dumps(out, indent=2) + "\n")
        except OSError as exc:  # a read-only or full disk: what was noticed is still shown, just not recorded
            out["not_recorded"] = f"cannot write {run_dir / names.SUMMARY}: {exc.strerror or exc}"
        return out


def run_state(run_dir: Path, now: float | None = None, noticed_by: str = "envkit runs") -> dict:
    """{status, step, max_steps, loss, best_val_loss, eta_seconds, age_seconds, ...} of one run."""
    now = now or time.time()
    beat = _read(run_dir / names.HEARTBEAT) or {}
    summary = _read(run_dir / names.SUMMARY)
    out = {"run": run_dir.name, "experiment": run_dir.parent.name, "path": str(run_dir),
           "step": beat.get("step"), "max_steps": beat.get("max_steps"), "loss": beat.get("loss"),
           "eta_seconds": beat.get("eta_seconds"), "best_val_loss": None, "epochs": beat.get("epochs")}
    age = now - beat["updated_at"] if isinstance(beat.get("updated_at"), (int, float)) else None
    out["age_seconds"] = age
    if isinstance(beat.get("last_output_at"), (int, float)):  # exec runs: when the command last printed or logged
        out["quiet_seconds"] = now - max(beat["last_output_at"], beat.get("last_metric_at") or 0)
    rows = read_metrics(run_dir)
    from envkit.record.files import read_reproductions

    if done := read_reproductions(run_dir):  # `envkit reproduce`: the newest outcome, and how many
        out["reproduced"] = {"outcome": done[-1].get("outcome"), "run": done[-1].get("run"), "count": len(done)}
    from envkit.train.watching.slurm_state import ACTIVE, slurm_fields

    slurm = slurm_fields(run_dir)
    if slurm is not None:
        out["slurm"] = slurm
    queued = bool(slurm) and slurm["state"] in ACTIVE and slurm["state"] != "RUNNING"
    same_host = beat.get("host") in (None, os.uname().nodename if hasattr(os, "uname") else None)
    lock = owner_lock_state(run_dir) if same_host else None
    if queued and lock != "held" and not (summary and summary.get("status") in ("completed",)):
        out["status"] = "queued"  # waiting for Slurm (submitted, or requeued after a checkpoint): nobody was killed
        return out
    if lock == "held" and summary and summary.get("status") == "killed":
        summary = None  # a killed run being resumed: its new owner speaks, not the old summary
    elif lock == "free" and not _final(summary, beat) and not (slurm and slurm["state"] in ACTIVE):
        summary = notice_killed(run_dir, noticed_by) or summary
    _device_state(out, run_dir, rows, beat, summary)
    if _final(summary, beat):
        out.update(status=summary.get("status"), step=summary.get("steps"), max_steps=summary.get("max_steps"),
                   loss=summary.get("final_loss"), best_val_loss=summary.get("best_val_loss"), accuracy=summary.get("accuracy"),
                   tokens_per_second=summary.get("tokens_per_second"), samples_per_second=summary.get("samples_per_second"),
                   epochs=summary.get("epochs"))
        return out
    if lock == "held" and not _owner_alive(run_dir):
        out["status"] = "orphaned"  # the supervisor is gone, its command still runs (and holds the folder)
    elif not beat:
        out["status"] = "running" if lock == "held" else "new"
        return out
    elif lock is None and (pid_alive(beat.get("pid")) if same_host else None) is False:
        out["status"] = "dead"
    elif age is not None and age > STALL_SECONDS:
        out["status"] = "stalled"
    else:
        out["status"] = beat.get("status", "running")
    best = None
    for row in rows:
        if "val_loss" in row and (best is None or row["val_loss"] < best):
            best = row["val_loss"]
    out["best_val_loss"] = best
    return out


def _device_state(out: dict, run_dir: Path, rows: list[dict], beat: dict, summary: dict | None) -> None:
    """latest: the newest training row's throughput and device fields; avg_device_util_pct; hints
    (the trainer's, from summary.json, else judged from metrics.jsonl by the same pure function)."""
    from envkit.train.watching.diagnose import HintContext, diagnose

    train = [r for r in rows if "loss" in r]
    latest = {k: train[-1][k] for k in ("step", "dt_ms", "tokens_per_second", "samples_per_second", *DEVICE_KEYS)
              if train and k in train[-1]}
    if not latest and isinstance(beat.get("device"), dict):  # an exec run: the sample envkit took from outside
        latest = {k: beat["device"][k] for k in DEVICE_KEYS if k in beat["device"]}
    out["latest"] = latest
    utils = [r["device_util_pct"] for r in train if isinstance(r.get("device_util_pct"), (int, float))]
    out["avg_device_util_pct"] = (summary or {}).get("avg_device_util_pct") or (round(sum(utils) / len(utils), 1) if utils else None)
    if summary and "hints" in summary:
        out["hints"] = summary["hints"]
        return
    doc = _read(run_dir / names.CONFIG) or {}
    config = {s: {**kv, **{p.split(".", 1)[1]: v for p, v in (doc.get("derived") or {}).items() if p.split(".")[0] == s}}
              for s, kv in (doc.get("values") or {}).items() if isinstance(kv, dict)}  # the values the run used
    device = (summary or {}).get("device") or (beat.get("device") or {}).get("device") or "cpu"
    out["hints"] = [h.to_dict() for h in diagnose(rows, HintContext.from_config(config, device))]


def read_metrics(run_dir: Path) -> list[dict]:
    """The rows of metrics.jsonl as the run stands: where a marker row says the run went on from an
    earlier step (a resume from a checkpoint, a NaN rollback), the rows logged after that step
    before it are dropped, so that each step has the values of the attempt that counts."""
    rows: list = []
    try:
        with open(Path(run_dir) / names.METRICS, encoding="utf-8") as fh:
            for line in fh:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue  # a line being written
                back = row.get(REWOUND) if isinstance(row, dict) else None
                if isinstance(back, int) and not isinstance(back, bool):
                    rows = [r for r in rows if not _after(r, back)]
                    continue
                rows.append(row)
    except OSError:
        pass
    return rows


def _after(row, step: int) -> bool:
    at = row.get("step") if isinstance(row, dict) else None
    return isinstance(at, (int, float)) and not isinstance(at, bool) and at > step


def find_runs(root: Path) -> list[Path]:
    """Run folders (holding config.json) under root: root itself, root/<exp>/<run>, or root/runs/<exp>/<run>."""
    root = Path(root)
    if (root / names.CONFIG).is_file():
        return [root]
    marks = (names.CONFIG, "slurm/job.json")  # a run submitted to Slurm has only its job until a node starts it
    found = [p.parents[len(m.split("/")) - 1] for m in marks for p in [*root.glob(f"*/*/{m}"), *root.glob(f"*/{m}")]]
    if (root / "runs").is_dir() and not found:
        found = [p.parents[len(m.split("/")) - 1] for m in marks for p in (root / "runs").glob(f"*/*/{m}")]
    return sorted(set(found), key=started_at, reverse=True)


def started_at(run_dir: Path) -> float:
    """When the run started: its config.json's time (written once at the start, again at a resume),
    else its Slurm job's. Not the folder's: a record or a summary written late touches that, and a
    run that ended made "the newest run" look like the one started after it."""
    for mark in (names.CONFIG, "slurm/job.json"):
        try:
            return (run_dir / mark).stat().st_mtime
        except OSError:
            continue
    return 0.0


def resolve_run(run_dir: str | None) -> Path:
    if run_dir:
        p = Path(run_dir)
        if not (p / names.CONFIG).is_file():
            found = find_runs(p) if p.is_dir() else []
            if not found:
                raise EnvkitError("not a run folder (no config.json)", where=str(p), fix="`envkit runs` lists the runs")
            return found[0]
        return p
    found = find_runs(Path("runs")) if Path("runs").is_dir() else []
    if not found:
        raise EnvkitError("no runs under ./runs", fix="give a RUN_DIR, or start one with `envkit run train.yaml`")
    return found[0]
