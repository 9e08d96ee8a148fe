"""Data on the training device (`dataset.on_device`), as airbench and FFCV keep CIFAR on the GPU:
the training and validation sets are copied to the device once (uint8 images: 270 MB for
CIFAR-10 with the crop padding), and each batch is gathered, cropped, flipped and normalised there as batched tensor
operations, so no DataLoader worker process and no per-batch host-to-device copy of images stands
between the GPU and its next step. On a Mac the copy costs nothing (unified memory) and macOS's
spawned DataLoader workers are avoided; on the CPU the same batched code replaces the DataLoader's
per-sample collation.

A data set can live there when it has `nbytes`, `to(device)`, `plan(rows, epoch)` (the indices of
many batches and their augmentation draws, as one tensor on the device) and `take(slice) -> (x, y)`
(CifarImages, TensorPairs; `batch(indices)` is the one-batch plan the DataLoader path uses). Its
random augmentation is drawn on the host from (seed, epoch), so the batches are the same floats on
every path: a run resumes exactly, and switching `on_device` does not change what is trained.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from envkit.facts.model import TrainDevice

FRACTION = 0.25  # of the device's free memory (auto): the model, its optimizer state and activations need the rest
PLAN_BATCHES = 512  # batches planned (indices and draws copied to the device) at a time


def can_live_on_device(dataset) -> bool:
    return all(hasattr(dataset, name) for name in ("nbytes", "to", "batch", "plan", "take"))


def free_bytes(device_type: TrainDevice, device) -> int | None:
    """What the device has free now; None on the CPU (the sets are already in host memory)."""
    if device_type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device_type == "mps":  # the working set macOS recommends, less what this process's Metal driver holds
        return max(0, torch.mps.recommended_max_memory() - torch.mps.driver_allocated_memory())
    return None


def place(data, setting, device_type: TrainDevice, device, augment: bool, workers: int, log) -> bool:
    """Move data.train and data.val onto the device when `setting` (auto | True | False) says so
    and they fit; one line either way. True when batches are built on the device from now on."""
    if setting is False:
        return False
    if not (can_live_on_device(data.train) and can_live_on_device(data.val)):
        if setting is True:
            log(f"dataset.on_device true: a {type(data.train).__name__} data set cannot be held on the device; "
                "batches come from the DataLoader")
        return False
    need, free = data.train.nbytes + data.val.nbytes, free_bytes(device_type, device)
    if setting == "auto" and free is not None and need > FRACTION * free:
        log(f"dataset.on_device auto: host memory: the sets take {_mb(need)}, more than a quarter of the {_mb(free)} free on "
            f"{device_type}; batches come from the DataLoader")
        return False
    data.train, data.val = data.train.to(device), data.val.to(device)
    where = (f"held on {device_type} ({_mb(data.train.nbytes)} training + {_mb(data.val.nbytes)} validation"
             + (f", {100 * need / free:.1f}% of the {_mb(free)} free)" if free else ")"))
    if device_type == "cpu":
        where = f"in host memory ({_mb(need)})"
    work = "gathered, cropped, flipped and normalised" if augment else "gathered"
    log(f"dataset.on_device {'auto' if setting == 'auto' else 'true'}: the data sets are {where}; each batch is {work} there "
        f"as batched tensor operations" + (f" (dataloader.num_workers {workers} not used)" if workers else ", no DataLoader workers"))
    return True


def batches(dataset, sampler):
    """The batches of `sampler`, built where the data set lives: PLAN_BATCHES batches' indices and
    augmentation draws copied to the device at a time (an epoch of CIFAR at batch 128 in one
    1.6 MB copy), then each batch gathered from its slice: no host work a step but the launches."""
    for epoch, rows in sampler.epochs():
        for first in range(0, len(rows), PLAN_BATCHES):
            plan = dataset.plan(rows[first:first + PLAN_BATCHES], epoch)
            for p in plan:
                yield dataset.take(p)


def _mb(n: int) -> str:
    return f"{n / 2**20:,.1f} MB" if n < 2**30 else f"{n / 2**30:,.2f} GB"
