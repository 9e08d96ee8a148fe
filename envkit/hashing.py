"""Hashing of files too big to read whole: wheels, checkpoint shards, data files."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: Path) -> str:
    """The sha256 of a file, read in 1 MiB blocks (wheels, checkpoint shards: never whole in memory)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
