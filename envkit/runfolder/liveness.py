"""Whether anything still runs in a run folder, and the summary.json written when nothing does and
the run left none. It is asked of the folder's owner lock (RUN/.owner.lock,
runfolder.owner.take_owner_lock: the kernel releases it when its holders die), not of a PID that may
have been given to another program; a folder without one (from an older envkit) is judged by its
heartbeat's PID (`pid_alive`). Used by `envkit runs` and `monitor` (through `folder_status`), `envkit
stop` and `envkit run`."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TypeGuard

from envkit.fsutil import same_process
from envkit.runfolder.owner import owner_lock_if_free, read_owner
from envkit.runfolder.folder import RunFolder
from envkit.runfolder.progress import Heartbeat, Summary
from envkit.runfolder.records import RunStatus


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


def summary_is_final(summary: Summary | None, beat: Heartbeat | None) -> TypeGuard[Summary]:
    """summary.json speaks for the run (not an older one's, left before a resume wrote a new heartbeat)."""
    return summary is not None and summary.speaks_for(beat)


def owner_alive(run_dir: Path) -> bool:
    """The supervisor that took the folder's owner lock (envkit run/exec/sweep) is still the process it was."""
    owner = read_owner(run_dir)
    return same_process(owner.get("pid"), owner.get("start_time"))


def notice_killed(run_dir: Path, noticed_by: str) -> Summary | None:
    """The folder's owner is gone and left no summary: write summary.json, status "killed", marked as
    written after the fact (by whom, when, and the last sign of life). Done while holding the owner
    lock, so a run starting in the folder meanwhile is not mislabelled. None when the lock is held."""
    with owner_lock_if_free(run_dir) as free:
        if not free:
            return None
        folder = RunFolder(run_dir)
        beat, summary = folder.heartbeat(), folder.summary()
        if summary_is_final(summary, beat):
            return summary  # written meanwhile by the run itself
        beat = beat or Heartbeat()
        rows = [r for r in folder.metrics() if isinstance(r, dict)]
        steps = [r["step"] for r in rows if isinstance(r.get("step"), int) and "loss" in r]
        losses = [r["loss"] for r in rows if isinstance(r.get("loss"), (int, float))]
        owner = read_owner(run_dir)
        now = time.time()
        out = {"kind": folder.config().get("kind", "train"), "status": RunStatus.KILLED.value, "written_after_the_fact": True,
               "noticed_by": noticed_by, "noticed_at": now, "updated_at": now,
               "last_heartbeat_at": beat.updated_at, "owner_pid": owner.get("pid"), "owner_command": owner.get("command"),
               "steps": steps[-1] if steps else beat.step, "max_steps": beat.max_steps,
               "final_loss": losses[-1] if losses else None, "hints": [],
               "reason": "its supervisor died without a word (SIGKILL, a crash, the machine lost power); nothing runs in the folder"}
        try:
            folder.write_summary(out)
        except OSError as exc:  # a read-only or full disk: what was noticed is still shown, just not recorded
            out["not_recorded"] = f"cannot write {folder.summary_file}: {exc.strerror or exc}"
        return Summary(out)
