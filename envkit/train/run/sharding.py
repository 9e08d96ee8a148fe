"""training.parallel: how the model spreads over several processes.

ddp replicates it: every process holds the weights, the gradients and the optimizer state (about
16 bytes a parameter with AdamW in fp32), so a model whose state does not fit one device cannot
train at all. fsdp shards all three over the processes with FSDP2 (`torch.distributed.fsdp.
fully_shard`, as torchtitan does). A small model whose full weights and gradients fit is one unit
(fsdp_plan: one all-gather and one reduce-scatter a step); a larger one is sharded by the units of
its sharding plan (GPT blocks, ResNet stages, grouped to UNIT_MIN_PARAMS), each gathered just before
its forward and kept (or, where memory is short, freed and gathered again) for its backward, so a
process holds 1/N of the state plus what is gathered. Its gradients are reduce-scattered, in fp32 under a bf16 run
(`MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`).

auto chooses ddp while the state fits one device with room left for activations (the state counted
from the model's real parameters and the optimizer's per-parameter state, against the device's free
memory: `HEADROOM`), fsdp otherwise, and the run's first lines say which and why.

The model is built the same way in every mode (one seed, one initialisation: on the GPU where it fits,
else on the CPU, models.build_model_for), so a ddp and an fsdp run of one config start from the same
weights and train to the same losses.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from envkit.config.schema import Parallel, ParallelMode, TrainPrecision
from envkit.train.recovery.guards import TrainingStopped

if TYPE_CHECKING:  # torch is imported where it is used: `envkit run`'s parent reads config_problem without it (1.4 s)
    import torch
    import torch.nn as nn

MODES = ("auto", "ddp", "fsdp")
# A unit gathers at least this many parameters: consecutive blocks are grouped up to it. FSDP2 pays a
# fixed host cost per unit and step (hooks, DTensor dispatch, copies): on one H100 GPT-2 small's 7M-
# parameter blocks left the GPU idle 54% of a step (benchmarks/RESULTS.md). Blocks of large models
# (1.5B: 30M each) stay one unit each, as torchtitan shards them.
UNIT_MIN_PARAMS = 25_000_000
# fsdp: a model up to this size is one unit (the root only) when its full weights and gradients fit. On
# 2 x H100, GPT-2 small (124M) trained at 0.92 of DDP that way, against 0.61 in 3 units of 4 blocks, 0.70
# in one unit of 12 blocks (each block compiled) and 0.61 with resharding (benchmarks/RESULTS.md): FSDP2's
# per-unit hooks and the per-block graphs cost more than the one unoverlapped all-gather and reduce-scatter.
# The 1.5B GPT (0.90 of DDP at one block a unit) stays in units: its exposed traffic would be 9 GB a step.
WHOLE_MAX_PARAMS = 500_000_000
HEADROOM = 0.5  # auto: ddp while weights + gradients + optimizer state take at most this share of the free memory
STATE_COPIES = {"adamw": 2, "adam": 2, "lion": 1}  # optimizer tensors per parameter (sgd: 1 with momentum, else 0)


def shard_units(model: nn.Module, model_type: str) -> list[nn.Module] | None:
    """The sharding plan: the submodules that are gathered and freed as one (then the root holds
    the rest: embeddings, the head, the stem). None: no plan for this model."""
    if callable(getattr(model, "shard_units", None)):  # a user factory's model may name its own units
        return list(model.shard_units())  # pyright: ignore[reportCallIssue] - a factory model's own method: Module.__getattr__'s stub type (Tensor | Module)
    if model_type == "gpt":
        return list(model.blocks)  # pyright: ignore[reportArgumentType] - envkit's gpt's ModuleList: Module.__getattr__'s stub type (Tensor | Module)
    if model_type.startswith("resnet"):
        return [getattr(model, f"layer{i}") for i in range(1, 5)]
    return None


def state_bytes(model: nn.Module, training) -> int:
    """Weights + gradients + optimizer state, in bytes, as ddp would hold them on each device."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    kind = training.optimizer
    copies = STATE_COPIES.get(kind, 1 if training.momentum > 0 else 0)
    return weights * (2 + copies)


def free_bytes(device: torch.device, world_on_host: int) -> int | None:
    """What the device has free: CUDA's own count; on the CPU the host's available memory shared
    by the processes of this machine."""
    import torch

    try:
        if device.type == "cuda":
            return torch.cuda.mem_get_info(device)[0]
        if device.type == "cpu" and hasattr(os, "sysconf"):
            return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // max(1, world_on_host)
    except (OSError, ValueError, RuntimeError):
        return None
    return None


