"""A file that carries the checksum of its own data, written after the data:
    <torch.save bytes> b"\nENVKIT-SHA256 " <64 hex digits> b"\n"
so a file truncated or altered later (a full disk, a copy cut short, bit rot) is detected and named.
Checkpoints (checkpoint.py) and sharded checkpoints' envkit.pt (sharded_checkpoint.py) are written so."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import torch

from envkit.fsutil import atomic_writer
from envkit.train.recovery import faults

TRAILER = b"\nENVKIT-SHA256 "
TRAILER_LEN = len(TRAILER) + 64 + 1


class CorruptCheckpoint(ValueError):
    """The file is not the one that was written (truncated or altered)."""


def write_verified(path: Path, obj: dict, fault=None) -> None:
    """torch.save(obj) and its checksum trailer, written atomically. `fault()` True: a disk that
    fills up halfway (tests)."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()
    trailer = TRAILER + hashlib.sha256(data).hexdigest().encode() + b"\n"

    with atomic_writer(path) as fh:  # a crash mid-save never leaves a half checkpoint
        if fault is not None and fault():
            fh.write(data[: len(data) // 2])  # a real partial temporary file, which must not survive
            raise faults.disk_full_error(path)
        fh.write(data)
        fh.write(trailer)


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


