"""CIFAR-10 / CIFAR-100 from the official binary folders (the format: cifar_files.py), held in memory
as uint8 (150 MB for 50,000 images), with the standard training augmentation (random crop after
4 pixels of zero padding, horizontal flip) and per-channel normalisation.

Augmentation is drawn per batch from a generator seeded by (run seed, the batch's indices): the
batch order is a pure function of (seed, position), so a resumed run sees the same crops and flips
the uninterrupted run would have seen, whatever the number of DataLoader workers."""

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

    def batch(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(normalised float images, labels) of these indices, on the images' device; the crops
        and flips are drawn on the host from (seed, indices), so every device sees the same ones."""
        idx = torch.as_tensor(indices, dtype=torch.long).view(1, -1)
        host = torch.cat([idx, self._draws(idx[0])]) if self.augment else idx  # one copy to the device, not two
        on = host.to(self.pixels.device, non_blocking=True)
        x = self.pixels[on[0]]
        if self.augment:
            x = crop_and_flip(x, on[1], on[2], on[3].bool(), PAD)
        # x * (1/255), not x / 255: CUDA divides by a scalar as a multiplication by its reciprocal, so
        # this is the one form every device computes to the same float
        x = (x.float().mul_(1 / 255) - self.mean) / self.std
        return x, self.labels[on[0]]

    def _draws(self, idx: torch.Tensor) -> torch.Tensor:
        """(3, batch): the crop's top and left offsets in the padded image, and the flip (0/1)."""
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
