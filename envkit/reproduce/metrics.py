"""Two runs' metrics.jsonl compared step by step: for each metric that describes the training (loss,
val_loss, accuracy, grad_norm, lr, a script's own values), at every step both logged, the largest
|difference| and where it is, and the first step they differ at. What measures the machine rather
than the training (times, throughput, memory, utilisation, temperatures) is left out."""

from __future__ import annotations

import math
import re
from pathlib import Path

from envkit.runfolder.metrics import parse_rows, read_metrics

# Keys that measure the machine or the clock, not the computation (metrics.jsonl of envkit run and exec).
MACHINE = re.compile(r"(^dt|_ms$|_s$|seconds|per_second|per_sec|_pct$|_mb$|_gb$|mfu|util|wait|time|tflops|power|temp|"
                     r"memory|workers|^rss|^cpu|^device_|^gpu|elapsed|eta|^epoch$)")


def read_rows(run_dir: Path) -> dict[int, dict[str, float]]:
    """step -> {metric: value} of a reproduction's own folder (made by this process)."""
    return _merged(read_metrics(Path(run_dir)))


def rows_of(data: bytes) -> dict[int, dict[str, float]]:
    """step -> {metric: value} of metrics.jsonl's bytes (a snapshot's), the rows of one step merged."""
    return _merged(parse_rows(data))


def _merged(rows: list[dict]) -> dict[int, dict[str, float]]:
    out: dict[int, dict[str, float]] = {}
    for row in rows:  # a resumed run's superseded rows left out
        step = row.get("step") if isinstance(row, dict) else None
        if not isinstance(step, int) or isinstance(step, bool):
            continue
        for k, v in row.items():
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and not MACHINE.search(k):
                out.setdefault(step, {})[k] = float(v)
    return out


def compare(a: dict[int, dict[str, float]], b: dict[int, dict[str, float]], upto: int | None = None) -> dict:
    """{metrics: {name: {steps, max_abs, at_step, first_diff, identical}}, steps, missing_steps, upto}."""
    steps = sorted(s for s in a if s in b and (upto is None or s <= upto))
    wanted = sorted(s for s in a if upto is None or s <= upto)
    metrics: dict[str, dict] = {}
    for s in steps:
        for k in sorted(set(a[s]) & set(b[s])):
            x, y = a[s][k], b[s][k]
            d = 0.0 if (x == y or (math.isnan(x) and math.isnan(y))) else abs(x - y)
            m = metrics.setdefault(k, {"steps": 0, "max_abs": 0.0, "at_step": None, "first_diff": None})
            m["steps"] += 1
            if d > 0 and m["first_diff"] is None:
                m["first_diff"] = s
            if d > m["max_abs"] or (math.isnan(d) and not math.isnan(m["max_abs"])):
                m["max_abs"], m["at_step"] = d, s
    for m in metrics.values():
        m["identical"] = m["first_diff"] is None
    return {"metrics": metrics, "steps": len(steps), "missing_steps": [s for s in wanted if s not in b], "upto": upto}
