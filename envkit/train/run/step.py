"""One optimizer step, top to bottom (as in nanoGPT's loop body): set the learning rate, run
`grad_accum` micro-batches of forward and backward, clip, step, zero the gradients.

The loss lives inside the module that torch.compile (and DDP) wrap (`LossModule`), so forward and
loss are one graph: with a real vocabulary (GPT-2's 50,304) the (B*T x V) fp32 logits are then
fused into the log-softmax instead of being materialised and read several times in eager mode
(measured on an H100, GPT-2 small: 0.77x of a plain loop with the loss outside, on par with it
inside; benchmarks/RESULTS.md).

What a step may raise (out of memory) and what a bad step leads to (NaN rollback) is handled in
envkit/train/run/recover.py; what the step works on is envkit/train/run/trainer.py (`Trainer`) and
envkit/train/run/state.py (`TrainState`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from envkit.train.run import timing


class LossModule(nn.Module):
    """`LossModule(model, accum)(x, y)` -> the mean cross-entropy / accum.

    The same operations in the same order as a plain loop (logits.float(), then the loss, then /
    accum), so an eager CPU run is bit for bit reproducible and resumes exactly."""

    def __init__(self, model: nn.Module, accum: int = 1):
        super().__init__()
        self.model, self.accum = model, accum

    def forward(self, x, y):
        return loss_of(self.model(x), y, self.accum)


def loss_of(logits, y, accum: int):
    return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1)) / accum


def head_loss(model, h, y, accum: int):
    """The model's head and the loss: one graph under compile_scope blocks, so the (B*T x V) logits
    stay fused into the log-softmax as they are when the whole step is one graph."""
    return loss_of(model.head(h), y, accum)


def has_blocks(model: nn.Module) -> bool:
    """Whether the model is embed -> repeated blocks -> head (the built-in gpt; a factory's model may be)."""
    blocks = getattr(model, "blocks", None)
    return (callable(getattr(model, "embed", None)) and callable(getattr(model, "head", None))
            and isinstance(blocks, nn.ModuleList) and len(blocks) > 1)


class BlockwiseLoss(LossModule):
    """LossModule's computation, the same operations in the same order, in three parts that
    compile_scope blocks compiles apart (speed.compile_blocks): the embedding (eager: two lookups
    and an add), each block (one compile, reused by all: the same code and shapes), the head with
    the loss (`self.head_loss`, a compiled function: not a module, so nothing is registered twice)."""

    def __init__(self, model: nn.Module, accum: int = 1):
        super().__init__(model, accum)
        self.head_loss = head_loss

    def forward(self, x, y):
        h = self.model.embed(x)  # pyright: ignore[reportCallIssue] - envkit's gpt's embedding: Module.__getattr__'s stub type (Tensor | Module)
        for block in self.model.blocks:  # pyright: ignore[reportGeneralTypeIssues] - its ModuleList: Module.__getattr__'s stub type (Tensor | Module)
            h = block(h)
        return self.head_loss(self.model, h, y, self.accum)


@dataclass
class StepOut:
    loss: torch.Tensor  # the step's mean loss, still on the device (reading it syncs)
    grad_norm: torch.Tensor | None  # before clipping; None when training.grad_clip is 0


def train_step(tr, state, lr: float) -> StepOut:
    """Optimizer step `state.step + 1`. The state moves only when the step is complete, so a step
    that raises (out of memory) leaves `state` where the step began."""
    for group in tr.optimizer.param_groups:
        group["lr"] = lr
    loss = forward_backward(tr, state.grad_accum)
    if tr.all_reduce is not None:  # ddp after the backward: the gradients averaged over the processes
        tr.all_reduce()
    tr.loss_sum.add_(loss)  # no sync: its finiteness is read at the step's checks (recover.py)
    grad_norm = None
    if tr.training.grad_clip > 0:
        tr.scaler.unscale_(tr.optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(tr.model.parameters(), tr.training.grad_clip)
        if hasattr(grad_norm, "full_tensor"):  # fsdp: the norm of all shards, a DTensor
            grad_norm = grad_norm.full_tensor()  # pyright: ignore[reportAttributeAccessIssue] - a DTensor (hasattr above), typed Tensor
    tr.scaler.step(tr.optimizer)
    tr.scaler.update()
    tr.optimizer.zero_grad(set_to_none=True)
    if timing.ON and timing.in_first_step:
        timing.mark("first step: clipping, optimizer step")
    state.step += 1
    state.batches += state.grad_accum  # counted when used: a checkpoint's data position
    tr.clock.tick()
    return StepOut(loss, grad_norm)


def forward_backward(tr, grad_accum: int) -> torch.Tensor:
    """`grad_accum` micro-batches; gradients accumulate, DDP syncs them on the last one only."""
    total = None
    for micro in range(grad_accum):
        x, y = tr.batches.take()
        if tr.parallel == "ddp" and tr.all_reduce is None:  # fsdp reduce-scatters every micro-batch: its gradients stay sharded
            tr.model.require_backward_grad_sync = micro == grad_accum - 1
        with tr.autocast:
            loss = tr.model(x, y)  # cross-entropy / grad_accum
        first = timing.ON and timing.in_first_step and micro == 0
        if first:
            timing.mark("first step: batch, forward (Dynamo's trace and guards, the forward graph loaded, its first run)")
        tr.batches.prefetch()  # the next batch is read and copied while the device runs this one
        tr.scaler.scale(loss).backward()
        if first:
            timing.mark("first step: backward (the backward graph loaded, its first run)")
        # a copy, not the output itself: under CUDA graphs the next replay overwrites the output
        total = loss.detach().clone() if total is None else total.add_(loss.detach())
    assert total is not None  # grad_accum >= 1 (the schema's minimum): one micro-batch at least
    return total
