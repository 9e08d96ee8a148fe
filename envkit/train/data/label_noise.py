"""Label noise (the robustness test of the common optimizer comparison, docs/knowledge/common-guides.md:
is an optimizer robust to wrong labels?): a seeded fraction of the training labels moved to another
class, uniformly among the other classes."""

from __future__ import annotations

import torch


def flip_labels(labels: torch.Tensor, fraction: float, num_classes: int, seed: int) -> tuple[torch.Tensor, int]:
    """(new labels, how many changed). Exactly round(fraction * n) labels change, each to a class
    other than its own; the same seed flips the same examples to the same classes."""
    n = len(labels)
    count = int(round(fraction * n))
    if count == 0 or num_classes < 2:
        return labels, 0
    g = torch.Generator().manual_seed(seed * 1_000_033 + 7)  # its own stream: the batch order is not shifted
    which = torch.randperm(n, generator=g)[:count]
    shift = torch.randint(1, num_classes, (count,), generator=g)  # 1..k-1: never back to the same class
    out = labels.clone()
    out[which] = (labels[which] + shift) % num_classes
    return out, count


def note(count: int, n: int, fraction: float, seed: int) -> str:
    return f"label noise: {count} of {n} training labels ({fraction:.0%}) moved to another class (seed {seed})"
