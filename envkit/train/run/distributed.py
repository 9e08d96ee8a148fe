"""The process group of a torchrun-started trainer (one process per GPU, or per CPU slice)."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import torch

from envkit.config.schema import CompileMode, DdpCommDtype, DdpReduce, DdpReduced
from envkit.train.run.speed import WITHOUT_CUDA_GRAPHS

if TYPE_CHECKING:
    from envkit.facts.model import TrainDevice


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


def wrap_ddp(module: torch.nn.Module, device: torch.device, local_rank: int, bucket_mb: float, comm_dtype: DdpCommDtype, log):
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


# training.ddp_reduce auto's bound on the gradients' bytes for after_backward. Measured on 4 x H200 (benchmarks/RESULTS.md,
# 2026-11-27, fourth session): ResNet-18 on CIFAR (45 MB of fp32 gradients, a launch-bound 3 ms step) trains 2.56x faster
# after the backward with CUDA graphs than with DDP's overlap; GPT-2 small (496 MB, a 34 ms step) 1.8% slower at 4
# processes and the same at 2, its all-reduce no longer hidden. The bound lies between the two, not measured closer.
AFTER_BACKWARD_MAX_BYTES = 128 * 2**20


def ddp_reduce_for(setting: DdpReduce, device_type: TrainDevice, compiling: bool, mode: CompileMode, gradient_bytes: int) -> tuple[DdpReduced, str]:
    """(overlap | after_backward, the words the run's ddp line adds). auto: after_backward where it keeps
    CUDA graphs (CUDA, compiled, a mode that captures them) and the all-reduce it cannot hide is small
    (AFTER_BACKWARD_MAX_BYTES), else overlap."""
    if setting != "auto":
        how = "after the backward" if setting == "after_backward" else "overlapping the backward (DDP)"
        return setting, f"gradients all-reduced {how} (training.ddp_reduce, as set)"
    graphs = device_type == "cuda" and compiling and mode in WITHOUT_CUDA_GRAPHS
    size = f"{gradient_bytes / 2**20:,.0f} MB of gradients"
    if graphs and gradient_bytes <= AFTER_BACKWARD_MAX_BYTES:
        return "after_backward", (f"gradients all-reduced after the backward (training.ddp_reduce auto: compile mode {mode} "
                                  f"keeps its CUDA graphs, and {size} take little time unhidden)")
    if graphs:
        return "overlap", (f"gradients all-reduced overlapping the backward (DDP; training.ddp_reduce auto: {size}, over "
                           f"{AFTER_BACKWARD_MAX_BYTES // 2**20} MB, are worth hiding behind the backward more than CUDA graphs)")
    return "overlap", "gradients all-reduced overlapping the backward (DDP)"


def broadcast_from_first(module: torch.nn.Module) -> None:
    """Every process starts from rank 0's weights and buffers (what DDP does when it wraps a module)."""
    import torch.distributed as dist

    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            dist.broadcast(tensor, src=0)


class GradientAllReduce:
    """training.ddp_reduce after_backward: data parallel without DDP's module. The step is compiled
    exactly as on one GPU (one forward graph, one backward graph, CUDA graphs where the mode has
    them); after the last micro-batch's backward, the gradients are averaged over the processes in
    flat buckets: each bucket is filled by one multi-tensor copy (cast to bf16 there when
    training.ddp_comm_dtype says so), all-reduced on NCCL's stream while the next one fills, and
    copied back. Nothing overlaps the backward, so the all-reduce's time is added to the step; DDP
    overlaps it but splits the compiled backward at every bucket and gives up CUDA graphs
    (benchmarks/RESULTS.md has both measured)."""

    def __init__(self, module: torch.nn.Module, world: int, bucket_mb: float, comm_dtype: DdpCommDtype, device: torch.device):
        import torch.distributed as dist

        self.world = world
        nccl = device.type == "cuda"
        self.op = dist.ReduceOp.AVG if nccl else dist.ReduceOp.SUM  # gloo has no average: a sum, then / world
        dtype = torch.bfloat16 if comm_dtype == "bf16" and nccl else None
        params = [p for p in module.parameters() if p.requires_grad]
        cap = max(1, int(bucket_mb * 2**20))
        self.buckets: list[list[torch.nn.Parameter]] = []
        size = cap
        for p in params:
            if size + p.numel() * p.element_size() > cap and size > 0:
                self.buckets.append([])
                size = 0
            self.buckets[-1].append(p)
            size += p.numel() * p.element_size()
        self.buffers = [torch.empty(sum(p.numel() for p in b), dtype=dtype or b[0].dtype, device=device) for b in self.buckets]
        self.views = [[v.view_as(p) for v, p in zip(buf.split([p.numel() for p in b]), b)] for b, buf in zip(self.buckets, self.buffers)]

    def __call__(self) -> None:
        import torch.distributed as dist

        works = []
        for bucket, views, buffer in zip(self.buckets, self.views, self.buffers):
            torch._foreach_copy_(views, [self._grad(p) for p in bucket])  # pyright: ignore[reportPrivateImportUsage] - torch's multi-tensor copy (one kernel a bucket), missing from its stub's exports
            # on NCCL's stream, after the copy: the next bucket's copy runs beside it
            works.append(dist.all_reduce(buffer, op=self.op, async_op=True))
        for bucket, views, buffer, work in zip(self.buckets, self.views, self.buffers, works):
            work.wait()  # the compute stream waits for NCCL's, the host does not
            if self.op != dist.ReduceOp.AVG:
                buffer.div_(self.world)
            torch._foreach_copy_([self._grad(p) for p in bucket], views)  # pyright: ignore[reportPrivateImportUsage] - as above

    @staticmethod
    def _grad(p: torch.nn.Parameter) -> torch.Tensor:
        if p.grad is None:  # a parameter this step did not use: zeros, as the other processes may have used it
            p.grad = torch.zeros_like(p)
        return p.grad
