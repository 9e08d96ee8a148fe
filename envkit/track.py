"""Curves for your own script: `envkit.track.log(step=..., loss=..., **metrics)`, and its settings:
`envkit.track.config({"lr": 3e-4, "batch_size": 64})` (or `config(lr=3e-4, ...)`), which `envkit runs`
shows as columns.

Under `envkit exec` each call appends one JSON line to the run's metrics.jsonl (the folder comes
from ENVKIT_RUN_DIR, which exec sets), so `envkit plot`, `envkit monitor` and the stall watchdog
see it. Anywhere else it does nothing, so a script keeps working without envkit. Standard library
only: the script's own interpreter (the managed venv) imports it from envkit's folder or its own.

`envkit reproduce --steps N` of an exec run sets ENVKIT_STOP_AFTER_STEP=N: the call that logs step N
writes its line, then ends the script with exit code 0 (SystemExit, so `finally` blocks and atexit
handlers run; every rank of a torchrun job logs the same steps, so all of them stop there).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from envkit.runfolder import names

RUN_DIR_VAR = "ENVKIT_RUN_DIR"
STOP_VAR = "ENVKIT_STOP_AFTER_STEP"
_calls = 0  # the step of a call that gives none: `envkit plot` draws against steps


def log(step: int | None = None, loss: float | None = None, **metrics) -> None:
    """Append {step, loss, time, **metrics} to $ENVKIT_RUN_DIR/metrics.jsonl; a no-op without it.
    Without `step`, calls are numbered 1, 2, 3, ...
    Values that are not numbers or strings (a tensor) are turned into floats where they can be."""
    run_dir = os.environ.get(RUN_DIR_VAR)
    if not run_dir:
        return
    global _calls
    _calls += 1
    n = _calls if step is None else int(step)
    if os.environ.get("RANK", "0") == "0":  # under torchrun, rank 0 speaks for the run
        _write(run_dir, n, loss, metrics)
    _stop_after(n)


def config(settings: dict | None = None, **more) -> None:
    """Record the run's settings (learning rate, batch size, ...) in $ENVKIT_RUN_DIR/settings.json,
    merged with what earlier calls recorded; a no-op without it. `envkit runs` shows them as columns.
    Values that are not numbers, strings or booleans are recorded as text."""
    run_dir = os.environ.get(RUN_DIR_VAR)
    if not run_dir or os.environ.get("RANK", "0") != "0":
        return
    path = os.path.join(run_dir, names.SETTINGS)
    try:
        with open(path, encoding="utf-8") as fh:
            known = json.load(fh)
    except (OSError, ValueError):
        known = {}
    if not isinstance(known, dict):
        known = {}
    known.update({str(k): _setting(v) for k, v in {**(settings or {}), **more}.items()})
    tmp = f"{path}.{os.getpid()}.tmp"
    try:  # written whole, then renamed: a reader never sees half a file
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(known, fh, indent=1)
        os.replace(tmp, path)
    except OSError:
        pass  # the run folder went away: settings are never worth a crashed training run


def _setting(value):
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    try:
        return float(value)  # a numpy scalar
    except (TypeError, ValueError):
        return str(value)[:200]


def _write(run_dir: str, step: int, loss, metrics: dict) -> None:
    row = {"step": step, "time": round(time.time(), 3)}
    if loss is not None:
        row["loss"] = _number(loss)
    row.update({str(k): _number(v) for k, v in metrics.items()})
    try:  # one write of one line in append mode: lines from one process never interleave
        with open(os.path.join(run_dir, names.METRICS), "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
    except OSError:
        pass  # the run folder went away: a curve is never worth a crashed training run


def _stop_after(step: int) -> None:
    """End the script once `step` reaches $ENVKIT_STOP_AFTER_STEP (its line is written already)."""
    try:
        limit = int(os.environ.get(STOP_VAR) or 0)
    except ValueError:
        return
    if limit <= 0 or step < limit:
        return
    print(f"envkit.track: stopping after step {step} ({STOP_VAR}={limit}: envkit reproduce --steps)", file=sys.stderr, flush=True)
    sys.stdout.flush()
    if threading.current_thread() is threading.main_thread():
        raise SystemExit(0)
    os._exit(0)  # from another thread SystemExit would end that thread only


def _number(value):
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    try:
        return float(value)  # a 0-d tensor, a numpy scalar
    except (TypeError, ValueError):
        return str(value)
