"""Checkpoints: model, optimizer, scaler, every RNG state, the data position and the config hash,
written to a temporary file and renamed (never half a file), keeping the last K. Loaded with
`torch.load(weights_only=True)`: a checkpoint is data, never code."""

from __future__ import annotations

import random
import re
from pathlib import Path

import torch

from envkit.fsutil import atomic_writer

NAME = re.compile(r"^step_(\d+)\.pt$")
REQUIRED = ("step", "model", "optimizer", "rng", "data", "config_hash")


def rng_state() -> dict:
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    if hasattr(torch, "mps") and torch.backends.mps.is_available():
        try:
            state["mps"] = torch.mps.get_rng_state()
        except Exception:  # noqa: BLE001 - older torch
            pass
    return state


def set_rng_state(state: dict) -> None:
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "mps" in state and hasattr(torch, "mps") and torch.backends.mps.is_available():
        torch.mps.set_rng_state(state["mps"])


def list_checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """(step, path), newest first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := NAME.match(p.name))]
    return sorted(found, reverse=True)


def save(folder: Path, state: dict, keep_last: int) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"step_{state['step']:08d}.pt"
    with atomic_writer(path) as fh:  # a crash mid-save never leaves a half checkpoint
        torch.save(state, fh)
    for _, old in list_checkpoints(folder)[keep_last:]:
        try:
            old.unlink()
        except FileNotFoundError:
            pass
    return path


def load(path: Path, map_location="cpu") -> dict:
    state = torch.load(path, map_location=map_location, weights_only=True)
    missing = [k for k in REQUIRED if k not in state]
    if missing:
        raise ValueError(f"not an envkit checkpoint (missing {', '.join(missing)})")
    return state


def newest_valid(folder: Path, map_location="cpu", log=None) -> tuple[Path, dict] | None:
    """The newest checkpoint that loads; unreadable ones are reported and skipped."""
    for _, path in list_checkpoints(folder):
        try:
            return path, load(path, map_location)
        except Exception as exc:  # noqa: BLE001 - a truncated or foreign file: try the previous one
            if log:
                log(f"skipping unreadable checkpoint {path.name}: {type(exc).__name__}: {exc}")
    return None
