"""What a run trains with: the device, the data and its batch stream, the model and the module that
trains it (compiled, DDP-wrapped), precision, optimizer, the checkpoints and the device watch.

A `Trainer` is built whole by `build_trainer` (build.py), resume included, and never changes after:
its fields are frozen, and what moves while the run trains lives in objects it holds (the batch
stream's position, the step clock, the loss sum) or in `TrainState`. `Trainer.rewind` is the one
way the data position is moved: after a resume, an out-of-memory split or a NaN rollback
(envkit/train/run/recover.py) it restarts the batch stream from `TrainState` and the step clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from envkit.config.config import Config, Training
from envkit.config.schema import Parallel, TrainPrecision
from envkit.train.data.bundle import DataBundle, ResumableBatchSampler
from envkit.train.data.stream import BatchStream
from envkit.train.run.checkpointer import Checkpointer
from envkit.train.run.compile_cache import CompileCache
from envkit.train.run.distributed import GradientAllReduce
from envkit.train.run.state import RateUnit, StepClock, TrainState
from envkit.train.run.step import LossModule
from envkit.train.watching.watch import RunWatch

if TYPE_CHECKING:
    from envkit.facts.model import TrainDevice


@dataclass(frozen=True)
class Trainer:
    cfg: Config  # as the run uses it: what it derived at start (max_steps from epochs, what auto became) beside the declared
    run_dir: Path
    rank: int
    world: int
    log: Callable[[str], None]  # Telemetry.log: one line to train.log (and the terminal on rank 0)
    device_type: TrainDevice  # device.type as decided
    device: torch.device
    device_name: str  # the GPU's name on CUDA, else device_type
    data: DataBundle
    val_batches: list
    batches: BatchStream  # the training batches from TrainState's position, on the device
    raw_model: torch.nn.Module  # the user's model: what checkpoints hold and eval runs
    loss_module: LossModule  # forward + loss; its accum follows an out-of-memory split
    model: torch.nn.Module  # what trains: the loss module, compiled, DDP-wrapped
    parallel: Parallel  # training.parallel as decided ("single": one process)
    parameters: int
    flops_per_token: float | None  # None: the model does not say (envkit's gpt does)
    precision: TrainPrecision  # training.precision as decided
    autocast: object  # torch.autocast for bf16 and fp16, else a null context
    scaler: torch.amp.GradScaler  # enabled for fp16 on CUDA only
    optimizer: torch.optim.Optimizer
    compile_note: str  # what summary.json says of compile ("off", "on", "on, per block ...", "failed, eager ...")
    compile_cache: CompileCache | None  # what was compiled, kept for the next run (compile_cache.py); None: compile off
    checkpointer: Checkpointer
    resumed_from: str | None  # the checkpoint the run started from; None: from the start
    watch: RunWatch  # the device sampler, data-wait timing, hints and trackers (rank 0)
    clock: StepClock
    loss_sum: torch.Tensor  # the step losses summed on the device since the last rollback: non-finite once any was
    all_reduce: GradientAllReduce | None = None  # ddp with training.ddp_reduce after_backward: averages the gradients after the backward

    # -- config sections, as the run uses them
    @property
    def training(self) -> Training:
        return self.cfg.training

    @property
    def master(self) -> bool:
        return self.rank == 0

    @property
    def unit(self) -> RateUnit:
        return "tokens" if self.data.kind == "lm" else "samples"

    @property
    def sampler(self) -> ResumableBatchSampler:
        """The batch order at the current micro-batch: epochs are counted in its batches."""
        return self.batches.sampler

    def per_step(self, state: TrainState) -> int:
        """Samples (or tokens) one optimizer step trains, over all processes."""
        per_sample = self.data.tokens_per_sample if self.data.kind == "lm" else 1
        return state.micro_batch * state.grad_accum * self.world * per_sample

    def global_loss(self, loss: torch.Tensor) -> float:
        """The step's loss over the global batch, as metrics.jsonl logs it: each process's mean over its
        share, averaged over the processes. The shares are equal (the sampler's slices of one global
        batch), so this is the mean over the whole batch that DDP's averaged gradients are the gradient
        of, and the same number at any process count (a resume on another count compares). Every
        process calls it at the same (logged) steps: it is a collective."""
        if self.world > 1:
            loss = loss.detach().clone()
            torch.distributed.all_reduce(loss)  # a sum: gloo has no average
            loss /= self.world
        return float(loss)

    # -- moving the position
    def rewind(self, state: TrainState) -> None:
        """The data stream and accumulation follow `state` (after an OOM split or a rollback); a
        batch fetched ahead is dropped, and the step clock starts over."""
        self.loss_module.accum = state.grad_accum
        self.batches.restart(state.micro_batch, state.batches)
        self.clock.restart()
