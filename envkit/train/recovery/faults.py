"""Faults the trainer survives on its own, and the hook that injects them for envkit's tests.

- Out of memory (CUDA OOM, MPS "out of memory"): free the cache, split the micro-batch (halve it
  where it is even; in general its largest proper divisor) and multiply gradient accumulation by
  the same factor, so the effective batch is unchanged, and redo the current step. Only a
  micro-batch of 1 (or a multi-process run, whose ranks must agree) stops with the advice.
- A device fault mid-run (a missing MPS operator, a backend RuntimeError): see `device_fallback`;
  the child process restarts itself from the last checkpoint (envkit/train/run/child.py).
- Every fault handled is one line in train.log and one JSON line in RUN_DIR/faults.jsonl, which
  summary.json lists under "faults".

The hook that injects them for envkit's tests (ENVKIT_TRAIN_INJECT) is envkit/train/recovery/injection.py.
Needs only torch and the standard library (it runs in the trainer's child process).
"""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from envkit.runfolder.applog import append_line, open_append
from envkit.runfolder.bounded import RunFolderError, read_bytes
from envkit.runfolder.folder import RunFolder
from envkit.runfolder.progress import Summary

if TYPE_CHECKING:
    from envkit.facts.model import TrainDevice
    from envkit.config.schema import DeviceFallback

ENV_DEVICE = "ENVKIT_TRAIN_DEVICE"  # set by the child for itself after a switch to the CPU
# how a device fault restarts the run (fallback_plan): on the CPU, or with MPS's missing operators run there
DeviceSwitch = Literal["cpu", "mps-fallback"]


# ---------------------------------------------------------------- the record


def record(run_dir: Path, event: dict) -> None:
    """Append one event to RUN_DIR/faults.jsonl (rank 0 only), flushed to disk."""
    if int(os.environ.get("RANK", "0")) != 0:
        return

    line = json.dumps({"time": time.time(), **event}, default=str)
    path = RunFolder(run_dir).faults_file
    fd = open_append(path)  # never through a symlink planted in the run folder
    try:
        append_line(fd, (line + "\n").encode("utf-8"), path)
        os.fsync(fd)
    finally:
        os.close(fd)


def events(run_dir: Path) -> list[dict]:
    try:
        raw = read_bytes(RunFolder(run_dir).faults_file, max_bytes=16 << 20, tail=True)
    except RunFolderError:  # a link or a FIFO planted there
        return []
    lines = (raw or b"").decode("utf-8", errors="replace").splitlines()
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a line cut by a kill: the others still count
    return out


def disk_full_error(path: Path) -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


# ---------------------------------------------------------------- out of memory


def is_oom(exc: BaseException) -> bool:
    return type(exc).__name__ == "OutOfMemoryError" or "out of memory" in str(exc).lower()


