"""The names of what a run folder keeps for `envkit reproduce`, and their one reader."""

from __future__ import annotations

import json
import os
from pathlib import Path

from envkit.fsutil import atomic_write_text, same_process
from envkit.runfolder import names
from envkit.runfolder.bounded import read_json_lenient

RECORD = names.RECORD  # code state, data identity, config, determinism (record/start.py)
LOCK = names.LOCK  # the training interpreter's environment (record/envlock.py)
CODE_DIR = names.CODE_DIR  # patches and untracked files (record/code.py)
PENDING = names.PENDING  # the run's record being finished (its environment's lock) while it starts (record/start.py)
REPRODUCTIONS = names.REPRODUCTIONS  # each `envkit reproduce` of this run and its outcome (reproduce/outcome.py)
FORMAT = 1



def being_written(run_dir: Path) -> bool:
    """Whether the run's record is still being written: PENDING is there and names a live process
    (the one writing it: its PID and start time). A PENDING left by a process that died, or one that
    names no process, is not waited on."""
    pending = read_json_lenient(Path(run_dir) / PENDING)
    if not pending or os.path.lexists(Path(run_dir) / RECORD):
        return False
    pid, started = pending.get("pid"), pending.get("start_time")
    if started is None:  # an envkit before the start time was written: the PID alone
        return isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 and _alive(pid)
    return same_process(pid, started)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def read_record(run_dir: Path, wait: float = 0.0) -> dict | None:
    """record.json; with `wait`, up to that many seconds for one still being written (being_written)."""
    import time

    deadline = time.monotonic() + wait
    while being_written(run_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    return read_json_lenient(Path(run_dir) / RECORD)


def read_reproductions(run_dir: Path) -> list[dict]:
    data = read_json_lenient(Path(run_dir) / REPRODUCTIONS) or {}
    return [r for r in data.get("reproductions") or [] if isinstance(r, dict)]


def add_reproduction(run_dir: Path, entry: dict) -> None:
    """Append to the original run's reproductions.json (read bounded, written whole and atomically:
    a link planted at its name is replaced, never written through)."""
    path = Path(run_dir) / REPRODUCTIONS
    data = read_json_lenient(path) or {}
    data["reproductions"] = [*read_reproductions(run_dir), entry]
    atomic_write_text(path, json.dumps(data, indent=2, default=str) + "\n")
