"""What a run trains with, built once from the config: the device, the data and its sampler, the
model, precision, optimizer, and (after resume) the compiled and DDP-wrapped training module.

`Trainer.build` does it in nanoGPT's order (device and seeds, data, model, precision, optimizer);
`Trainer.start` adds what must come after a resume (compile, DDP, the batch stream).
`Trainer.rewind` is the one way the data position is moved: after a resume, an out-of-memory
split or a NaN rollback (envkit/train/run/recover.py) it rebuilds the sampler and the batch stream
from `TrainState` and restarts the step clock.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Callable, Sized
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch

from envkit.train.data import on_device
from envkit.train.data.bundle import DataBundle, ResumableBatchSampler
from envkit.train.data.datasets import BUILTIN_DATASETS, build_data
from envkit.train.data.prefetch import DeviceBatches, want_fetch_ahead
from envkit.train.recovery.guards import resolve_device
from envkit.train.run import checkpoint as ckpt
from envkit.train.run import determinism
from envkit.config.config import Config, Dataloader, Training, per_process_batch
from envkit.train.recovery.guards import TrainingStopped
from envkit.train.run import sharded_checkpoint as sharded
from envkit.train.run import sharding
from envkit.train.run.distributed import init_distributed, wrap_ddp
from envkit.train.run.evaluate import val_batches
from envkit.train.run.models import build_model_for
from envkit.train.run.optim import build_optimizer, steps_for_epochs
from envkit.train.run.compile_cache import CompileCache, cache_key
from envkit.train.run.speed import (apply_sdpa_backend, apply_torch_settings, blocks_share_a_compile, compile_blocks,
                                    compile_kwargs, compile_mode_for, compile_scope_for, maybe_compile, want_compile)
from envkit.train.run.state import StepClock, TrainState
from envkit.train.run.step import BlockwiseLoss, LossModule, has_blocks


@dataclass
class Trainer:
    cfg: Config
    run_dir: Path
    rank: int
    local_rank: int
    world: int
    log: Callable[[str], None]  # Telemetry.log: one line to train.log (and the terminal on rank 0)
    # build() sets the fields of init=False, each before its first use: the device, the data and
    # its sampler, the model, the scaler and the optimizer
    device_type: str = "cpu"
    device: torch.device = field(init=False)
    device_name: str = "cpu"
    data: DataBundle = field(init=False)
    raw_model: torch.nn.Module = field(init=False)  # the user's model: what checkpoints hold
    loss_module: LossModule | None = None  # forward + loss; its accum follows an out-of-memory split
    model: torch.nn.Module | None = None  # what trains: the loss module, compiled, DDP-wrapped
    parallel: str = "single"  # "single" (one process), "ddp" or "fsdp" (training.parallel, decided in _setup_model)
    optimizer: torch.optim.Optimizer = field(init=False)
    scaler: torch.amp.GradScaler = field(init=False)
    autocast: object = field(default_factory=contextlib.nullcontext)
    precision: str = "fp32"
    compile_note: str = "off"
    compile_mode: str = "default"  # training.compile_mode, or what it becomes with several processes (speed.compile_mode_for)
    compile_scope: str = "model"  # training.compile_scope as decided: model (one graph) or blocks (speed.compile_scope_for)
    compile_cache: CompileCache | None = None  # what was compiled, kept for the next run (compile_cache.py); None: compile off
    parameters: int = 0
    flops_per_token: float | None = None
    val_batches: list = field(default_factory=list)
    pin_memory: bool = False
    data_on_device: bool = False  # the data sets live on the device: batches are built there (dataset.on_device)
    sampler: ResumableBatchSampler = field(init=False)
    batches: DeviceBatches | None = None
    clock: StepClock = field(default_factory=StepClock)
    loss_sum: torch.Tensor = field(init=False)  # the step losses summed on the device since the last rollback: non-finite once any was

    # -- config sections, as the run uses them
    @property
    def training(self) -> Training:
        return self.cfg.training

    @property
    def loader_cfg(self) -> Dataloader:
        return self.cfg.dataloader

    @property
    def seed(self) -> int:
        return self.cfg.experiment.seed

    @property
    def batch_size(self) -> int:
        """training.batch_size as the run uses it: a number (auto is decided before the run starts)."""
        batch = self.training.batch_size
        if not isinstance(batch, int):
            raise TrainingStopped(f"training.batch_size {batch!r} reached the trainer undecided: envkit run decides auto before it starts")
        return batch

    @property
    def master(self) -> bool:
        return self.rank == 0

    @property
    def unit(self) -> str:
        return "tokens" if self.data.kind == "lm" else "samples"

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

    # -- building
    @classmethod
    def build(cls, cfg: Config, run_dir: Path, torch_settings: dict | None, log) -> "Trainer":
        world = int(os.environ.get("WORLD_SIZE", "1"))
        # training.global_batch_size: this process's share (a sweep's runs and bench come here without envkit run's plan)
        tr = cls(per_process_batch(cfg, world), Path(run_dir), int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0")),
                 world, log)
        tr._setup_device(torch_settings)
        tr._setup_data()
        tr._setup_precision()
        tr._setup_model()
        tr.optimizer = build_optimizer(tr.raw_model, tr.training, tr.device_type, cfg.origin)
        return tr

    def _setup_device(self, torch_settings: dict | None) -> None:
        self.device_type = resolve_device(self.cfg.device.type, self.cfg.device.fallback_to_cpu, self.log)
        self.device = torch.device(f"cuda:{self.local_rank}" if self.device_type == "cuda" else self.device_type)
        if self.device_type == "cuda":
            torch.cuda.set_device(self.device)
            self.device_name = torch.cuda.get_device_name(self.device)
        else:
            self.device_name = self.device_type
        if self.world > 1:
            init_distributed(self.device)
        random.seed(self.seed)
        torch.manual_seed(self.seed)  # seeds CPU, CUDA and MPS generators
        self.cfg, torch_settings, notes = determinism.prepare(self.cfg, torch_settings)
        for message in (notes + apply_torch_settings(torch_settings, self.device_type)
                        + apply_sdpa_backend(self.training.sdpa_backend, self.device_type)
                        + (determinism.apply(self.device_type, self.cfg.model.type) if self.training.deterministic else [])):
            self.log(message)
        self.loss_sum = torch.zeros((), dtype=torch.float32, device=self.device)

    def _setup_data(self) -> None:
        training, loader = self.training, self.loader_cfg
        self.data = build_data(self.cfg, seed=self.seed)
        for note in self.data.notes:
            self.log(note)
        dataset = self.cfg.dataset
        self.data_on_device = on_device.place(self.data, dataset.on_device, self.device_type, self.device,
                                         bool(getattr(self.data.train, "augment", False)), loader.num_workers, self.log)
        self.pin_memory = loader.pin_memory if isinstance(loader.pin_memory, bool) else self.device_type == "cuda"  # else auto
        self.sampler = self._sampler(self.batch_size)
        if training.epochs:  # max_steps follows the data: the schedule, log, ETA and summary count to it (derived: not hashed)
            self.cfg = self.cfg.derive("training.max_steps", steps_for_epochs(training.epochs, self.sampler.per_epoch, training.grad_accum))
        self.val_batches = val_batches(self.data.val, self.batch_size, self.cfg.eval.batches)

    def _setup_model(self) -> None:
        """Built and initialised on the GPU where it fits (models.build_model_for), else on the CPU; the
        same initialisation for every mode on one kind of device; then moved, or sharded over the
        processes (training.parallel, train/run/sharding.py)."""
        model_type = self.cfg.model.type
        model, on_device = build_model_for(self.cfg, self.data.info, self.device)
        self.parameters = sum(p.numel() for p in model.parameters())
        flops: Any = getattr(model, "flops_per_token", None)  # envkit's gpt has it
        self.flops_per_token = flops() if flops is not None else None
        self.parallel, why = sharding.choose(self.training.parallel, world=self.world, device=self.device, model=model,
                                             model_type=model_type, training=self.training,
                                             local_world=int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
        self.compile_mode, changed = compile_mode_for(self.training.compile_mode, self.world)
        if changed and want_compile(self.training.compile, self.device_type) == "on":
            self.log(changed)
        compiling = want_compile(self.training.compile, self.device_type) == "on"
        # asked only when compiling: the question imports torch._dynamo, which a CPU run without compile never loads (optim.py)
        shares = compiling and has_blocks(model) and blocks_share_a_compile()
        self.compile_scope, scope_line = compile_scope_for(self.training.compile_scope, shares, self.world, self.compile_mode, model_type)
        if self.parallel == "fsdp":
            self.compile_scope = "fsdp units"  # sharding.apply_fsdp compiles each unit, then the whole step
        elif scope_line and compiling:
            self.log(scope_line)
        units = sharding.shard_units(model, model_type)
        if self.training.activation_checkpointing == "full":
            if units is None:
                raise TrainingStopped(f"training.activation_checkpointing full: model.type {model_type} has no blocks to "
                                      "checkpoint (gpt and resnet18/34/50 have; a factory's model may define shard_units())")
            sharding.checkpoint_activations(units)
        self.log(f"model {model_type}: {self.parameters / 1e6:.2f}M parameters on {self.device_type}"
                 + (f" ({self.device_name})" if self.device_type == "cuda" else "") + (", initialised there" if on_device else ""))
        if self.parallel == "fsdp":
            assert units is not None  # sharding.choose picks fsdp only for a model with shard units
            compiling = want_compile(self.training.compile, self.device_type) == "on"
            min_unit, reshard, plan_why = sharding.fsdp_plan(
                model, self.training, self.precision, self.world,
                sharding.free_bytes(self.device, int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))
            done = sharding.apply_fsdp(model, units, self.device, self.precision, self.world,
                                       compile_unit=self._compile_unit if compiling and min_unit >= 0 else None,
                                       reshard_after_forward=reshard, min_unit_params=min_unit)
            done += f"; {plan_why}"
            per = "" if min_unit < 0 else f"per {'block' if model_type == 'gpt' else 'unit'} and "
            self.compile_note = f"on, {per}the whole step" if compiling else "off"
            self.log(f"training.parallel: fsdp ({why}): {done}")
        else:
            model.to(self.device)
            if self.parallel == "ddp":
                self.log(f"training.parallel: ddp ({why})")
        self.raw_model = model

    def _compile_unit(self, unit: torch.nn.Module) -> None:
        unit.compile(**compile_kwargs(self.compile_mode))

    def _setup_precision(self) -> None:
        precision = self.training.precision
        if precision == "auto":
            precision = "bf16" if self.device_type == "cuda" and torch.cuda.is_bf16_supported() else "fp32"
        self.precision = precision
        dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
        if dtype is not None:
            self.autocast = torch.autocast(device_type=self.device_type, dtype=dtype)
        # GradScaler only where fp16 needs it and works: CUDA (MPS's casts to float64, pytorch#142397)
        self.scaler = torch.amp.GradScaler("cuda", enabled=(precision == "fp16" and self.device_type == "cuda"))
        if precision == "fp16" and self.device_type != "cuda":
            self.log(f"note: fp16 on {self.device_type} runs without a GradScaler (it does not work there); watch for NaN")

    def start(self, state: TrainState, next_batch) -> None:
        """After resume: the training module (forward + loss, compiled, DDP) and the batch stream
        from the state's position. `next_batch` times the wait for data (watching/watch.py)."""
        training = self.training
        compiling = want_compile(training.compile, self.device_type)
        if compiling == "on":  # before anything compiles: a second run loads what the first compiled
            self.compile_cache = CompileCache(cache_key(self, state.micro_batch), training.compile_cache, self.log)
            self.compile_cache.load()
        if self.compile_scope == "blocks":
            self.loss_module = BlockwiseLoss(self.raw_model, state.grad_accum)
            self.model, note = compile_blocks(self.loss_module, compiling, self.log, self.compile_mode)
        else:
            self.loss_module = LossModule(self.raw_model, state.grad_accum)
            # fsdp: with several units each was compiled as it was sharded (_setup_model; one unit: the step alone); the
            # step is compiled whole as well, so the head and the loss are fused (on one H100, GPT-2 small: 10.8 GB
            # peak against 15.7 with the loss eager, and the fastest of the three ways, benchmarks/bench_fsdp_one_process.py)
            self.model, note = maybe_compile(self.loss_module, compiling, self.log, self.compile_mode)
        if self.parallel != "fsdp":
            self.compile_note = note
        if self.parallel == "ddp":
            self.model = wrap_ddp(self.model, self.device, self.local_rank, training.ddp_bucket_mb, training.ddp_comm_dtype, self.log)
        ahead = want_fetch_ahead(self.loader_cfg.fetch_ahead, self.device_type, self.loader_cfg.num_workers,
                                 self.cfg.dataset.type in BUILTIN_DATASETS)
        self.sampler = self._sampler(state.micro_batch)
        self.batches = DeviceBatches(self._loader(state.batches), self.device, self.pin_memory, next_batch, ahead=ahead)
        self._derive_decisions()

    def _derive_decisions(self) -> None:
        """What `auto` became on this machine, recorded beside the config (summary.json's "derived"), never in its hash."""
        decided = {"device.type": self.device_type, "training.precision": self.precision,
                   "training.compile": want_compile(self.training.compile, self.device_type) == "on",
                   "training.compile_mode": self.compile_mode, "training.compile_scope": self.compile_scope,
                   "training.parallel": self.parallel,
                   "dataset.on_device": self.data_on_device, "dataloader.pin_memory": bool(self.pin_memory)}
        for path, value in decided.items():
            self.cfg = self.cfg.derive(path, value)

    # -- moving the position
    def rewind(self, state: TrainState) -> None:
        """The data stream and accumulation follow `state` (after an OOM split or a rollback); a
        batch fetched ahead is dropped, and the step clock starts over."""
        self.sampler = self._sampler(state.micro_batch)
        if self.loss_module is not None:
            self.loss_module.accum = state.grad_accum
        if self.batches is not None:
            self.batches.reset(self._loader(state.batches))
        self.clock.restart()

    def _sampler(self, micro_batch: int) -> ResumableBatchSampler:
        # a DataBundle's sets are map-style, with a length (torch's Dataset does not declare __len__)
        return ResumableBatchSampler(len(cast(Sized, self.data.train)), micro_batch, self.seed, rank=self.rank, world=self.world)

    def _loader(self, start: int):
        loader_cfg, kw = self.loader_cfg, {}
        self.sampler.start = start
        if self.data_on_device:  # built where the data lives: no DataLoader (train/data/on_device.py)
            built = on_device.batches(self.data.train, self.sampler)
            return built if self.data.check_batch is None else map(self.data.check_batch, built)
        if loader_cfg.num_workers > 0:
            kw["persistent_workers"] = loader_cfg.persistent_workers
            if loader_cfg.prefetch_factor:
                kw["prefetch_factor"] = loader_cfg.prefetch_factor
        loader = torch.utils.data.DataLoader(self.data.train, batch_sampler=self.sampler, num_workers=loader_cfg.num_workers,
                                             pin_memory=self.pin_memory, generator=torch.Generator().manual_seed(self.seed), **kw)
        return iter(loader) if self.data.check_batch is None else map(self.data.check_batch, loader)

    # -- checkpoints
    def checkpoint(self, state: TrainState) -> dict:
        return {"model": self.raw_model.state_dict(), "optimizer": self.optimizer.state_dict(), **self._fields(state)}

    def _global_batch_said(self, saved: dict, written_by: int) -> str:
        """Whether a step still trains the global batch it trained when the checkpoint was written:
        the sampler hands each process its slice of one global batch whatever their count
        (data/bundle.py), so the same global batch means the same samples in each step and the losses of
        an uninterrupted run, up to the order of fp32 sums; another one keeps the data position alone."""
        loop, training = saved.get("loop") or {}, self.training
        per = training.batch_size * training.grad_accum
        was = (loop.get("micro_batch") or training.batch_size) * (loop.get("grad_accum") or training.grad_accum)
        before, now = f"{_processes(written_by)} x {was}", f"{_processes(self.world)} x {per}"
        if was * written_by == per * self.world:
            return f"global batch {per * self.world} as before ({before}, now {now}): the steps go on as they would have"
        # batch_size is hashed, so it cannot be raised for the resume; global_batch_size (hashed instead) can keep it
        fix = (f"--nproc-per-node {written_by} (a run with training.global_batch_size keeps its global batch at any process "
               "count)")
        return (f"global batch {was * written_by} ({before}), now {per * self.world} ({now}): the data position is kept, the losses "
                f"will not match an uninterrupted run; to resume exactly: {fix}")

    def _fields(self, state: TrainState) -> dict:
        return {"scaler": self.scaler.state_dict() if self.scaler.is_enabled() else None, "rng": ckpt.rng_state(),
                "config_hash": self.cfg.config_hash(), "world": self.world, **state.checkpoint_fields()}

    def save_checkpoint(self, state: TrainState) -> Path | None:
        """Every process calls it. A step_*.pt file written by rank 0, or under fsdp a step_*.dcp
        folder written by all (train/run/sharded_checkpoint.py); the path on rank 0."""
        folder, keep = self.run_dir / "checkpoints", self.cfg.checkpoint.keep_last
        if self.parallel != "fsdp":
            return ckpt.save(folder, self.checkpoint(state), keep) if self.master else None
        with ckpt.disk_full_said(sharded.partial_path(folder, state.step)):
            path = sharded.save(folder, self.raw_model, self.optimizer, self._fields(state), rank=self.rank, world=self.world)
        if self.master:
            ckpt.prune(folder, path, keep, log=self.log)
        return path if self.master else None

    def load(self, state: TrainState, path: Path, saved: dict) -> None:
        """Weights, optimizer, scaler, RNG and counters from a checkpoint of this config."""
        config_hash = self.cfg.config_hash()
        if saved["config_hash"] not in self.cfg.hashes_accepted():  # an epochs run's checkpoint of an older envkit too
            from envkit.train.recovery.guards import TrainingStopped

            raise TrainingStopped(f"checkpoint {path.name} was written by a different config (hash {saved['config_hash']} != "
                                  f"{config_hash}); start a new run (--resume never) or restore the old config")
        if saved.get("format") == "dcp":
            sharded.load_into(path, self.raw_model, self.optimizer)
        elif self.parallel == "fsdp":
            sharded.load_full_into(saved, self.raw_model, self.optimizer)
        else:
            self.raw_model.load_state_dict(saved["model"])
            self.optimizer.load_state_dict(saved["optimizer"])
        if saved.get("scaler"):
            self.scaler.load_state_dict(saved["scaler"])
        written_by = saved.get("world") or self.world
        if written_by != self.world:
            moved = "resharded" if self.parallel == "fsdp" or saved.get("format") == "dcp" else "loaded"
            self.log(f"checkpoint {path.name} was written by {_processes(written_by)}, resumed on {self.world}: weights and "
                     f"optimizer state {moved}; {self._global_batch_said(saved, written_by)}")
        state.restore(saved, self.batch_size, self.training.grad_accum, world=self.world)
        ckpt.set_rng_state(saved["rng"])


def _processes(n: int) -> str:
    return f"{n} process{'es' if n != 1 else ''}"
