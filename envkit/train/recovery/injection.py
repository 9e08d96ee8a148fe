"""The hook that injects faults for envkit's tests: absent (None) unless ENVKIT_TRAIN_INJECT is set,
so a user's run never parses it and its loop holds no test code, only `if inject:`.

Like the self-test's ENVKIT_SELFTEST_INJECT:
  ENVKIT_TRAIN_INJECT="oom@5,nan@8,device@12,diskfull@6"
raises that fault while optimizer step N is made (diskfull: when checkpoint step N is written;
diskfull@start: when `envkit run` writes the run's files before training).
  ENVKIT_TRAIN_INJECT="diskfull-metrics@34"  (also diskfull-log, diskfull-heartbeat, diskfull-summary)
fills the disk while that file is written at step N: an append (metrics.jsonl, train.log) after half
its line is written, a whole-file write (heartbeat.json, summary.json) before it is renamed.
Each fires once per run folder (recorded in faults.jsonl), so a restarted or resumed run goes on.
  ENVKIT_TRAIN_INJECT="oom-above=16"
makes every step whose micro-batch is above 16 samples raise the device's out-of-memory error, as
a device whose memory holds 16 samples would: the trainer splits, bench and tune record "does not
fit" and search below it (so CI drives those paths on the CPU).
  ENVKIT_TRAIN_INJECT="sleep=0.05"
makes every step that much slower, so a test can signal a run mid-training on any machine.
  ENVKIT_TRAIN_INJECT="slow@N"
makes optimizer step N take SLOW_STEP seconds more (once per run folder): a step far longer than
any test waits, to kill or signal a run in the middle of one.
What a fault does once injected (split the micro-batch, roll back, switch device, stop on a full
disk) is the trainer's real recovery: envkit/train/recovery/faults.py.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.runfolder import names
from envkit.train.recovery.faults import disk_full_error, events, record

ENV_INJECT = "ENVKIT_TRAIN_INJECT"
WRITE_FAULTS = {names.METRICS: "diskfull-metrics", names.TRAIN_LOG: "diskfull-log", names.HEARTBEAT: "diskfull-heartbeat",
                names.SUMMARY: "diskfull-summary"}
KINDS = ("oom", "nan", "device", "diskfull", "slow", *WRITE_FAULTS.values())
SLOW_STEP = 300.0  # seconds: slow@N
OOM_ABOVE = "oom-above"  # oom-above=N: a pretend device memory that holds N samples per micro-batch
SLEEP = "sleep"  # sleep=SECONDS: added to every step
AT_START = "diskfull@start"  # fired by envkit's process as it writes the run's files (envkit/launch/launcher.py)


@dataclass(frozen=True)
class Injector:
    """ENVKIT_TRAIN_INJECT, parsed once: the KIND@STEP faults, oom-above=N and sleep=SECONDS."""

    planned: tuple[tuple[str, int], ...] = ()
    oom_above: int | None = None
    sleep: float | None = None
    at_start: bool = False

    def take(self, run_dir: Path, kind: str, step: int) -> bool:
        """True once per run folder when KIND@STEP is planned: the fault should happen now."""
        if (kind, step) not in self.planned or int(os.environ.get("RANK", "0")) != 0:
            return False
        tag = f"{kind}@{step}"
        if any(e.get("injected") == tag for e in events(run_dir)):
            return False
        record(run_dir, {"event": "injected", "injected": tag, "step": step})
        return True

    def before_step(self, run_dir: Path, step: int, model, micro_batch: int | None = None) -> None:
        """Called before optimizer step `step` (1-based) is made with micro-batches of `micro_batch`."""
        import torch

        if self.sleep:
            time.sleep(self.sleep)
        if self.oom_above is not None and micro_batch is not None and micro_batch > self.oom_above:
            raise injected_oom(micro_batch, self.oom_above)
        if self.take(run_dir, "slow", step):
            time.sleep(SLOW_STEP)
        if self.take(run_dir, "oom", step):
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate 20.00 GiB (injected by {ENV_INJECT} at step {step})")
        if self.take(run_dir, "device", step):
            raise NotImplementedError(f"The operator 'aten::envkit_injected' is not currently implemented for the MPS device "
                                      f"(injected by {ENV_INJECT} at step {step})")
        if self.take(run_dir, "nan", step):
            with torch.no_grad():  # a real non-finite state: the NaN guard must find it and roll back
                next(iter(model.parameters())).fill_(float("nan"))

    def disk_full(self, run_dir: Path, step: int) -> bool:
        """diskfull@N: the disk is full as checkpoint step N is written."""
        return self.take(run_dir, "diskfull", step)

    def write_full(self, run_dir: Path, name: str, step: int) -> bool:
        """diskfull-metrics@N and the like: the disk is full as `name` is first written at step N or later."""
        if name not in WRITE_FAULTS:
            return False
        return any(k == WRITE_FAULTS[name] and step >= at and self.take(run_dir, k, at) for k, at in self.planned)

    def fail_at_start(self, path: Path) -> None:
        """diskfull@start: the first file written before training meets a full disk."""
        if self.at_start:
            raise disk_full_error(path)


def from_env(environ=None) -> Injector | None:
    """The injector ENVKIT_TRAIN_INJECT asks for, or None when it is unset (every user's run)."""
    spec = (os.environ if environ is None else environ).get(ENV_INJECT, "").strip()
    if not spec:
        return None
    planned, oom_above, sleep, at_start = [], None, None, False
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, eq, value = part.partition("=")
        if key == OOM_ABOVE and eq:
            if not value.strip().isdigit():
                raise EnvkitError(f"bad fault {part!r}", where=ENV_INJECT,
                                  fix=f"{OOM_ABOVE}=N with N a number of samples, e.g. {OOM_ABOVE}=16")
            oom_above = int(value)
        elif key == SLEEP and eq:
            try:
                sleep = float(value)
            except ValueError:
                raise EnvkitError(f"bad fault {part!r}", where=ENV_INJECT, fix=f"{SLEEP}=SECONDS, e.g. {SLEEP}=0.05") from None
        elif part == AT_START:
            at_start = True
        else:
            kind, _, at = part.partition("@")
            if kind not in KINDS or not at.isdigit():
                raise EnvkitError(f"bad fault {part!r}", where=ENV_INJECT,
                                  fix=f"KIND@STEP with KIND one of {', '.join(KINDS)}, or {OOM_ABOVE}=N (samples)")
            planned.append((kind, int(at)))
    return Injector(tuple(planned), oom_above, sleep, at_start)


def injected_oom(micro_batch: int, limit: int) -> BaseException:
    """The error a device raises when a micro-batch does not fit, with what it asked for (as CUDA
    words it: bench and tune read "Tried to allocate" from real errors too)."""
    import torch

    return torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {micro_batch / max(1, limit):.2f} GiB (injected by "
                                  f"{ENV_INJECT}: micro-batch {micro_batch} is above {OOM_ABOVE}={limit})")
