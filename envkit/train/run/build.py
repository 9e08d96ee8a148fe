"""`build_trainer`: the `Trainer` built whole, in nanoGPT's order, each stage from what the ones
before it decided:

    where (device, process group, seeds, torch settings) -> data -> precision -> model (sharded
    or moved) -> optimizer -> checkpoints: resume -> the device watch -> the module that trains
    (compiled, DDP-wrapped) -> the batch stream from the resumed position

The resume comes before the training module because the compile cache's key and the accumulation
follow the resumed micro-batch (an out-of-memory split stays split), and the batch stream starts
at the resumed position. The config a stage runs with is the one before it plus what that stage
derived (outside the config hash): the Trainer gets the last, with what `auto` became beside it.
"""

from __future__ import annotations

import contextlib
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from envkit.config.config import Config, per_process_batch
from envkit.config.schema import CompileMode, CompileScoped, DdpReduced, Parallel, Precision, TrainPrecision
from envkit.train.data import on_device
from envkit.train.data.bundle import DataBundle
from envkit.train.data.datasets import BUILTIN_DATASETS, build_data
from envkit.train.data.prefetch import want_fetch_ahead
from envkit.train.data.stream import BatchStream, batch_order
from envkit.train.recovery.guards import TrainingStopped, resolve_device
from envkit.train.recovery.injection import Injector
from envkit.train.run import determinism, sharding, timing
from envkit.train.run.checkpointer import Checkpointer
from envkit.train.run.compile_cache import CompileCache, cache_key
from envkit.train.run.distributed import GradientAllReduce, broadcast_from_first, ddp_reduce_for, init_distributed, wrap_ddp
from envkit.train.run.evaluate import val_batches
from envkit.train.run.models import build_model_for, use_flex_attention
from envkit.train.run.optim import build_optimizer, steps_for_epochs
from envkit.train.run.speed import (apply_sdpa_backend, apply_torch_settings, blocks_share_a_compile, compile_blocks,
                                    compile_kwargs, compile_mode_for, compile_scope_for, maybe_compile, want_compile)
from envkit.train.run.state import StepClock, TrainState
from envkit.train.run.step import BlockwiseLoss, LossModule, has_blocks
from envkit.train.run.trainer import Trainer
from envkit.train.watching.telemetry import Telemetry
from envkit.train.watching.watch import RunWatch

if TYPE_CHECKING:
    from envkit.facts.model import TrainDevice


@dataclass(frozen=True)
class Place:
    """Where this process trains."""

    rank: int
    local_rank: int
    world: int
    device_type: TrainDevice
    device: torch.device
    device_name: str


@dataclass(frozen=True)
class Data:
    bundle: DataBundle
    batch_size: int  # training.batch_size per process, decided (auto is decided before the run starts)
    on_device: bool  # the data sets live on the device: batches are built there (dataset.on_device)
    pin_memory: bool
    val_batches: list


@dataclass(frozen=True)
class Model:
    raw: torch.nn.Module  # the user's model, on the device or sharded
    parameters: int
    flops_per_token: float | None
    parallel: Parallel  # training.parallel as decided
    compile_mode: CompileMode  # training.compile_mode, or what it becomes with several processes (speed.compile_mode_for)
    compile_scope: CompileScoped  # model (one graph), blocks, or fsdp units (speed.compile_scope_for)
    sharded_note: str  # fsdp: what summary.json says of compile (its units were compiled as they were sharded)
    ddp_reduce: DdpReduced | None  # ddp: overlap (DDP) or after_backward (GradientAllReduce); else None


