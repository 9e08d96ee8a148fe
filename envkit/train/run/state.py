"""What a run knows as it trains, in three small types:

- `TrainState`: the counters a checkpoint records and a resume restores (step, data position,
  micro-batch and accumulation, best validation loss, NaN-guard state, training time). Changed in
  exactly three ways: a finished step (`train_step`), a restore (resume or NaN rollback, through
  the `Checkpointer`), an out-of-memory split (`recover.py`), and after the last two `Trainer.rewind`
  follows (a resume's batch stream starts at the restored position).
- `StepClock`: the time per step between two logged steps, with eval and checkpoint time left out;
  restarted whenever the position moves (`Trainer.rewind`), so a logged `dt_ms` always measures
  steps that really ran one after another.
- `TrainResult`: what `train()` returns and `summary.json` holds, field by field.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from envkit.config.schema import Parallel, TrainPrecision

if TYPE_CHECKING:
    from envkit.facts.model import TrainDevice
    from envkit.runfolder.records import TrainStatus

# what a run's rate counts (summary.json's {unit}_per_second): tokens for a language model, else samples
RateUnit = Literal["tokens", "samples"]


@dataclass
class TrainState:
    micro_batch: int  # samples per forward/backward (smaller than training.batch_size after an OOM split)
    grad_accum: int  # micro-batches per optimizer step
    step: int = 0  # optimizer steps completed
    batches: int = 0  # micro-batches consumed: the data position a checkpoint records
    best_val_loss: float | None = None
    lr_scale: float = 1.0  # lowered by each NaN rollback (training.nan_lr_factor)
    rollbacks: int = 0
    elapsed: float = 0.0  # seconds of training, summed over resumes
    trained: float | None = 0.0  # samples or tokens trained, summed over resumes (None: resumed from a checkpoint without it)

    LOOP_KEYS = ("best_val_loss", "lr_scale", "rollbacks", "elapsed", "micro_batch", "grad_accum", "trained")

    def checkpoint_fields(self) -> dict:
        """The checkpoint's "step", "data" and "loop" entries (the format resume reads)."""
        return {"step": self.step, "data": {"batches": self.batches}, "loop": {k: getattr(self, k) for k in self.LOOP_KEYS}}

    def restore(self, saved: dict, batch_size: int, grad_accum: int, world: int = 1) -> None:
        """Counters from a checkpoint. A micro-batch split after an out-of-memory stays split (the
        smaller of the checkpoint's and this process's), and the data position is converted to it,
        and to this run's process count (a position counts global batches of micro x world). A
        checkpoint of another process count that was never split has another micro-batch only because
        batch_size per process follows the count (training.global_batch_size): this one's is kept."""
        loop = saved.get("loop", {})
        saved_micro = loop.get("micro_batch") or batch_size
        split = (loop.get("grad_accum") or grad_accum) > grad_accum  # the accumulation grew: an out-of-memory split
        micro = min(saved_micro, self.micro_batch) if split else self.micro_batch
        self.step = saved["step"]
        saved_world = saved.get("world") or world
        self.batches = saved["data"]["batches"] * saved_micro * saved_world // (micro * world)
        self.micro_batch, self.grad_accum = micro, batch_size * grad_accum // micro
        self.best_val_loss = loop.get("best_val_loss")
        self.lr_scale, self.rollbacks = loop.get("lr_scale", 1.0), loop.get("rollbacks", 0)
        self.elapsed = loop.get("elapsed", 0.0)
        self.trained = loop.get("trained")  # a checkpoint from before envkit counted it: the overall rate is unknown


class StepClock:
    """Seconds per optimizer step over the steps since the last reading; paused time (eval,
    checkpoint) is left out."""

    def __init__(self, clock=None):
        self._now = clock or (lambda: time.perf_counter())  # looked up at each call: a test may replace it
        self.readings = 0  # intervals read since the run (this process) started
        self.restart()

    def restart(self) -> None:
        self._since, self._steps, self._paused = self._now(), 0, 0.0

    def tick(self) -> None:
        self._steps += 1

    def pause(self):
        """`with clock.pause():` around work that is not training."""
        return _Paused(self)

    def read(self) -> tuple[float, int]:
        """(seconds per step, steps in the interval), then a new interval starts."""
        now = self._now()
        steps = max(1, self._steps)
        dt = (now - self._since - self._paused) / steps
        self.readings += 1
        self._since, self._steps, self._paused = now, 0, 0.0
        return dt, steps