def config_problem(cfg, processes: int) -> tuple[str, str] | None:
    """(what is wrong, the fix) for a config (envkit/config/config.py) that cannot train as asked, before any process starts."""
    training, model_type = cfg.training, cfg.model.type
    if training.parallel != "fsdp":
        return None
    if cfg.device.type == "mps":
        return ("training.parallel fsdp needs several processes, and MPS is one device that gloo/nccl cannot carry",
                "set training.parallel to auto (one process) or train on CUDA or the CPU")
    if processes < 2:
        return ("training.parallel fsdp shards over several processes, and this run starts one",
                "add --nproc-per-node 2 (or more, or --nnodes), or set training.parallel to auto")
    if training.precision == "fp16":
        return ("training.precision fp16 needs a GradScaler that sharded gradients do not have under training.parallel fsdp",
                "use training.precision bf16 (or auto), or training.parallel ddp")
    if ":" not in model_type and model_type != "gpt" and not model_type.startswith("resnet"):
        return (f"model.type {model_type} has no sharding plan for training.parallel fsdp (gpt and resnet18/34/50 have one)",
                "use training.parallel ddp, or a factory model (package.module:factory) that defines shard_units()")
    return None


def choose(setting: ParallelMode, *, world: int, device: torch.device, model: nn.Module, model_type: str, training,
           local_world: int) -> tuple[Parallel, str]:
    """("ddp" | "fsdp" | "single", the reason in words). Bad combinations stop the run in one line."""
    if setting == "fsdp":
        if device.type == "mps":
            raise TrainingStopped("training.parallel fsdp needs several processes, and MPS is one device that gloo/nccl "
                                  "cannot carry: train on CUDA (NCCL) or the CPU (gloo), or use ddp")
        if world < 2:
            raise TrainingStopped("training.parallel fsdp shards over several processes, and this run has one: "
                                  "add --nproc-per-node 2 (or more), or set training.parallel to auto")
        if shard_units(model, model_type) is None:
            raise TrainingStopped(f"training.parallel fsdp: model.type {model_type} has no sharding plan (gpt and resnet18/34/50 "
                                  "have one; a factory's model may define shard_units()): use training.parallel ddp")
        return "fsdp", "as set"
    if world < 2:
        return "single", "one process"
    if setting == "ddp":
        return "ddp", "as set"
    need, free = state_bytes(model, training), free_bytes(device, local_world)
    what = f"weights + gradients + {training.optimizer} state {_gb(need)}"
    if free is None or need <= HEADROOM * free:
        where = f"{_gb(free)} free on {device.type}" if free is not None else f"free memory of {device.type} unknown"
        return "ddp", f"auto: {what} fit one device ({where}, ddp while at most {HEADROOM:.0%})"
    if shard_units(model, model_type) is None:
        return "ddp", f"auto: {what} exceed {HEADROOM:.0%} of {_gb(free)} free, but model.type {model_type} has no sharding plan"
    return "fsdp", f"auto: {what} exceed {HEADROOM:.0%} of the {_gb(free)} free on one {device.type} device: sharded over {world} processes"


def group_units(units: list[nn.Module], min_params: int) -> list[list[nn.Module]]:
    """Consecutive units grouped until each group holds at least `min_params` parameters (the last
    group may hold fewer, and joins the one before it when it does)."""
    groups: list[list[nn.Module]] = []
    size = 0
    for unit in units:
        if not groups or size >= min_params:
            groups.append([])
            size = 0
        groups[-1].append(unit)
        size += sum(p.numel() for p in unit.parameters())
    if len(groups) > 1 and size < min_params:
        groups[-2].extend(groups.pop())
    return groups


def keep_gathered(model: nn.Module, training, precision: TrainPrecision, world: int, free: int | None) -> tuple[bool, str]:
    """(whether every unit keeps its gathered weights from its forward to its backward, the reason).

    Resharding after the forward frees a unit's full weights and gathers them again for the
    backward: one more all-gather per unit and step. Keeping them costs the whole model's weights
    in the compute dtype on every device (2 bytes a parameter in bf16) on top of the sharded state:
    kept while that sum fits HEADROOM of the free memory, as auto's ddp test counts. The last unit
    keeps its weights either way (its backward starts right after its forward)."""
    n = sum(p.numel() for p in model.parameters())
    full = n * (2 if precision in ("bf16", "fp16") else 4)
    sharded = state_bytes(model, training) // max(1, world)
    need = full + sharded
    if free is None:
        return False, f"resharded after the forward (free memory unknown; kept would add {_gb(full)} a device)"
    if need <= HEADROOM * free:
        return True, (f"weights kept gathered from forward to backward (+{_gb(full)} a device; with the sharded state "
                      f"{_gb(need)}, within {HEADROOM:.0%} of {_gb(free)} free)")
    return False, (f"resharded after the forward (keeping the weights gathered needs {_gb(need)} with the sharded state, "
                   f"over {HEADROOM:.0%} of {_gb(free)} free)")


