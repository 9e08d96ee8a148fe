"""The optimizer (adamw, adam, sgd, lion) and the learning-rate schedule (warm-up, then cosine to
min_lr or constant), built from the training section. Weight decay applies to tensors of two or
more dimensions only (matrices, convolution kernels), never to biases and norm scales."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from envkit.config.origin import DEFAULT, Origin
from envkit.train.run.lion import Lion

if TYPE_CHECKING:
    from envkit.config.schema import Training
    from envkit.facts.model import TrainDevice

LION_BETA2 = 0.99  # the paper's default; AdamW's 0.95 in the schema would make Lion's momentum short-sighted


def _undecorated(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The function under torch's wrappers that import torch._dynamo (`_disable_dynamo`,
    `_use_grad_for_differentiable`, the step's profiling hook): each keeps it as `__wrapped__`."""
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return fn


class WithoutDynamo:
    """A torch.optim optimizer as it runs eagerly, minus the import of torch._dynamo: its
    add_param_group, zero_grad, state_dict and load_state_dict are wrapped to disable dynamo, and its
    step to break dynamo's graph, and each wrapper imports torch._dynamo on first use: as long again
    as importing torch, on the first step of every run, compile on or off. With compile off nothing
    traces the optimizer, so the functions under the wrappers are called (the step under no_grad, as
    its wrapper does for a non-differentiable optimizer): the same code, the same numbers. The
    class's step is still wrapped by Optimizer's profiling and hooks."""

    EAGER_STEP: ClassVar[Callable[..., Any]]  # the optimizer class's own step (each subclass names it)

    def add_param_group(self, param_group) -> None:
        return _undecorated(torch.optim.Optimizer.add_param_group)(self, param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        return _undecorated(torch.optim.Optimizer.zero_grad)(self, set_to_none)

    def state_dict(self):
        return _undecorated(torch.optim.Optimizer.state_dict)(self)

    def load_state_dict(self, state_dict) -> None:
        return _undecorated(torch.optim.Optimizer.load_state_dict)(self, state_dict)

    def step(self, closure=None):
        with torch.no_grad():
            return _undecorated(type(self).EAGER_STEP)(self, closure)


class EagerAdamW(WithoutDynamo, torch.optim.AdamW):
    EAGER_STEP = torch.optim.AdamW.step


class EagerAdam(WithoutDynamo, torch.optim.Adam):
    EAGER_STEP = torch.optim.Adam.step


class EagerSGD(WithoutDynamo, torch.optim.SGD):
    EAGER_STEP = torch.optim.SGD.step


class EagerLion(WithoutDynamo, Lion):
    EAGER_STEP = Lion.step


def build_optimizer(model: torch.nn.Module, T: Training, device_type: TrainDevice, origin: dict[str, Origin] | None = None) -> torch.optim.Optimizer:
    """`origin` (the config's value origins) tells a beta2 the user set from the schema's default.
    On the CPU without compile, torch's optimizers run without importing torch._dynamo (WithoutDynamo)."""
    from envkit.train.run.speed import want_compile

    eager = device_type == "cpu" and want_compile(T.compile, device_type) != "on"
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [{"params": decay, "weight_decay": T.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    kind, lr = T.optimizer, T.lr
    if kind in ("adamw", "adam"):
        fused = {"fused": True} if device_type == "cuda" else {}
        cls = torch.optim.AdamW if kind == "adamw" else torch.optim.Adam  # adam: weight decay as L2 in the gradient
        cls = {torch.optim.AdamW: EagerAdamW, torch.optim.Adam: EagerAdam}[cls] if eager else cls
        return cls(groups, lr=lr, betas=(T.beta1, T.beta2), **fused)
    if kind == "lion":
        beta2 = T.beta2 if (origin or {}).get("training.beta2", DEFAULT).kind != "default" else LION_BETA2
        return (EagerLion if eager else Lion)(groups, lr=lr, betas=(T.beta1, beta2))
    fused = {"fused": True} if device_type == "cuda" else {}  # one kernel for all parameters (torch >= 2.3)
    return (EagerSGD if eager else torch.optim.SGD)(groups, lr=lr, momentum=T.momentum, nesterov=T.nesterov and T.momentum > 0,
                                                   **fused)


def lr_at(step: int, T: Training) -> float:
    """Warm-up over warmup_steps, then cosine from lr to min_lr (default lr/10) at max_steps, or constant.
    With `training.epochs` set, max_steps has been resolved from the data (steps_for_epochs)."""
    if step < T.warmup_steps:
        return T.lr * (step + 1) / T.warmup_steps
    if T.schedule == "constant":
        return T.lr
    min_lr = T.min_lr if T.min_lr is not None else T.lr / 10
    span = max(1, T.max_steps - T.warmup_steps)
    ratio = min(1.0, (step - T.warmup_steps) / span)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (T.lr - min_lr)


def steps_for_epochs(epochs: int, batches_per_epoch: int, grad_accum: int) -> int:
    """Optimizer steps for `epochs` passes: an epoch is the sampler's full batches (the last partial
    one is dropped), and one step takes grad_accum of them."""
    return max(1, math.ceil(epochs * batches_per_epoch / grad_accum))
