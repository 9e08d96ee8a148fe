"""Guards: a non-finite loss is caught, not trained through (roll back to the last good
checkpoint with a lower learning rate, or stop with a clear message); a device that is not usable
at run time is refused, or replaced by the CPU when the config allows it, and said so."""

from __future__ import annotations

from typing import TYPE_CHECKING

from envkit.errors import EnvkitError

if TYPE_CHECKING:
    from envkit.facts.model import TrainDevice
    from envkit.config.schema import DeviceType, NanPolicy
    from envkit.runfolder.records import TrainStatus


class TrainingStopped(Exception):
    """Training cannot go on; `status` goes into summary.json."""

    def __init__(self, message: str, status: TrainStatus = "failed"):
        super().__init__(message)
        self.status: TrainStatus = status


class NanGuard:
    def __init__(self, policy: NanPolicy, lr_factor: float, max_rollbacks: int, rollbacks: int = 0):
        self.policy, self.lr_factor, self.max_rollbacks, self.rollbacks = policy, lr_factor, max_rollbacks, rollbacks

    def on_nonfinite(self, step: int, have_checkpoint: bool) -> float:
        """Decide after a non-finite loss between step checks. Returns the lr factor to apply
        after rolling back; raises TrainingStopped when it should stop instead."""
        what = f"non-finite loss (NaN/inf) detected by step {step}"
        if self.policy == "stop":
            raise TrainingStopped(f"{what}; stopping (training.nan_policy: stop). Try a lower training.lr, "
                                  "training.precision: fp32, or a smaller training.grad_clip", status="nan")
        if not have_checkpoint:
            raise TrainingStopped(f"{what} before the first checkpoint: nothing to roll back to. Lower training.lr "
                                  "(or add warmup_steps), or use training.precision: fp32", status="nan")
        if self.rollbacks >= self.max_rollbacks:
            raise TrainingStopped(f"{what}; already rolled back {self.rollbacks} time(s) (training.max_rollbacks). "
                                  "Lower training.lr, raise warmup_steps, or use training.precision: fp32", status="nan")
        self.rollbacks += 1
        return self.lr_factor


def resolve_device(requested: DeviceType, fallback_to_cpu: bool, log) -> TrainDevice:
    """"auto" -> the best available; a requested device that is missing -> error or CPU."""
    import os

    import torch

    if os.environ.get("ENVKIT_TRAIN_DEVICE") == "cpu" and requested != "cpu":  # set by faults.switch_device
        log(f"device.type {requested}: training on the CPU after a device fault (device.fallback: cpu)")
        return "cpu"
    mps_ok = hasattr(torch.backends, "mps") and torch.backends.mps.is_available()
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "mps" if mps_ok else "cpu"
    ok = {"cpu": True, "cuda": torch.cuda.is_available(), "mps": mps_ok}[requested]
    if ok:
        return requested
    why = {"cuda": "torch.cuda.is_available() is False", "mps": "torch.backends.mps.is_available() is False"}[requested]
    if fallback_to_cpu:
        log(f"warning: device {requested} is not usable ({why}): training on the CPU (device.fallback_to_cpu: true)")
        return "cpu"
    raise EnvkitError(f"device {requested} is not usable here: {why}", where="device.type",
                      fix=f"run `envkit doctor` (check {requested}); or set device.type: auto / cpu, or device.fallback_to_cpu: true")
