"""Device memory as the trainer and the bench read it: flush the allocator's cache, read the peak."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from envkit.facts.model import TrainDevice


def empty_cache(device_type: TrainDevice) -> None:
    if device_type == "mps":
        torch.mps.empty_cache()
    elif device_type == "cuda":
        torch.cuda.empty_cache()


def peak_memory_mb(device_type: TrainDevice, device) -> float | None:
    """CUDA: the peak allocated since the last reset; MPS (no peak counter): what is allocated now;
    the CPU: None (the process's memory is not the model's)."""
    try:
        if device_type == "cuda":
            return torch.cuda.max_memory_allocated(device) / 2**20
        if device_type == "mps":
            return torch.mps.current_allocated_memory() / 2**20
    except Exception:  # noqa: BLE001 - a figure the backend cannot give is left out
        return None
    return None