def build_trainer(cfg: Config, run_dir: Path, tel: Telemetry, *, torch_settings: dict | None, resume: str,
                  inject: Injector | None) -> tuple[Trainer, TrainState]:
    """The Trainer of `cfg` in `run_dir`, resumed as `resume` says (auto: the newest valid checkpoint;
    a path; never), and the TrainState it resumed to. Logs through `tel`; `inject` is the tests' fault hook."""
    clock = StepClock()  # the first logged window (the warm-up, left out of the rates) counts from here: the build is in it
    log, run_dir, world = tel.log, Path(run_dir), int(os.environ.get("WORLD_SIZE", "1"))
    # training.global_batch_size: this process's share (a sweep's runs and bench come here without envkit run's plan)
    cfg = per_process_batch(cfg, world)
    place, cfg = _place(cfg, world, torch_settings, log)
    loss_sum = torch.zeros((), dtype=torch.float32, device=place.device)
    timing.mark("device ready: CUDA's start, seeds, torch settings")
    data, cfg = _data(cfg, place, log)
    timing.mark("data: the data sets, the batch order, validation batches")
    precision, autocast, scaler = _precision(cfg.training.precision, place.device_type, log)
    model = _model(cfg, data.bundle, place, precision, log)
    timing.mark("model built and initialised on the device")
    optimizer = build_optimizer(model.raw, cfg.training, place.device_type, cfg.origin)
    checkpointer = Checkpointer.for_run(run_dir, cfg, parallel=model.parallel, rank=place.rank, world=world, model=model.raw,
                                        optimizer=optimizer, scaler=scaler, batch_size=data.batch_size, log=log, inject=inject)
    state = TrainState(micro_batch=data.batch_size, grad_accum=cfg.training.grad_accum)
    resumed_from = checkpointer.resume(resume, state) if resume != "never" else None
    timing.mark("optimizer, checkpointer, resume")
    watch = RunWatch(run_dir, cfg.run_dict(), place.device_type, place.device, log, enabled=place.rank == 0, telemetry=tel,
                     local_devices=world)
    timing.mark("device watch")
    compile_cache, loss_module, trained, compile_note, all_reduce = _training_module(cfg, place, data.bundle, model, precision, state, log)
    timing.mark("torch.compile's wrapper")
    loader = cfg.dataloader
    batches = BatchStream(data.bundle, loader, micro_batch=state.micro_batch, position=state.batches, seed=cfg.experiment.seed,
                          rank=place.rank, world=world, device=place.device, pin_memory=data.pin_memory, on_device=data.on_device,
                          ahead=want_fetch_ahead(loader.fetch_ahead, place.device_type, loader.num_workers,
                                                 cfg.dataset.type in BUILTIN_DATASETS),
                          next_batch=watch.next_batch)
    timing.mark("batch stream")
    trainer = Trainer(cfg=_with_decisions(cfg, place, data, model, precision), run_dir=run_dir, rank=place.rank, world=world, log=log,
                      device_type=place.device_type, device=place.device, device_name=place.device_name, data=data.bundle,
                      val_batches=data.val_batches, batches=batches, raw_model=model.raw, loss_module=loss_module, model=trained,
                      parallel=model.parallel, parameters=model.parameters, flops_per_token=model.flops_per_token,
                      precision=precision, autocast=autocast, scaler=scaler, optimizer=optimizer, compile_note=compile_note,
                      compile_cache=compile_cache, checkpointer=checkpointer, resumed_from=resumed_from, watch=watch,
                      clock=clock, loss_sum=loss_sum, all_reduce=all_reduce)
    return trainer, state


def _place(cfg: Config, world: int, torch_settings: dict | None, log) -> tuple[Place, Config]:
    """The device (and its process group), the seeds, and torch's settings; the config with a
    deterministic run's compile_mode (determinism.prepare)."""
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device_type = resolve_device(cfg.device.type, cfg.device.fallback_to_cpu, log)
    device = torch.device(f"cuda:{local_rank}" if device_type == "cuda" else device_type)
    if device_type == "cuda":
        torch.cuda.set_device(device)
        device_name = torch.cuda.get_device_name(device)
    else:
        device_name = device_type
    if world > 1:
        init_distributed(device)
    seed = cfg.experiment.seed
    random.seed(seed)
    torch.manual_seed(seed)  # seeds CPU, CUDA and MPS generators
    cfg, torch_settings, notes = determinism.prepare(cfg, torch_settings)
    training = cfg.training
    for message in (notes + apply_torch_settings(torch_settings, device_type) + apply_sdpa_backend(training.sdpa_backend, device_type)
                    + (determinism.apply(device_type, cfg.model.type) if training.deterministic else [])):
        log(message)
    return Place(int(os.environ.get("RANK", "0")), local_rank, world, device_type, device, device_name), cfg


def _data(cfg: Config, place: Place, log) -> tuple[Data, Config]:
    """The data sets (on the device where they fit and are asked to be), the validation batches; the
    config with max_steps counted from training.epochs."""
    training, loader, seed = cfg.training, cfg.dataloader, cfg.experiment.seed
    data = build_data(cfg, seed=seed)
    for note in data.notes:
        log(note)
    held = on_device.place(data, cfg.dataset.on_device, place.device_type, place.device,
                           bool(getattr(data.train, "augment", False)), loader.num_workers, log)
    pin_memory = loader.pin_memory if isinstance(loader.pin_memory, bool) else place.device_type == "cuda"  # else auto
    batch = training.batch_size
    if not isinstance(batch, int):
        raise TrainingStopped(f"training.batch_size {batch!r} reached the trainer undecided: envkit run decides auto before it starts")
    order = batch_order(data, batch, seed, place.rank, place.world)  # refuses a set smaller than one batch
    if training.epochs:  # max_steps follows the data: the schedule, log, ETA and summary count to it (derived: not hashed)
        cfg = cfg.derive("training.max_steps", steps_for_epochs(training.epochs, order.per_epoch, training.grad_accum))
    return Data(data, batch, held, pin_memory, val_batches(data.val, batch, cfg.eval.batches)), cfg


