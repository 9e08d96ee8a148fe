"""The names of what a run folder keeps for `envkit reproduce`, and their one reader."""

from __future__ import annotations

import json
from pathlib import Path

from envkit.runfolder import names

RECORD = names.RECORD  # code state, data identity, config, determinism (record/start.py)
LOCK = names.LOCK  # the training interpreter's environment (record/envlock.py)
CODE_DIR = names.CODE_DIR  # patches and untracked files (record/code.py)
PENDING = names.PENDING  # the run's record being finished (its environment's lock) while it starts (record/start.py)
REPRODUCTIONS = names.REPRODUCTIONS  # each `envkit reproduce` of this run and its outcome (reproduce/outcome.py)
FORMAT = 1


def read_json(path: Path) -> dict | None:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_record(run_dir: Path, wait: float = 0.0) -> dict | None:
    """record.json; with `wait`, up to that many seconds for one still being written (PENDING)."""
    import time

    deadline = time.monotonic() + wait
    while not (Path(run_dir) / RECORD).is_file() and (Path(run_dir) / PENDING).is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    return read_json(Path(run_dir) / RECORD)


def read_reproductions(run_dir: Path) -> list[dict]:
    data = read_json(Path(run_dir) / REPRODUCTIONS) or {}
    return [r for r in data.get("reproductions") or [] if isinstance(r, dict)]
