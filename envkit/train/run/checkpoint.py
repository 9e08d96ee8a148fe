"""Checkpoints: model, optimizer, scaler, every RNG state, the data position and the config hash,
written to a temporary file and renamed (never half a file), keeping the last K. Loaded with
`torch.load(weights_only=True)`: a checkpoint is data, never code.

Each file ends with a checksum of its data, written after the data:
    <torch.save bytes> b"\nENVKIT-SHA256 " <64 hex digits> b"\n"
so a file truncated or altered later (a full disk, a copy cut short, bit rot) is detected and
named, and the previous valid checkpoint is used. Files without the trailer (written by an older
envkit) still load when torch can read them. Disk full while writing: one clear error, the
temporary file removed, the previous checkpoints untouched."""

from __future__ import annotations

import errno
import hashlib
import io
import random
import re
from pathlib import Path

import torch

from envkit.fsutil import atomic_writer
from envkit.train.recovery.guards import TrainingStopped

NAME = re.compile(r"^step_(\d+)\.pt$")
REQUIRED = ("step", "model", "optimizer", "rng", "data", "config_hash")
TRAILER = b"\nENVKIT-SHA256 "
TRAILER_LEN = len(TRAILER) + 64 + 1


class CorruptCheckpoint(ValueError):
    """The file is not the one that was written (truncated or altered)."""


class DiskFull(TrainingStopped):
    """No space left while writing a checkpoint; nothing was changed. Training stops (status
    "disk_full") with one line: going on without checkpoints would risk the work done."""

    def __init__(self, message: str):
        super().__init__(message, status="disk_full")


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
    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getvalue()
    trailer = TRAILER + hashlib.sha256(data).hexdigest().encode() + b"\n"
    from envkit.train.recovery import faults

    try:
        with atomic_writer(path) as fh:  # a crash mid-save never leaves a half checkpoint
            if faults.inject_disk_full(folder.parent, state["step"]):
                fh.write(data[: len(data) // 2])  # a real partial temporary file, which must not survive
                raise faults.disk_full_error(path)
            fh.write(data)
            fh.write(trailer)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            kept = [p.name for _, p in list_checkpoints(folder)[:1]]
            raise DiskFull(f"no space left on the device while writing checkpoint {path.name} in {folder}: "
                           f"nothing was written ({'previous checkpoint ' + kept[0] + ' kept' if kept else 'no earlier checkpoint'}); "
                           "free some space (or lower checkpoint.keep_last), then `envkit run` again resumes") from exc
        raise
    for _, old in list_checkpoints(folder)[keep_last:]:
        try:
            old.unlink()
        except FileNotFoundError:
            pass
    return path


def verified_bytes(path: Path) -> bytes:
    """The data of a checkpoint whose checksum matches; CorruptCheckpoint naming what is wrong."""
    raw = Path(path).read_bytes()
    tail = raw[-TRAILER_LEN:]
    if not tail.startswith(TRAILER):
        if b"ENVKIT-SHA256" in raw[-4096:]:
            raise CorruptCheckpoint("its checksum trailer is damaged (the file was altered)")
        return raw  # no trailer: an older envkit's checkpoint, or one cut short; torch.load decides
    data, want = raw[:-TRAILER_LEN], tail[len(TRAILER):-1].decode("ascii", "replace")
    got = hashlib.sha256(data).hexdigest()
    if got != want:
        raise CorruptCheckpoint(f"checksum mismatch (sha256 {got[:12]}... != {want[:12]}... written with it): the file was "
                                "altered or cut short after it was written")
    return data


def load(path: Path, map_location="cpu") -> dict:
    state = torch.load(io.BytesIO(verified_bytes(path)), map_location=map_location, weights_only=True)
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
                what = "corrupt" if isinstance(exc, CorruptCheckpoint) else "unreadable"
                log(f"warning: skipping {what} checkpoint {path.name} (in {path.parent}): {type(exc).__name__}: {exc}; trying the previous one")
    return None
