"""Single-file checkpoints (one process or ddp), the Checkpointer's first backend (checkpointer.py
names, lists, keeps and chooses them): model, optimizer, scaler, every RNG state, the data position
and the config hash in one `step_XXXXXXXX.pt`, written by rank 0 to a temporary file and renamed
(never half a file). Loaded with `torch.load(weights_only=True)`: a checkpoint is data, never code.

Each file ends with a checksum of its data, written after the data:
    <torch.save bytes> b"\nENVKIT-SHA256 " <64 hex digits> b"\n"
so a file truncated or altered later (a full disk, a copy cut short, bit rot) is detected and
named, and the previous valid checkpoint is used. Files without the trailer (written by an older
envkit) still load when torch can read them. Disk full while writing: the temporary file is
removed, the previous checkpoints untouched."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import torch

from envkit.train.run.verified_file import verified_bytes, write_verified

SUFFIX = ".pt"
REQUIRED = ("step", "model", "optimizer", "rng", "data", "config_hash")


def path_for(folder: Path, step: int) -> Path:
    return Path(folder) / f"step_{step:08d}{SUFFIX}"


def save(path: Path, contents: dict, fault: Callable[[], bool] | None = None) -> None:
    """`contents` into `path`, atomically, with its checksum trailer; `fault()` True: a disk that
    fills up halfway (the tests' injection)."""
    write_verified(path, contents, fault=fault)


def load(path: Path, map_location="cpu") -> dict:
    """A checkpoint file's contents; CorruptCheckpoint when its checksum does not match, ValueError
    when it is not an envkit checkpoint."""
    state = torch.load(io.BytesIO(verified_bytes(path)), map_location=map_location, weights_only=True)
    missing = [k for k in REQUIRED if k not in state]
    if missing:
        raise ValueError(f"not an envkit checkpoint (missing {', '.join(missing)})")
    return state
