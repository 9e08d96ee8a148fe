"""Validation: fixed batches spread evenly over the validation set (every eval sees the same
examples), the mean cross-entropy, and accuracy for classifiers (or the data set's own scorer)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def val_batches(val, batch_size: int, n_batches: int) -> list[list[int]]:
    """Fixed validation batches, evenly spread over the set."""
    n = min(len(val), batch_size * n_batches)
    idx = torch.linspace(0, len(val) - 1, steps=n).long().tolist() if n else []
    return [idx[i:i + batch_size] for i in range(0, len(idx), batch_size)]


@torch.no_grad()
def evaluate(model, batches, data, device, autocast) -> tuple[float, float | None]:
    """(validation loss, accuracy or None)."""
    from torch.utils.data import default_collate

    was_training = model.training
    model.eval()
    total, count, correct, seen = 0.0, 0, 0, 0
    for idx in batches:
        x, y = data.val.batch(idx) if hasattr(data.val, "batch") else default_collate([data.val[i] for i in idx])
        x, y = x.to(device), y.to(device)
        with autocast:
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1), reduction="sum")
        total += float(loss)
        count += y.numel()
        if data.kind == "classify":
            correct += int((logits.argmax(-1) == y).sum())
            seen += y.numel()
    acc = correct / seen if seen else None
    if data.scorer is not None:
        acc = data.scorer(model, device, autocast).get("accuracy", acc)
    if was_training:
        model.train()
    return total / max(1, count), acc