def _precision(setting: Precision, device_type: TrainDevice, log) -> tuple[TrainPrecision, object, torch.amp.GradScaler]:
    """(precision, the autocast context, the GradScaler): auto is bf16 where CUDA has it, else fp32."""
    precision = setting
    if precision == "auto":
        precision = "bf16" if device_type == "cuda" and torch.cuda.is_bf16_supported() else "fp32"
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    autocast = torch.autocast(device_type=device_type, dtype=dtype) if dtype is not None else contextlib.nullcontext()
    # GradScaler only where fp16 needs it and works: CUDA (MPS's casts to float64, pytorch#142397)
    scaler = torch.amp.GradScaler("cuda", enabled=(precision == "fp16" and device_type == "cuda"))
    if precision == "fp16" and device_type != "cuda":
        log(f"note: fp16 on {device_type} runs without a GradScaler (it does not work there); watch for NaN")
    return precision, autocast, scaler


def _model(cfg: Config, data: DataBundle, place: Place, precision: TrainPrecision, log) -> Model:
    """Built and initialised on the GPU where it fits (models.build_model_for), else on the CPU; the
    same initialisation for every mode on one kind of device; then moved, or sharded over the
    processes (training.parallel, train/run/sharding.py)."""
    training, model_type, device, world = cfg.training, cfg.model.type, place.device, place.world
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    model, initialised_there = build_model_for(cfg, data.info, device, place.device_type)
    parameters = sum(p.numel() for p in model.parameters())
    flops: Any = getattr(model, "flops_per_token", None)  # envkit's gpt has it
    flops_per_token = flops() if flops is not None else None
    parallel, why = sharding.choose(training.parallel, world=world, device=device, model=model, model_type=model_type,
                                    training=training, local_world=local_world)
    compiling = want_compile(training.compile, place.device_type) == "on"
    gradient_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    ddp_reduce, reduce_line = (ddp_reduce_for(training.ddp_reduce, place.device_type, compiling, training.compile_mode, gradient_bytes)
                               if parallel == "ddp" else (None, ""))
    compile_mode, changed = compile_mode_for(training.compile_mode, world, between_graphs=ddp_reduce != "after_backward")
    if changed and compiling:
        log(changed)
    # asked only when compiling: the question imports torch._dynamo, which a CPU run without compile never loads (optim.py)
    shares = compiling and has_blocks(model) and blocks_share_a_compile()
    compile_scope, scope_line = compile_scope_for(training.compile_scope, shares, world, compile_mode, model_type)
    if parallel == "fsdp":
        compile_scope = "fsdp units"  # sharding.apply_fsdp compiles each unit, then the whole step
    elif scope_line and compiling:
        log(scope_line)
    units = sharding.shard_units(model, model_type)
    if training.activation_checkpointing == "full":
        if units is None:
            raise TrainingStopped(f"training.activation_checkpointing full: model.type {model_type} has no blocks to "
                                  "checkpoint (gpt and resnet18/34/50 have; a factory's model may define shard_units())")
        sharding.checkpoint_activations(units)
    log(f"model {model_type}: {parameters / 1e6:.2f}M parameters on {place.device_type}"
        + (f" ({place.device_name})" if place.device_type == "cuda" else "") + (", initialised there" if initialised_there else ""))
    sharded_note = "off"
    if parallel == "fsdp":
        assert units is not None  # sharding.choose picks fsdp only for a model with shard units
        min_unit, reshard, plan_why = sharding.fsdp_plan(model, training, precision, world, sharding.free_bytes(device, local_world))
        def compile_unit(unit: torch.nn.Module) -> None:
            unit.compile(**compile_kwargs(compile_mode))

        done = sharding.apply_fsdp(model, units, device, precision, world, compile_unit=compile_unit if compiling and min_unit >= 0 else None,
                                   reshard_after_forward=reshard, min_unit_params=min_unit)
        per = "" if min_unit < 0 else f"per {'block' if model_type == 'gpt' else 'unit'} and "
        sharded_note = f"on, {per}the whole step" if compiling else "off"
        log(f"training.parallel: fsdp ({why}): {done}; {plan_why}")
    else:
        model.to(device)
        if parallel == "ddp":
            log(f"training.parallel: ddp ({why}); {reduce_line}")
    return Model(model, parameters, flops_per_token, parallel, compile_mode, compile_scope, sharded_note, ddp_reduce)


