"""The process group of a torchrun-started trainer (one process per GPU, or per CPU slice)."""

from __future__ import annotations

import inspect
from typing import Any

import torch


def init_distributed(device: torch.device) -> None:
    """NCCL on CUDA, gloo on the CPU. On CUDA the group is bound to this process's GPU
    (`device_id=`, torch 2.3+): every collective, barrier() included, then knows its device, and
    torch stops warning "barrier(): using the device under current context" on each run."""
    import torch.distributed as dist

    if device.type == "cuda":
        kw: dict[str, Any] = {"device_id": device} if "device_id" in inspect.signature(dist.init_process_group).parameters else {}
        dist.init_process_group(backend="nccl", **kw)
    else:
        dist.init_process_group(backend="gloo")


def wrap_ddp(module: torch.nn.Module, device: torch.device, local_rank: int, bucket_mb: float, comm_dtype: str, log):
    """DistributedDataParallel around the training module (forward + loss).

    gradient_as_bucket_view: gradients live in DDP's all-reduce buckets, saving a copy of every
    gradient each step (and its memory). Under torch.compile, dynamo sees the active DDP module
    while it compiles (whether DDP wraps the compiled module or the other way round) and its
    DDPOptimizer splits the graph at bucket boundaries, so one bucket's all-reduce overlaps the
    backward of the next: bucket_mb sets how many graphs a step runs (GPT-2 small, profiled on
    2 x H200: 14 at 25 MB), each with its launch and fusion cost; the cuda-hopper profile's
    train.ddp_bucket_mb says what was measured. comm_dtype "bf16": the gradients are all-reduced in
    bfloat16 (torch's bf16_compress_hook: half the bytes on the wire, the result cast back to
    fp32); NCCL on CUDA only, elsewhere fp32 with a note."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    ddp = DDP(module, device_ids=[local_rank] if device.type == "cuda" else None, gradient_as_bucket_view=True,
              bucket_cap_mb=bucket_mb)
    if comm_dtype == "bf16":
        if device.type == "cuda":
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
            log("gradient all-reduce in bf16 (training.ddp_comm_dtype)")
        else:
            log(f"training.ddp_comm_dtype bf16 ignored on {device.type}: gloo all-reduces fp32")
    return ddp
