"""metrics.jsonl as the run stands, read through the one bounded reader: where a marker row says
the run went on from an earlier step (a resume from a checkpoint, a NaN rollback), the rows logged
after that step before it are dropped, so that each step has the values of the attempt that
counts. The watchers (`runs`, `monitor`, `plot`, sweeps) read at most the last MAX_BYTES of a file
(a long run's log, or a sparse giant planted in a folder someone sent); `reproduce` reads the
whole file into its snapshot or refuses it (runfolder/snapshot.py)."""

from __future__ import annotations

import json
from pathlib import Path

from envkit.runfolder import names
from envkit.runfolder.bounded import RunFolderError, read_bytes

REWOUND = "rewound_to_step"  # the key of the marker row a run writes when it goes on from an earlier step
MAX_BYTES = 64 << 20
_LINE_MAX = 1 << 20  # a row envkit writes is a few hundred bytes; a longer line is not parsed


def parse_rows(data: bytes) -> list[dict]:
    """The rows of metrics.jsonl's bytes (lines that are not a JSON object are skipped: a line being written)."""
    rows: list[dict] = []
    for line in data.split(b"\n"):
        if not line.strip() or len(line) > _LINE_MAX:
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(row, dict):
            continue
        back = row.get(REWOUND)
        if isinstance(back, int) and not isinstance(back, bool):
            rows = [r for r in rows if not _after(r, back)]
            continue
        rows.append(row)
    if any(r.get("source") == "printed" for r in rows) and any(r.get("source") != "printed" and "step" in r for r in rows):
        rows = [r for r in rows if r.get("source") != "printed"]  # the script logged through envkit.track: those win
    return rows


def read_metrics(run_dir: Path) -> list[dict]:
    """The rows of RUN/metrics.jsonl as the run stands; [] where it is absent or not a regular file."""
    try:
        data = read_bytes(Path(run_dir) / names.METRICS, max_bytes=MAX_BYTES, tail=True)
    except RunFolderError:
        return []
    return parse_rows(data or b"")


def _after(row: dict, step: int) -> bool:
    at = row.get("step")
    return isinstance(at, (int, float)) and not isinstance(at, bool) and at > step
