"""The process group of a torchrun-started trainer (one process per GPU, or per CPU slice)."""

from __future__ import annotations

import inspect

import torch


def init_distributed(device: torch.device) -> None:
    """NCCL on CUDA, gloo on the CPU. On CUDA the group is bound to this process's GPU
    (`device_id=`, torch 2.3+): every collective, barrier() included, then knows its device, and
    torch stops warning "barrier(): using the device under current context" on each run."""
    import torch.distributed as dist

    if device.type == "cuda":
        kw = {"device_id": device} if "device_id" in inspect.signature(dist.init_process_group).parameters else {}
        dist.init_process_group(backend="nccl", **kw)
    else:
        dist.init_process_group(backend="gloo")
