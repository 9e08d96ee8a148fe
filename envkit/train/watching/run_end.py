"""How `envkit run` ends as the shell sees it, read from what the trainer left: its exit code and
its summary.json. 0 done, 1 failed, 2 bad input, 128 + the signal's number for a run a signal
stopped (the launcher's interrupted_exit_code, given as `stopped`), and one line for a trainer
that died without its own last word (a segfault, "Abort trap: 6", an out-of-memory kill)."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path

from envkit.runfolder.folder import RunFolder
from envkit.runfolder.progress import Summary
from envkit.runfolder.records import RunStatus


@dataclass(frozen=True)
class RunEnd:
    code: int  # `envkit run`'s exit code
    line: str | None = None  # said on stderr before it exits


def run_end(rc: int, summary: Summary | None, *, stopped: int | None, run_dir: Path, node_rank: int = 0) -> RunEnd:
    """The end of a run whose trainer exited with `rc`; node_rank > 0: a node that does not hold the run folder."""
    if node_rank > 0:
        return RunEnd(0 if rc == 0 else 1, f"node {node_rank}: training process exited with code {rc}; node 0 holds the run folder")
    if rc == 2:
        return RunEnd(2)
    if stopped is not None:
        return RunEnd(stopped)  # checkpointed and said so; not finished: 130 Ctrl-C, 143 SIGTERM
    line = None
    if rc not in (0, 3) and (not summary or summary.status in (None, RunStatus.RUNNING.value)):  # 3: it said why itself
        line = (f"envkit: error: the training process {ended(rc)} before finishing; its log is {RunFolder(run_dir).train_log} "
                f"(fix: run `envkit selftest` for the device, and `envkit run` again to resume from the last checkpoint)")
    return RunEnd(0 if rc == 0 else 1, line)


def ended(rc: int) -> str:
    """How a process with this exit code ended, in words (a negative code: the signal that killed it)."""
    if rc >= 0:
        return f"exited with code {rc}"
    try:
        return f"was killed by {signal.Signals(-rc).name}"
    except ValueError:
        return f"was killed by signal {-rc}"
