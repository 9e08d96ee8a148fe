"""One probing step for `training.batch_size: auto`, in the trainer's process (child.py --probe):
train a single optimizer step at the config's batch through the trainer itself (train/run/loop.py:
the same model, data, precision, optimizer, accumulation and loss) and report the peak memory
it took, the device's memory, and the training set's size. Needs torch and the standard library.

Eager, not compiled: compiling takes tens of seconds per shape, and a compiled step keeps the same
or fewer activations than the eager one, so a batch chosen from the eager peak still fits.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sized
from pathlib import Path
from typing import TYPE_CHECKING, cast

from envkit.train.recovery import faults
from envkit.train.recovery.guards import resolve_device

if TYPE_CHECKING:
    from envkit.facts.model import TrainDevice


def probe_config(cfg):
    """The config as a probe runs it: one step at its batch, no eval, checkpoint, tracker or workers."""
    return cfg.replace_many({
        "training.compile": False, "training.epochs": None, "training.max_steps": 10**9, "training.empty_cache_every": 0,
        "eval.every_steps": 0, "checkpoint.every_steps": 0, "logging.progress": "none", "logging.trackers": [],
        "device.fallback_to_cpu": False, "device.fallback": "none",
        "dataloader.num_workers": 0, "dataloader.persistent_workers": False, "dataloader.prefetch_factor": None})


def device_memory_mb(device_type: TrainDevice) -> tuple[float | None, float | None]:
    """(total, free) in MB of what the run allocates from: the GPU's memory (CUDA), Metal's
    recommended working set (MPS: unified memory shared with macOS), the machine's RAM (CPU)."""
    import torch

    if device_type == "cuda":
        free, total = torch.cuda.mem_get_info()
        return total / 2**20, free / 2**20
    if device_type == "mps":
        rec = getattr(torch.mps, "recommended_max_memory", None)
        total = rec() / 2**20 if rec else None
        return total, total
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
    free = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                free = int(line.split()[1]) / 1024
    except OSError:
        pass
    return total, free


def peak_mb(device_type: TrainDevice) -> float:
    """CUDA: the allocator's peak; MPS (no peak counter): what the driver holds after the step, the
    caching allocator's high-water mark and so at least the peak; CPU: the process's peak RSS."""
    import torch

    if device_type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    if device_type == "mps":
        return torch.mps.driver_allocated_memory() / 2**20
    import resource

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024  # bytes on macOS, KB on Linux


def probe(cfg, run_dir: Path, torch_settings: dict | None = None) -> dict:
    """{"batch", "status": ok|oom|small-data, "peak_mb", "total_mb", "free_mb", "device", "train_examples"}."""
    import torch

    from envkit.train.data.datasets import build_data
    from envkit.train.run.loop import train

    cfg = probe_config(cfg)
    batch = int(cfg.training.batch_size)
    device_type = resolve_device(cfg.device.type, False, lambda _m: None)
    if device_type == "cuda":
        torch.cuda.init()
    total, free = device_memory_mb(device_type)
    # a DataBundle's sets are map-style, with a length (torch's Dataset does not declare __len__)
    examples = len(cast(Sized, build_data(cfg, seed=int(cfg.experiment.seed)).train))
    out = {"batch": batch, "device": device_type, "total_mb": total, "free_mb": free, "train_examples": examples}
    if batch > examples:
        return {**out, "status": "small-data"}
    try:
        train(cfg, run_dir, resume="never", handle_signals=False, split_oom=False,
              torch_settings=torch_settings, on_step=lambda **_: True)
    except Exception as exc:  # noqa: BLE001 - out of memory is the answer "does not fit"
        if not faults.is_oom(exc):
            raise
        return {**out, "status": "oom", "asked": faults.asked_for(exc)}
    return {**out, "status": "ok", "peak_mb": peak_mb(device_type)}