class _Paused:
    def __init__(self, clock: StepClock):
        self.clock = clock

    def __enter__(self):
        self.t0 = self.clock._now()

    def __exit__(self, *exc):
        self.clock._paused += self.clock._now() - self.t0


@dataclass
class TrainResult:
    """summary.json, built field by field (never from local variable names)."""

    status: TrainStatus
    max_steps: int
    epochs: int | None
    unit: RateUnit  # names the rate field
    steps: int = 0
    final_loss: float | None = None
    best_val_loss: float | None = None
    final_val_loss: float | None = None
    accuracy: float | None = None
    device: TrainDevice | None = None
    device_name: str | None = None
    precision: TrainPrecision | None = None
    compile: str | None = None
    world_size: int = 1
    parallel: Parallel = "single"  # training.parallel as decided
    peak_memory_mb: float | None = None  # per process: the device's peak allocation (CUDA), None on the CPU
    parameters: int | None = None
    rates: list = field(default_factory=list)  # per logged interval, the first (warm-up, compilation) left out
    rate_steps: list | None = None  # [first, last]: the steps of the windows `rates` holds
    warmup_steps: list | None = None  # [first, last]: the steps of the window left out as the warm-up
    resumed_from: str | None = None
    rollbacks: int = 0
    config_hash: str | None = None  # of the declared config: the same in config.json and every checkpoint
    derived: dict = field(default_factory=dict)  # what the run decided at start ("training.max_steps" from epochs, ...)
    elapsed_seconds: float = 0.0
    trained: float | None = None  # samples or tokens trained (all of the run's steps, over resumes)
    baseline_loss: float | None = None
    chance_accuracy: float | None = None
    flops_per_token: float | None = None
    mfu: float | None = None
    micro_batch: int | None = None
    grad_accum: int | None = None
    faults: list = field(default_factory=list)
    error: str | None = None
    signal: str | None = None  # the signal that interrupted the run (SIGINT, SIGTERM, SIGUSR1): its exit code is 128 + its number
    skipped_files: dict | None = None  # {"count", "paths"}: unreadable files skipped (dataset.on_bad_file: skip)
    watch: dict = field(default_factory=dict)  # device and data-wait figures (watching/watch.py)
    compile_cache: dict | None = None  # {"key", "enabled", "notes"}: what was loaded or saved (compile_cache.py)
    compile_stats: dict | None = None  # torch's counts: graphs traced, Inductor/AOTAutograd cache hits and misses

    @property
    def per_second(self) -> float | None:
        """The median rate of the logged windows: steady state (MFU is taken from it)."""
        rates = [r for r in self.rates if r]
        return statistics.median(rates) if rates else None

    @property
    def overall_per_second(self) -> float | None:
        """Everything trained over the training time: what the run really took."""
        return self.trained / self.elapsed_seconds if self.trained and self.elapsed_seconds > 0 else None

    def summary(self) -> dict:
        out = {"status": self.status, "steps": self.steps, "max_steps": self.max_steps, "epochs": self.epochs,
               "final_loss": self.final_loss, "best_val_loss": self.best_val_loss, "final_val_loss": self.final_val_loss,
               "device": self.device, "device_name": self.device_name, "precision": self.precision, "compile": self.compile,
               "world_size": self.world_size, "parallel": self.parallel,
               "peak_memory_mb": None if self.peak_memory_mb is None else round(self.peak_memory_mb, 1), "parameters": self.parameters,
               f"{self.unit}_per_second": self.overall_per_second, f"{self.unit}_per_second_median_window": self.per_second,
               "median_window_steps": self.rate_steps, "warmup_steps": self.warmup_steps, self.unit: self.trained,
               "resumed_from": self.resumed_from, "rollbacks": self.rollbacks, "config_hash": self.config_hash,
               "derived": self.derived, "elapsed_seconds": round(self.elapsed_seconds, 2), "updated_at": time.time()}
        if self.accuracy is not None:
            out["accuracy"] = self.accuracy
        out["baseline_loss"] = self.baseline_loss
        if self.chance_accuracy is not None:
            out["chance_accuracy"] = self.chance_accuracy
        if self.unit == "tokens":
            out.update(flops_per_token=self.flops_per_token, mfu=self.mfu)
        out.update(micro_batch=self.micro_batch, grad_accum=self.grad_accum, faults=self.faults)
        if self.error:
            out["error"] = self.error
        if self.signal:
            out["signal"] = self.signal
        if self.skipped_files is not None:
            out["skipped_files"] = self.skipped_files
        if self.compile_stats is not None:
            out.update(compile_cache=self.compile_cache, compile_stats=self.compile_stats)
        out.update(self.watch)
        return out