def _training_module(cfg: Config, place: Place, data: DataBundle, model: Model, precision: TrainPrecision, state: TrainState,
                     log) -> tuple[CompileCache | None, LossModule, torch.nn.Module, str, GradientAllReduce | None]:
    """(the compile cache, the loss module, what trains, what summary.json says of compile, the gradients'
    all-reduce after the backward or None), after the resume: forward + loss at the resumed accumulation,
    compiled, DDP-wrapped (or not, with training.ddp_reduce after_backward)."""
    training = cfg.training
    compiling = want_compile(training.compile, place.device_type)
    compile_cache = None
    if compiling == "on":  # before anything compiles: a second run loads what the first compiled
        key = cache_key(cfg, device_type=place.device_type, device_name=place.device_name, data_info=data.info,
                        micro_batch=state.micro_batch, precision=precision, mode=model.compile_mode, scope=model.compile_scope,
                        world=place.world, parallel=model.parallel)
        compile_cache = CompileCache(key, training.compile_cache, log)
        compile_cache.load()
        timing.mark("compile cache loaded (torch.compiler.load_cache_artifacts)")
    if compiling == "on" and determinism.flex_attention_for(cfg, place.device_type):
        try:
            layers = use_flex_attention(model.raw, place.device)
        except Exception as exc:  # noqa: BLE001 - a torch without FlexAttention: SDPA's deterministic kernel
            log(f"training.deterministic: FlexAttention not available ({type(exc).__name__}: {str(exc)[:160]}); SDPA's attention")
        else:
            if layers:
                log(f"training.deterministic: attention by FlexAttention in the compiled step ({layers} layers: its backward "
                    f"has no atomics; {determinism.FLEX_SWITCH}=sdpa keeps SDPA's FlashAttention-2)")
    if model.compile_scope == "blocks":
        loss_module: LossModule = BlockwiseLoss(model.raw, state.grad_accum)
        trained, note = compile_blocks(loss_module, compiling, log, model.compile_mode)
    else:
        loss_module = LossModule(model.raw, state.grad_accum)
        # fsdp: with several units each was compiled as it was sharded (_model; one unit: the step alone); the
        # step is compiled whole as well, so the head and the loss are fused (on one H100, GPT-2 small: 10.8 GB
        # peak against 15.7 with the loss eager, and the fastest of the three ways, benchmarks/bench_fsdp_one_process.py)
        trained, note = maybe_compile(loss_module, compiling, log, model.compile_mode)
    all_reduce = None
    if model.ddp_reduce == "overlap":
        trained = wrap_ddp(trained, place.device, place.local_rank, training.ddp_bucket_mb, training.ddp_comm_dtype, log)
    elif model.ddp_reduce == "after_backward":
        broadcast_from_first(model.raw)
        all_reduce = GradientAllReduce(model.raw, place.world, training.ddp_bucket_mb, training.ddp_comm_dtype, place.device)
        if training.ddp_comm_dtype == "bf16" and place.device_type != "cuda":
            log(f"training.ddp_comm_dtype bf16 ignored on {place.device_type}: gloo all-reduces fp32")
    return compile_cache, loss_module, trained, model.sharded_note if model.parallel == "fsdp" else note, all_reduce


def _with_decisions(cfg: Config, place: Place, data: Data, model: Model, precision: TrainPrecision) -> Config:
    """What `auto` became on this machine, recorded beside the config (summary.json's "derived"), never in its hash."""
    decided = {"device.type": place.device_type, "training.precision": precision,
               "training.compile": want_compile(cfg.training.compile, place.device_type) == "on",
               "training.compile_mode": model.compile_mode, "training.compile_scope": model.compile_scope,
               "training.parallel": model.parallel,
               "dataset.on_device": data.on_device, "dataloader.pin_memory": bool(data.pin_memory)}
    if model.ddp_reduce:
        decided["training.ddp_reduce"] = model.ddp_reduce
    for path, value in decided.items():
        cfg = cfg.derive(path, value)
    return cfg
