"""How a measured run times its steps: the `on_step` hook of the bench child (envkit/bench/child.py),
and of the runs `envkit sweep --pack auto` times in stages (envkit/bench/stages.py)."""

from __future__ import annotations

import json
import os
import statistics
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envkit.facts.model import TrainDevice
    from envkit.train.run.state import RateUnit

PROGRESS = "@@envkit-bench-progress "  # one line per timed window: the running figure
LOSS_STEP = 2  # every rung reports the loss of step 2 (after one update): the same steps from the same seed

def sync_device(device_type: TrainDevice) -> None:
    import torch

    if device_type == "cuda":
        torch.cuda.synchronize()
    elif device_type == "mps":
        torch.mps.synchronize()


class StepClock:
    """The `on_step` hook: warm-up steps, then timed windows; True once the measurement is done.
    A micro-batch split after an out of memory starts the warm-up again (new shapes recompile)."""

    def __init__(self, device_type: TrainDevice, *, warmup_steps: int, seconds: float, windows: int, max_steps: int | None = None):
        self.device_type: TrainDevice = device_type
        self.warmup_steps = max(warmup_steps, LOSS_STEP - 1)
        self.window_s, self.windows, self.max_steps = seconds / max(1, windows), max(1, windows), max_steps
        self.micro, self.since, self.t0, self.n = None, 0, 0.0, 0
        self.rates: list[float] = []
        self.steps_timed, self.loss, self.peak_mb = 0, None, None
        self.unit: RateUnit = "samples"
        self.timed_s = 0.0  # the windows' seconds, summed
        self.speaks = os.environ.get("RANK", "0") == "0"  # under torchrun rank 0 alone prints the running figure
        self.group = None  # several processes: where they agree to close a window (agree)

    def __call__(self, *, step: int, loss, micro_batch: int, per_step: int, unit: RateUnit, epoch_samples: int = 0) -> bool:
        phase = self.count(step, loss, micro_batch, unit)
        if phase == "warm-up":
            return False
        if phase == "warm":
            self._start_window()
            return False
        self.n += 1
        capped = self.max_steps is not None and self.steps_timed + self.n >= self.max_steps
        if not self.agree(time.perf_counter() - self.t0 >= self.window_s or capped):
            return False
        self.rates.append(self.close_window(per_step))
        if self.speaks:
            print(PROGRESS + json.dumps({"per_second": statistics.median(self.rates), "unit": unit, "window": len(self.rates),
                                         "windows": self.windows, "micro_batch": micro_batch}), flush=True)
        self._read_peak()
        if len(self.rates) >= self.windows or capped:
            return True  # the loss of LOSS_STEP is read by now: warm-up >= 1 step, a window >= 1 step
        self._start_window()
        return False

    def count(self, step: int, loss, micro_batch: int, unit: RateUnit) -> str:
        """One step's bookkeeping, shared with the staged clock (stages.py): "warm-up", "warm" (this
        step ended the warm-up) or "timing". A new micro-batch (an out-of-memory split) warms up again."""
        self.unit = unit
        if step == LOSS_STEP:
            self.loss = float(loss)  # a sync; before the clock starts on a device (warm-up >= LOSS_STEP there)
        if micro_batch != self.micro:
            if self.micro is not None:  # an out-of-memory split: the peak is the new micro-batch's
                self._reset_peak()
            self.micro, self.since, self.rates, self.steps_timed = micro_batch, 0, [], 0
        self.since += 1
        if self.since < self.warmup_steps:
            return "warm-up"
        return "warm" if self.since == self.warmup_steps else "timing"

    def agree(self, done: bool) -> bool:
        """Whether the window closes at this step. One process: its own clock says. Under torchrun
        every process must close its windows, and stop, at the same step: one that stopped alone
        would leave the others waiting in the next step's all-reduce. So each step they take the
        max of their flags, through gloo on the CPU (a tiny message, no wait on the device)."""
        import torch

        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            return done
        if self.group is None:  # the CPU's default group is gloo already; NCCL carries device tensors only
            self.group = dist.new_group(backend="gloo") if dist.get_backend() != "gloo" else dist.group.WORLD
        flag = torch.tensor([int(done)], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group)
        return bool(flag.item())

    def close_window(self, per_step: int) -> float:
        """The window's rate, read after a device sync (its work done before the clock is read). per_step
        is over all processes (Trainer.per_step): under torchrun the rate is the global one."""
        sync_device(self.device_type)
        seconds = time.perf_counter() - self.t0
        rate = self.n * per_step / seconds
        self.steps_timed += self.n
        self.timed_s += seconds
        return rate

    def _start_window(self) -> None:
        sync_device(self.device_type)
        self.t0, self.n = time.perf_counter(), 0

    # The peak counts from the start, warm-up included, as envkit run's summary does: CUDA graphs allocate their
    # memory pool while they are recorded (in the warm-up), and a replay allocates nothing, so a peak reset after
    # the warm-up read only the weights and optimizer state (1,426 MB for GPT-2 small on 2 x H200, 2026-11-27).
    def _reset_peak(self) -> None:
        if self.device_type == "cuda":
            import torch

            torch.cuda.reset_peak_memory_stats()

    def _read_peak(self) -> None:
        import torch

        if self.device_type == "cuda":
            self.peak_mb = torch.cuda.max_memory_allocated() / 2**20
        elif self.device_type == "mps":  # no peak counter on MPS: the largest value seen at window ends
            self.peak_mb = max(self.peak_mb or 0.0, torch.mps.driver_allocated_memory() / 2**20)


