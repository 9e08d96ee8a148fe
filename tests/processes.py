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


def checkpointed(run: Path) -> bool:
    """Any checkpoint in the run folder. Not a named step: with keep_last 2 and a tiny model a fast
    machine writes step 10 and prunes it within a tenth of a second, and a poll for that one file
    then waits out its whole deadline (it did, on an idle CI machine)."""
    return any((run / "checkpoints").glob("step_*.pt"))


def read_terminal(leader: int) -> bytes:
    """Everything a child wrote to its pseudo-terminal, until it closed it; closes our end."""
    import os

    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return b"".join(chunks)