def smaller_micro_batch(bs: int) -> int | None:
    """The largest proper divisor of bs (bs/2 when even): accumulation x bs/d keeps the batch exact."""
    for d in range(bs // 2, 0, -1):
        if bs % d == 0:
            return d
    return None


def free_device_memory(exc: BaseException, device_type: TrainDevice) -> None:
    """Drop what the failed step still holds (its frames' tensors), then the allocator's cache."""
    import gc
    import traceback

    import torch

    if exc.__traceback__ is not None:
        traceback.clear_frames(exc.__traceback__)
    gc.collect()
    if device_type == "cuda":
        torch.cuda.empty_cache()
    elif device_type == "mps":
        torch.mps.empty_cache()


def asked_for(exc: BaseException) -> str | None:
    """What an out-of-memory error says it tried to allocate ("20.00 GiB"), where it says so
    (CUDA and MPS both word it "Tried to allocate X")."""
    import re

    m = re.search(r"Tried to allocate ([\d.]+ ?[KMGT]i?B)", str(exc))
    return m.group(1) if m else None


def shrink_after_oom(exc: BaseException, *, run_dir: Path, step: int, bs: int, accum: int, device_type: TrainDevice,
                     world: int, log, metrics, split: bool = True) -> tuple[int, int, int]:
    """(micro-batch, accumulation, factor) to redo step+1 with; re-raises what it cannot handle.
    split=False (bench and tune measuring one batch size): an out of memory is the answer, re-raised."""
    if not is_oom(exc):
        raise exc
    new_bs = smaller_micro_batch(bs)
    if new_bs is None or world > 1 or not split:
        raise exc  # micro-batch 1, or ranks that must agree: the child prints the one-line advice
    free_device_memory(exc, device_type)
    factor = bs // new_bs
    first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
    log(f"warning: out of memory at step {step + 1} with micro-batch {bs} ({first}): freed the cache; micro-batch {new_bs} "
        f"x {accum * factor} accumulation (effective batch {bs * accum} unchanged); redoing step {step + 1}")
    metrics({"step": step, "event": "oom", "micro_batch": new_bs, "grad_accum": accum * factor})
    record(run_dir, {"event": "oom", "step": step + 1, "micro_batch_before": bs, "micro_batch": new_bs,
                     "grad_accum": accum * factor, "error": first})
    return new_bs, accum * factor, factor


# ---------------------------------------------------------------- device faults


def is_device_fault(exc: BaseException) -> bool:
    """A missing MPS operator, or a RuntimeError from a device backend (not an out of memory)."""
    if is_oom(exc):
        return False
    low = str(exc).lower()
    if isinstance(exc, NotImplementedError) and "mps" in low:
        return True
    return isinstance(exc, RuntimeError) and any(w in low for w in ("mps", "cuda error", "cudnn", "cublas", "metal", "backend"))


def fallback_plan(policy: DeviceFallback, device_type: str, exc: BaseException) -> DeviceSwitch | None:
    """Which switch `device.fallback` allows for this fault: "mps-fallback", "cpu" or None.

    auto: a missing MPS operator runs on the CPU operator by operator (PYTORCH_ENABLE_MPS_FALLBACK=1);
    other faults stop. mps-fallback: only for a missing MPS operator. cpu: the whole run moves to
    the CPU. none: stop with the advice. `device_type`: summary.json's device as read back, any text."""
    if device_type == "cpu" and os.environ.get(ENV_DEVICE) == "cpu":
        return None  # already switched: a second fault is not retried forever
    missing_op = isinstance(exc, NotImplementedError) and "mps" in str(exc).lower()
    if os.environ.get("PYTORCH_ENABLE_MPS_FALLBACK") == "1" and missing_op and policy != "cpu":
        return None  # the fallback is on and the operator still fails
    if policy == "cpu":
        return "cpu"
    if policy in ("auto", "mps-fallback") and missing_op:
        return "mps-fallback"
    return None


def child_env_for(switch: DeviceSwitch) -> dict[str, str]:
    env = dict(os.environ)
    if switch == "mps-fallback":
        env["PYTORCH_ENABLE_MPS_FALLBACK"] = "1"
    elif switch == "cpu":
        env[ENV_DEVICE] = "cpu"
    return env


def restart_argv(argv: list[str]) -> list[str]:
    """The child's own command line, resuming from the newest valid checkpoint."""
    out = list(argv)
    for i, a in enumerate(out[:-1]):
        if a == "--resume":
            out[i + 1] = "auto"
    return out


def switch_device(run_dir: Path, policy: DeviceFallback, exc: BaseException) -> None:
    """After a device fault, restart this child process (same pid, so `envkit run` keeps waiting
    on it) from the last checkpoint with the switch `device.fallback` allows; returns when none."""
    import sys

    if int(os.environ.get("WORLD_SIZE", "1")) > 1 or not is_device_fault(exc):
        return
    folder = RunFolder(run_dir)
    summary = folder.summary() or Summary()
    device = summary.get("device") or "unknown"
    switch = fallback_plan(policy, device, exc)
    if switch is None:
        return
    first = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
    how = ("with PYTORCH_ENABLE_MPS_FALLBACK=1 (missing operators run on the CPU)" if switch == "mps-fallback"
           else "on the CPU")
    line = (f"warning: device fault on {device} at step {summary.steps} ({type(exc).__name__}: {first}): restarting from the "
            f"last checkpoint {how} (device.fallback: {policy})")
    record(run_dir, {"event": "device_switch", "from": device, "to": "cpu" if switch == "cpu" else f"{device}+cpu-fallback",
                     "switch": switch, "step": summary.steps, "error": f"{type(exc).__name__}: {first}"})

    fd = open_append(folder.train_log)
    try:
        append_line(fd, (time.strftime("%Y-%m-%d %H:%M:%S ") + line + "\n").encode("utf-8"), folder.train_log)
    finally:
        os.close(fd)
    print(line, file=sys.stderr, flush=True)
    sys.stdout.flush()
    os.execve(sys.executable, restart_argv(sys.orig_argv), child_env_for(switch))
