"""Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms", arXiv:2302.06675,
Algorithm 2), with decoupled weight decay. One step, for gradient g, momentum m, weights w:

    c = beta1 * m + (1 - beta1) * g          # interpolate
    w = w - lr * (sign(c) + wd * w)          # the update has the same size in every coordinate
    m = beta2 * m + (1 - beta2) * g          # then track the gradient

Because sign(c) is +-1 everywhere, updates are larger than AdamW's: the paper's advice is a
learning rate 3-10x smaller than AdamW's and a weight decay 3-10x larger (the same lr * wd)."""

from __future__ import annotations

import torch


class Lion(torch.optim.Optimizer):
    def __init__(self, params, lr: float = 1e-4, betas: tuple[float, float] = (0.9, 0.99), weight_decay: float = 0.0):
        if lr <= 0:
            raise ValueError(f"Lion: learning rate must be positive, got {lr}")
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"Lion: betas must be in [0, 1), got {betas}")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, (beta1, beta2), wd = group["lr"], group["betas"], group["weight_decay"]
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads = [p.grad for p in params]
            moms = []
            for p in params:
                state = self.state[p]
                if "exp_avg" not in state:
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                moms.append(state["exp_avg"])
            # the foreach ops run one kernel per group of tensors, not one per parameter (CUDA/MPS)
            if wd:
                torch._foreach_mul_(params, 1.0 - lr * wd)  # pyright: ignore[reportPrivateImportUsage] - torch's foreach ops are public, not in torch's __all__
            update = torch._foreach_lerp(moms, grads, 1.0 - beta1)  # pyright: ignore[reportPrivateImportUsage] - torch's foreach ops are public, not in torch's __all__; beta1 * m + (1 - beta1) * g
            torch._foreach_sign_(update)  # pyright: ignore[reportPrivateImportUsage] - torch's foreach ops are public, not in torch's __all__
            torch._foreach_add_(params, update, alpha=-lr)  # pyright: ignore[reportPrivateImportUsage] - torch's foreach ops are public, not in torch's __all__
            torch._foreach_lerp_(moms, grads, 1.0 - beta2)  # pyright: ignore[reportPrivateImportUsage] - torch's foreach ops are public, not in torch's __all__
        return loss
