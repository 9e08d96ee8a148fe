"""Process helpers for the tests that kill supervisors and look for what outlived them (Linux /proc)."""

from __future__ import annotations

import time
from pathlib import Path


def wait_for(predicate, seconds: float = 300.0) -> bool:
    """Poll until predicate() is true; False after `seconds` (generous: on a loaded 2-core CI machine a
    run took over 120 s to start and reach its step-50 checkpoint)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent to read it counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# A run that trains until it is stopped (ten million steps of a tiny MLP), checkpointing every 50 steps.
LONG = """\
experiment: {name: own, output_dir: runs, seed: 0}
model: {type: mlp, hidden: 8, depth: 1}
dataset: {type: synthetic, task: teacher, num_samples: 64}
training: {max_steps: 10000000, batch_size: 8}
eval: {every_steps: 0}
checkpoint: {every_steps: 50, keep_last: 2}
logging: {every_steps: 10, heartbeat_seconds: 0.2, device_seconds: 0}
device: {type: cpu}
"""
