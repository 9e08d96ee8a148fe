"""Reading a trainer run folder in the tests: its losses by step, its summary, and losses compared at
a relative tolerance (each file states why its tolerance is what it is)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def losses(run_dir: Path) -> dict[int, float]:
    """step -> loss, the last row of a step (a resumed run logs again the steps after its checkpoint)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def close(a: dict[int, float], b: dict[int, float], steps, rel: float) -> None:
    for s in steps:
        assert a[s] == pytest.approx(b[s], rel=rel), (s, a[s], b[s])


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())
