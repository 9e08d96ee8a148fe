"""CIFAR-10 / CIFAR-100 from the official binary folders (the format: envkit/config/cifar_files.py), held in memory
as uint8 (150 MB for 50,000 images; 240 MB padded for the crops), with the standard training augmentation (random crop after
4 pixels of zero padding, horizontal flip) and per-channel normalisation.

Augmentation is drawn per epoch from a generator seeded by (run seed, epoch), one crop and flip per
image: like the batch order, a pure function of (seed, position), so a resumed run sees the same
crops and flips the uninterrupted run would have seen, whatever the number of DataLoader workers,
and data held on the device (on_device.py) takes an epoch's draws in one copy."""

from __future__ import annotations

import functools
import zlib
from pathlib import Path

import torch
from torch.utils.data import Dataset

from envkit.errors import EnvkitError
from envkit.config import cifar_files
from envkit.train.data.bundle import DataBundle, label_entropy
from envkit.train.data.label_noise import flip_labels, note
from envkit.config.schema import CifarLabels

PAD = 4


class CifarImages(Dataset):
    """uint8 images and their labels; with `augment` the images are kept padded (PAD zeros on each
    side: 40x40 for CIFAR, 1.56x the bytes) so a crop is one gather, as airbench keeps them.
    Normalising is one lookup in a (3, 256) table made on the host: every device reads the same
    floats, whatever its arithmetic."""

    def __init__(self, pixels: torch.Tensor, labels: torch.Tensor, mean: torch.Tensor, std: torch.Tensor,
                 augment: bool, seed: int, padded: bool = False):
        if augment and not padded:
            pixels = torch.nn.functional.pad(pixels, (PAD, PAD, PAD, PAD))  # zeros: black borders, as torchvision's RandomCrop
        self.pixels, self.labels = pixels, labels  # uint8 (N, 3, H, W), padded with augment; int64 (N,)
        self.mean, self.std = mean.reshape(1, 3, 1, 1), std.reshape(1, 3, 1, 1)
        # x * (1/255), not x / 255: the one form that computes to the same float on every device (CUDA
        # divides by a scalar as a multiplication by its reciprocal); made once, here, on the host
        self.table = (torch.arange(256).float().mul_(1 / 255).view(1, 256) - mean.cpu().reshape(3, 1)) / std.cpu().reshape(3, 1)
        self.augment, self.seed = augment, seed
        self._drawn: tuple[int, torch.Tensor] | None = None  # (epoch, _epoch_draws of it)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        x, y = self.batch([i])
        return x[0], y[0]

    def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """A whole batch at once (the DataLoader calls this with the batch sampler's list)."""
        return list(zip(*self.batch(indices)))

    # -- the batch, wherever the images are (host memory, or the training device: on_device.py)
    @property
    def nbytes(self) -> int:
        return self.pixels.nbytes + self.labels.nbytes

    def to(self, device) -> "CifarImages":
        moved = CifarImages(self.pixels.to(device), self.labels.to(device), self.mean, self.std, self.augment, self.seed,
                            padded=True)
        moved.table = self.table.to(device)
        return moved

    def batch(self, indices) -> tuple[torch.Tensor, torch.Tensor]:
        """(normalised float images, labels) of these indices (a sampler's IndexBatch, or a list), on
        the images' device: the one-batch case of plan() and take()."""
        rows = torch.as_tensor(indices, dtype=torch.long).view(1, -1)
        return self.take(self.plan(rows, getattr(indices, "epoch", None))[0])

    def plan(self, rows: torch.Tensor, epoch: int | None) -> torch.Tensor:
        """(batches, 4, batch) on the images' device: the indices of each batch in `rows`, the crop's
        top row and first column in the padded image, and the column step (-1: flipped), drawn on
        the host (every device sees the same ones) and copied in one go, however many batches
        (on_device.py plans many at once: no per-step copy or draw)."""
        if not self.augment:
            return rows.unsqueeze(1).to(self.pixels.device, non_blocking=True)
        if epoch is None:  # drawn with replacement: per batch, from its indices
            draws = torch.stack([self._draws(r) for r in rows], dim=1)
        else:
            draws = self._epoch_draws(epoch)[:, rows]
        dy, dx, flip = draws  # each (batches, batch)
        first_col, step = crop_columns(dx, flip, self.pixels.shape[-1] - 2 * PAD)
        return torch.stack([rows, dy, first_col, step], dim=1).to(self.pixels.device, non_blocking=True)

    def take(self, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One batch of a plan: gathered (cropped and flipped in the same gather) and normalised."""
        idx = p[0]
        x = crop_and_flip(self.pixels, idx, p[1], p[2], p[3]) if self.augment else self.pixels[idx]
        return normalise(x, self.table), self.labels[idx]

    def _epoch_draws(self, epoch: int) -> torch.Tensor:
        """(3, n): every image's crop offsets (top, left in the padded image) and flip (0/1) for
        `epoch`, drawn from (seed, epoch): a resumed run, a DataLoader worker and the device all
        draw the same ones. Kept for the epoch in progress (a few hundred kB)."""
        if self._drawn is None or self._drawn[0] != epoch:
            g = torch.Generator().manual_seed(zlib.crc32(f"cifar augment {self.seed} {epoch}".encode()))
            n = len(self.labels)
            offsets = torch.randint(0, 2 * PAD + 1, (2, n), generator=g)
            flip = (torch.rand(n, generator=g) < 0.5).long().view(1, n)
            self._drawn = (epoch, torch.cat([offsets, flip]))
        return self._drawn[1]

    def _draws(self, idx: torch.Tensor) -> torch.Tensor:
        """(3, batch) for a batch drawn with replacement (no epoch), seeded by its indices."""
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + zlib.crc32(idx.numpy().tobytes()))
        b = len(idx)
        offsets = torch.randint(0, 2 * PAD + 1, (2, b), generator=g)
        flip = torch.rand(b, generator=g) < 0.5
        return torch.cat([offsets, flip.long().view(1, b)])


def crop_columns(dx: torch.Tensor, flip: torch.Tensor, w: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(first column, step) of each crop in the padded image: left to right from dx, or, flipped,
    right to left from dx + w - 1."""
    return dx + flip * (w - 1), 1 - 2 * flip


def crop_and_flip(padded: torch.Tensor, idx: torch.Tensor, top: torch.Tensor, first_col: torch.Tensor,
                  step: torch.Tensor) -> torch.Tensor:
    """The crops of images `idx` of a padded set, flipped where `step` is -1, as one gather (no loop
    over images): output pixel (i, j) of crop k is padded pixel (top[k] + i, first_col[k] + step[k] * j)
    of image idx[k]."""
    b, (c, hp, wp) = len(idx), padded.shape[1:]
    h, w = hp - 2 * PAD, wp - 2 * PAD
    ch, ar_h, ar_w = _grid(c, h, w, padded.device)
    rows = top.view(b, 1) + ar_h  # (b, h)
    cols = first_col.view(b, 1) + step.view(b, 1) * ar_w  # (b, w)
    return padded[idx.view(b, 1, 1, 1), ch, rows.view(b, 1, h, 1), cols.view(b, 1, 1, w)]


def normalise(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """uint8 (b, c, h, w) -> float, each value looked up in its channel's row of `table`."""
    return table[_grid(x.shape[1], 1, 1, x.device)[0], x.long()]


@functools.lru_cache(maxsize=8)
def _grid(c: int, h: int, w: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """The index ranges of a crop shape, made once per shape (fewer launches a step on a GPU)."""
    return torch.arange(c, device=device).view(1, c, 1, 1), torch.arange(h, device=device), torch.arange(w, device=device)


def channel_stats(pixels: torch.Tensor, chunk: int = 5000) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and std of uint8 images on the 0-1 scale, in float64 chunks (little memory)."""
    total = torch.zeros(3, dtype=torch.float64)
    squares = torch.zeros(3, dtype=torch.float64)
    for s in range(0, len(pixels), chunk):
        part = pixels[s:s + chunk].to(torch.float64).div_(255.0)
        total += part.sum(dim=(0, 2, 3))
        squares += part.square().sum(dim=(0, 2, 3))
    count = len(pixels) * pixels.shape[2] * pixels.shape[3]
    mean = total / count
    std = (squares / count - mean.square()).clamp_min(1e-12).sqrt()
    return mean.float(), std.float()


def _load(files, kind: cifar_files.CifarKind, labels: CifarLabels) -> tuple[torch.Tensor, torch.Tensor]:
    fmt = cifar_files.FORMATS[kind]
    raw, n = cifar_files.read_records(files, kind)
    table = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(n, fmt.record)
    at = fmt.classes[labels][0]
    return table[:, fmt.label_bytes:].reshape(n, 3, 32, 32).clone(), table[:, at].long()


def cifar(cfg, seed: int, kind: cifar_files.CifarKind) -> DataBundle:
    """`kind`: dataset.type, cifar10 or cifar100."""
    d = cfg.dataset
    labels = d.labels if kind == "cifar100" else "fine"
    if not d.path:
        raise EnvkitError(f"dataset type {kind} needs a path", where="dataset.path",
                          fix=f"point it at {cifar_files.FORMATS[kind].folder}/ (from {cifar_files.DOWNLOAD})")
    folder = cifar_files.check_folder(Path(d.path), kind, where=f"dataset.path {d.path}")
    fmt = cifar_files.FORMATS[kind]
    x, y = _load([folder / n for n in fmt.train], kind, labels)
    xv, yv = _load([folder / fmt.test], kind, labels)
    k = cifar_files.num_classes(kind, labels)
    notes = [f"{kind}: {len(y)} training and {len(yv)} test images, {k} {labels} classes, from {folder}"
             + ("" if d.augment else " (no augmentation)")]
    if d.label_noise > 0:
        y, flipped = flip_labels(y, d.label_noise, k, seed)
        notes.append(note(flipped, len(y), d.label_noise, seed))
    mean, std = channel_stats(x)
    counts = torch.bincount(y, minlength=k)
    val_counts = torch.bincount(yv, minlength=k)
    return DataBundle("classify", CifarImages(x, y, mean, std, d.augment, seed), CifarImages(xv, yv, mean, std, False, seed),
                      {"num_classes": k, "in_channels": 3, "image_size": 32},
                      baseline_loss=label_entropy(counts), chance_accuracy=float(val_counts.max()) / len(yv), notes=notes)
