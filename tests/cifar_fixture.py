"""Small CIFAR binary folders for the tests, written byte by byte from the format's description
(https://www.cs.toronto.edu/~kriz/cifar.html), not by envkit: a label byte (two for CIFAR-100:
coarse, fine) then 1,024 red, 1,024 green and 1,024 blue bytes, rows of 32 from the top left.

Each class has its own colour (a learnable signal a network finds in a few dozen steps), plus
noise; the labels cycle 0, 1, 2, ... so every class appears."""

from __future__ import annotations

import random
from pathlib import Path

CLASS_COLOURS = [(200, 30, 30), (30, 200, 30), (30, 30, 200), (200, 200, 30), (200, 30, 200),
                 (30, 200, 200), (240, 240, 240), (20, 20, 20), (120, 60, 0), (0, 120, 60)]


def image_bytes(label: int, rng: random.Random) -> bytes:
    r, g, b = CLASS_COLOURS[label % len(CLASS_COLOURS)]
    out = bytearray()
    for base in (r, g, b):
        out += bytes(max(0, min(255, base + rng.randint(-40, 40))) for _ in range(1024))
    return bytes(out)


def write_cifar10(root: Path, per_file: int = 100, test: int = 200, seed: int = 0) -> Path:
    """root/cifar-10-batches-bin/ with data_batch_1..5.bin (per_file records each) and test_batch.bin."""
    folder = root / "cifar-10-batches-bin"
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    for name, count in [(f"data_batch_{i}.bin", per_file) for i in range(1, 6)] + [("test_batch.bin", test)]:
        with open(folder / name, "wb") as f:
            for i in range(count):
                label = i % 10
                f.write(bytes([label]) + image_bytes(label, rng))
    return folder


def write_cifar100(root: Path, train: int = 300, test: int = 100, seed: int = 0) -> Path:
    """root/cifar-100-binary/ with train.bin and test.bin; fine label i % 100, coarse label fine // 5."""
    folder = root / "cifar-100-binary"
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    for name, count in (("train.bin", train), ("test.bin", test)):
        with open(folder / name, "wb") as f:
            for i in range(count):
                fine = i % 100
                f.write(bytes([fine // 5, fine]) + image_bytes(fine, rng))
    return folder
