"""CIFAR-10 / CIFAR-100 from the official binary folders (the format: cifar_files.py), held in memory
as uint8 (150 MB for 50,000 images), with the standard training augmentation (random crop after
4 pixels of zero padding, horizontal flip) and per-channel normalisation.

Augmentation is drawn per epoch from a generator seeded by (run seed, epoch), one crop and flip per
image: like the batch order, a pure function of (seed, position), so a resumed run sees the same
crops and flips the uninterrupted run would have seen, whatever the number of DataLoader workers,
and data held on the device (on_device.py) takes an epoch's draws in one copy."""

from __future__ import annotations

import functools
import zlib

import torch
from torch.utils.data import Dataset

from envkit.errors import EnvkitError
from envkit.train.data import cifar_files
from envkit.train.data.bundle import DataBundle, label_entropy
from envkit.train.data.label_noise import flip_labels, note
from envkit.train.data.paths import resolve_path

PAD = 4


class CifarImages(Dataset):
    def __init__(self, pixels: torch.Tensor, labels: torch.Tensor, mean: torch.Tensor, std: torch.Tensor,
                 augment: bool, seed: int):
        self.pixels, self.labels = pixels, labels  # uint8 (N, 3, 32, 32); int64 (N,)
        self.mean, self.std = mean.view(1, 3, 1, 1), std.view(1, 3, 1, 1)
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
        return CifarImages(self.pixels.to(device), self.labels.to(device), self.mean.to(device), self.std.to(device),
                           self.augment, self.seed)

    def batch(self, indices) -> tuple[torch.Tensor, torch.Tensor]:
        """(normalised float images, labels) of these indices (a sampler's IndexBatch, or a list), on
        the images' device: the one-batch case of plan() and take()."""
        rows = torch.as_tensor(indices, dtype=torch.long).view(1, -1)
        return self.take(self.plan(rows, getattr(indices, "epoch", None))[0])

    def plan(self, rows: torch.Tensor, epoch: int | None) -> torch.Tensor:
        """(batches, 4, batch) on the images' device: the indices of each batch in `rows` and their
        crop offsets and flips, drawn on the host (every device sees the same ones) and copied in one
        go, however many batches (on_device.py plans many at once: no per-step copy or draw)."""
        if not self.augment:
            return rows.unsqueeze(1).to(self.pixels.device, non_blocking=True)
        if epoch is None:  # drawn with replacement: per batch, from its indices
            draws = torch.stack([self._draws(r) for r in rows], dim=1)
        else:
            draws = self._epoch_draws(epoch)[:, rows]
        return torch.cat([rows.unsqueeze(1), draws.permute(1, 0, 2)], dim=1).to(self.pixels.device, non_blocking=True)

    def take(self, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One batch of a plan: gathered, cropped, flipped and normalised as batched operations."""
        x = self.pixels[p[0]]
        if self.augment:
            x = crop_and_flip(x, p[1], p[2], p[3].bool(), PAD)
        # x * (1/255), not x / 255: CUDA divides by a scalar as a multiplication by its reciprocal, so
        # this is the one form every device computes to the same float
        x = (x.float().mul_(1 / 255) - self.mean) / self.std
        return x, self.labels[p[0]]

    def _epoch_draws(self, epoch: int) -> torch.Tensor:
        """(3, n): every image's crop offsets (top, left in the padded image) and flip for `epoch`,
        drawn from (seed, epoch): a resumed run, a DataLoader worker and the device all draw the
        same ones. Kept for the epoch in progress (a few hundred kB)."""
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


def crop_and_flip(x: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor, flip: torch.Tensor, pad: int) -> torch.Tensor:
    """Random crop after `pad` pixels of zero padding, then a horizontal flip where `flip`, for a
    whole batch as one gather (no loop over images): output pixel (i, j) of image k is padded
    pixel (dy[k] + i, dx[k] + j), or (dy[k] + i, dx[k] + w - 1 - j) when flipped."""
    b, c, h, w = x.shape
    padded = torch.nn.functional.pad(x, (pad, pad, pad, pad))  # zeros: black borders, as torchvision's RandomCrop
    k, ch, ar_h, ar_w = _grid(b, c, h, w, x.device)
    rows = dy.view(b, 1) + ar_h  # (b, h)
    cols = dx.view(b, 1) + torch.where(flip.view(b, 1), w - 1 - ar_w, ar_w)  # (b, w)
    return padded[k, ch, rows.view(b, 1, h, 1), cols.view(b, 1, 1, w)]


@functools.lru_cache(maxsize=8)
def _grid(b: int, c: int, h: int, w: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """The index ranges of a batch shape, made once per shape (four fewer launches a step on a GPU)."""
    return (torch.arange(b, device=device).view(b, 1, 1, 1), torch.arange(c, device=device).view(1, c, 1, 1),
            torch.arange(h, device=device), torch.arange(w, device=device))


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


def _load(files, kind: str, labels: str) -> tuple[torch.Tensor, torch.Tensor]:
    fmt = cifar_files.FORMATS[kind]
    raw, n = cifar_files.read_records(files, kind)
    table = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(n, fmt.record)
    at = fmt.classes[labels][0]
    return table[:, fmt.label_bytes:].reshape(n, 3, 32, 32).clone(), table[:, at].long()


def cifar(cfg, seed: int) -> DataBundle:
    d = cfg.values["dataset"]
    kind = d["type"]
    labels = d.get("labels", "fine") if kind == "cifar100" else "fine"
    if not d["path"]:
        raise EnvkitError(f"dataset type {kind} needs a path", where="dataset.path",
                          fix=f"point it at {cifar_files.FORMATS[kind].folder}/ (from {cifar_files.DOWNLOAD})")
    folder = cifar_files.check_folder(resolve_path(cfg, d["path"]), kind, where=f"dataset.path {d['path']}")
    fmt = cifar_files.FORMATS[kind]
    x, y = _load([folder / n for n in fmt.train], kind, labels)
    xv, yv = _load([folder / fmt.test], kind, labels)
    k = cifar_files.num_classes(kind, labels)
    notes = [f"{kind}: {len(y)} training and {len(yv)} test images, {k} {labels} classes, from {folder}"
             + ("" if d["augment"] else " (no augmentation)")]
    if d["label_noise"] > 0:
        y, flipped = flip_labels(y, d["label_noise"], k, seed)
        notes.append(note(flipped, len(y), d["label_noise"], seed))
    mean, std = channel_stats(x)
    counts = torch.bincount(y, minlength=k)
    val_counts = torch.bincount(yv, minlength=k)
    return DataBundle("classify", CifarImages(x, y, mean, std, d["augment"], seed), CifarImages(xv, yv, mean, std, False, seed),
                      {"num_classes": k, "in_channels": 3, "image_size": 32},
                      baseline_loss=label_entropy(counts), chance_accuracy=float(val_counts.max()) / len(yv), notes=notes)
