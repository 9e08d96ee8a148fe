"""How the trainer stops when it is asked to, and when envkit's process is gone (train/run/loop.py).

- SIGINT (Ctrl-C) and SIGUSR1 (Slurm's warning before a time limit, passed on by envkit): stop
  after this step with a checkpoint; a second Ctrl-C aborts.
- SIGTERM (`timeout`, `kill`, `envkit run` passing on its own, `envkit stop` after its grace, a
  Slurm preemption): the same, but a step still under way checkpoint.sigterm_grace_seconds (TERM_GRACE
  by default) later is given up. A step of minutes must not keep `timeout 120 envkit run` alive for
  minutes; a preempted Slurm job is killed 30 s after its SIGTERM anyway.
- envkit's process gone (parent_watch.py reads EOF on a pipe only it held; SIGKILL included): a
  step under way is given up at once; between steps, the last completed step is checkpointed
  first. Nobody waits for this trainer any more, and the run folder is not free while it lives.

A step given up cannot be saved (its weights are half-updated): the newest checkpoint is what a
resume starts from. summary.json says interrupted and why, and the process ends with os._exit from
the thread that decided, whatever the step's own work is doing (a long kernel, a sleep)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import NoReturn

TERM_GRACE = 10.0  # seconds a step may still take after SIGTERM (the default of checkpoint.sigterm_grace_seconds)
PARENT_GONE = "envkit's process ended"
GIVE_UP_CODE = 128 + signal.SIGTERM  # how a trainer ends that gave up its step (as if SIGTERM killed it)

_current: "Stopper | None" = None  # the Stopper of the loop running in this process


def parent_gone() -> None:
    """Called by parent_watch.py's thread once envkit's process is gone."""
    stopper = _current
    if stopper is None:  # building, loading, resuming (or done): nothing new to save
        _end(f"{PARENT_GONE}: stopping")
    stopper.urgent(PARENT_GONE)


def exit_code(reason: str | None) -> int:
    """An interrupted run's exit code, as a shell reports a process a signal ended: 128 + N
    (130 for SIGINT, 143 for SIGTERM); 130 when the signal is not known (another rank's)."""
    sig = getattr(signal, reason, None) if isinstance(reason, str) and reason.startswith("SIG") else None
    if reason == PARENT_GONE:
        return GIVE_UP_CODE
    return 128 + int(sig) if sig is not None else 130


def _end(line: str) -> NoReturn:
    try:
        print(f"envkit: {line}", file=sys.stderr, flush=True)
    except (OSError, ValueError):  # the terminal went with envkit's process
        pass
    os._exit(GIVE_UP_CODE)


class Stopper:
    """The signals above, and where the main thread is: inside a step or between steps. With
    several processes they agree after each step (an all-reduce of one flag): a signal reaches the
    ranks at slightly different steps, and a checkpoint needs all of them at the same one. Only a
    second Ctrl-C aborts: a preempted Slurm job delivers SIGTERM to each process and envkit's SIGUSR1 too."""

    SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGUSR1") if hasattr(signal, n))

    def __init__(self, log, world: int = 1, term_grace: float = TERM_GRACE):
        global _current
        self.signal: str | None = None  # what asked to stop: a signal's name, or PARENT_GONE
        self.log, self.world, self.group = log, world, None
        self.term_grace = term_grace
        self.on_give_up: Callable[[str], None] | None = None  # set by the loop: (reason) -> None, summary.json and a line before the process ends
        self._lock = threading.Lock()
        self._in_step = False
        self._urgent: str | None = None
        self.old = {s: signal.signal(s, self.on_signal) for s in self.SIGNALS}
        _current = self

    # -- the main thread
    def on_signal(self, signum, frame):
        if self.signal and signum == signal.SIGINT:
            raise KeyboardInterrupt
        name = signal.Signals(signum).name
        if signum == signal.SIGTERM and self._urgent is None:
            timer = threading.Timer(self.term_grace, self.urgent, (f"SIGTERM {self.term_grace:g} s ago",))
            timer.daemon = True
            timer.start()
        if self.signal:
            return
        self.signal = name
        self.log(f"{name}: stopping after this step with a checkpoint"
                 + (f" (a step still running in {self.term_grace:g} s is given up)" if signum == signal.SIGTERM else " (Ctrl-C again to abort)"))

    def enter_step(self) -> bool:
        """Before a step: False when this process should stop instead (a stop came between steps,
        and it may stop alone: one process, or envkit's process gone)."""
        with self._lock:
            if self._urgent or (self.signal and self.world == 1):
                return False
            self._in_step = True
            return True

    def leave_step(self) -> None:
        with self._lock:
            self._in_step = False

    def agreed(self, world: int) -> bool:
        """One process: whether it was asked to stop. Several: whether any was. The flag travels on a
        gloo group (the CPU), so NCCL runs pay no device sync for it: tens of microseconds a step."""
        if world == 1:
            return self.signal is not None
        import torch
        import torch.distributed as dist

        if self.group is None:
            self.group = dist.new_group(backend="gloo") if dist.get_backend() != "gloo" else dist.group.WORLD
        flag = torch.tensor([1 if self.signal else 0], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group)
        if flag.item() and self.signal is None:
            self.signal = "a signal on another rank"
        return bool(flag.item())

    def restore(self) -> None:
        global _current
        for s, handler in self.old.items():
            signal.signal(s, handler)
        if _current is self:
            _current = None

    # -- other threads (parent_watch's, the SIGTERM timer)
    def urgent(self, reason: str) -> None:
        """A stop that cannot wait for the step: inside one, the process ends now; between steps the
        loop stops before the next (enter_step) with a checkpoint of the last completed one."""
        with self._lock:
            if self._in_step:
                self.give_up(reason)
            self._urgent = self._urgent or reason
            if self.signal is None:
                self.signal = reason

    def give_up(self, reason: str) -> None:
        """End the process without finishing the step under way (never returns)."""
        try:
            if self.on_give_up is not None:
                self.on_give_up(reason)
        except BaseException:  # noqa: BLE001 - ending is what matters now
            pass
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(GIVE_UP_CODE)