def fsdp_plan(model: nn.Module, training, precision: TrainPrecision, world: int, free: int | None) -> tuple[int, bool, str]:
    """(min_unit_params for apply_fsdp, -1 for the whole model as one unit; reshard_after_forward; the reason).

    One unit while the model has at most WHOLE_MAX_PARAMS parameters and its gathered weights, its
    full gradients (in the compute dtype and in fp32 for the reduction) and the sharded state fit
    HEADROOM of the free memory: one all-gather before the forward, one reduce-scatter after the
    backward, and the step compiled as one graph. Otherwise blocks grouped into units of at least
    UNIT_MIN_PARAMS, the weights kept gathered from forward to backward where memory allows
    (keep_gathered)."""
    n = sum(p.numel() for p in model.parameters())
    compute = 2 if precision in ("bf16", "fp16") else 4
    whole = n * (2 * compute + 4) + state_bytes(model, training) // max(1, world)
    if n <= WHOLE_MAX_PARAMS and free is not None and whole <= HEADROOM * free:
        return -1, False, (f"one unit, the whole model ({_millions(n)} parameters, at most {WHOLE_MAX_PARAMS / 1e6:.0f}M): gathered "
                           f"weights and full gradients with the sharded state take {_gb(whole)}, within {HEADROOM:.0%} of "
                           f"{_gb(free)} free")
    keep, why = keep_gathered(model, training, precision, world, free)
    size = (f"{_millions(n)} parameters, over {WHOLE_MAX_PARAMS / 1e6:.0f}M" if n > WHOLE_MAX_PARAMS else
            f"the whole model as one unit needs {_gb(whole)}, over {HEADROOM:.0%} of {_gb(free)} free" if free is not None else
            "free memory unknown")
    return UNIT_MIN_PARAMS, not keep, f"units of at least {UNIT_MIN_PARAMS / 1e6:.0f}M parameters ({size}); {why}"


def apply_fsdp(model: nn.Module, units: list[nn.Module], device: torch.device, precision: TrainPrecision, world: int,
               compile_unit=None, reshard_after_forward: bool = True, min_unit_params: int = UNIT_MIN_PARAMS) -> str:
    """Shard each group of units (group_units), then the root (which gathers what the units leave:
    embeddings, the head). `compile_unit(module)` compiles each unit first (per block: the FSDP
    hooks stay outside the graphs). The last group never reshards after its forward (its backward
    follows at once, as torchtitan does); the others as `reshard_after_forward` says. The model's
    parameters become DTensors on `device`; build the optimizer after this."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device.type, (world,))
    kw: dict[str, Any] = {"mesh": mesh}
    if precision == "bf16":  # the gathered weights in bf16 (half the traffic), gradients reduced in fp32
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    groups = group_units(units, min_unit_params) if min_unit_params >= 0 else []
    for i, group in enumerate(groups):
        if compile_unit is not None:
            for unit in group:
                compile_unit(unit)
        last = i == len(groups) - 1
        fully_shard(group if len(group) > 1 else group[0], reshard_after_forward=reshard_after_forward and not last, **kw)
    fully_shard(model, **kw)
    sizes = sorted({len(g) for g in groups})
    plan = (f"{len(groups)} unit{'s' * (len(groups) > 1)} of {'-'.join(map(str, sizes))} block{'s' * (sizes[-1] > 1)} + root"
            if groups else "the root only (one unit)")
    return (f"{plan} over {world} processes" + (", bf16 weights, fp32 gradient reduction" if "mp_policy" in kw else ""))


def checkpoint_activations(units: list[nn.Module]) -> None:
    """training.activation_checkpointing full: each unit keeps only its input during the forward and
    recomputes its activations in the backward (about a third more compute, activations of one unit
    at a time). Non-reentrant checkpointing, so it composes with compile, DDP and FSDP; the forward
    is wrapped in place, so the state dict keeps its keys."""
    from functools import partial

    from torch.utils.checkpoint import checkpoint

    for unit in units:
        unit.forward = partial(checkpoint, unit.forward, use_reentrant=False)


def set_gradient_sync(model: nn.Module, mode: Parallel, sync: bool) -> None:
    """Accumulation: reduce the gradients on the last micro-batch only."""
    if mode == "ddp":
        model.require_backward_grad_sync = sync  # pyright: ignore[reportArgumentType] - DDP's flag, a plain attribute: Module.__setattr__'s stub takes tensors and modules
    elif mode == "fsdp":
        model.set_requires_gradient_sync(sync)  # pyright: ignore[reportCallIssue] - an FSDPModule's method (fully_shard changed the class): Module.__getattr__'s stub type (Tensor | Module)


def _millions(n: int) -> str:
    return f"{n / 1e6:.0f}M" if n >= 10_000_000 else f"{n / 1e6:.2g}M"


def _gb(n: int | None) -> str:
    return "?" if n is None else f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"
