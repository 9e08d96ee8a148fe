"""Process helpers for the tests that kill supervisors and look for what outlived them (Linux /proc)."""

from __future__ import annotations

import time
from pathlib import Path


def wait_for(predicate, seconds: float = 120.0) -> bool:
    """Poll until predicate() is true; False after `seconds` (generous: a loaded machine is slow)."""
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
