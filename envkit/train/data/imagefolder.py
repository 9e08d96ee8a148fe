"""`dataset.type: imagefolder`: a class-per-folder tree (DIR/train/<class>/*.jpg and DIR/val/<class>/...),
laid out and ordered as torchvision's ImageFolder reads it, decoded with Pillow (data/pil_images.py).

An image file that does not decode (`dataset.on_bad_file`) is found when it is read, not by a pass
over the files before training: a pass that decodes every image costs an epoch of decoding before
the first step (hours on ImageNet), and one that only opens each file (Pillow's `verify`) misses a
JPEG whose pixel data is corrupt, so the check at load would be needed anyway. `stop` ends the run
with one line naming the file; `skip` replaces its sample by the next readable image of the set
(index i+1, i+2, ... wrapping around: the same for any number of workers, and the batch keeps its
shape), and the trainer counts the files skipped (data/bad_files.py).

Augmentation is drawn per batch from a generator seeded by (run seed, the batch's indices): a
resumed run sees the crops and flips the uninterrupted run would have seen."""

from __future__ import annotations

import os
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch.utils.data import Dataset

from envkit.errors import EnvkitError
from envkit.train.data import pil_images
from envkit.train.data.bad_files import SEPARATOR, SkippedFiles, UnreadableFile
from envkit.train.data.bundle import DataBundle, label_entropy
from envkit.train.data.label_noise import flip_labels, note

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

SPLITS = ({"train"}, {"val", "validation", "test"})
EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")  # torchvision's IMG_EXTENSIONS
VAL_FRACTION = 7 / 8  # validation: Resize(size * 8/7) + CenterCrop(size), the usual 256 -> 224


class FolderImages(Dataset):
    """(normalised image, label) per file. `crop`: "random" (random resized crop and flip), "center"
    (Resize + CenterCrop) or "val" (the same from 8/7 of the size). `skipped`: where files skipped in
    this process are tallied (None: the bad file stops the run)."""

    def __init__(self, samples: list[tuple[str, int]], size: int, crop: str, seed: int, skipped: SkippedFiles | None):
        self.samples, self.size, self.crop, self.seed, self.skipped = samples, size, crop, seed, skipped

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        x, y, _ = self.__getitems__([i])[0]
        return x, y

    def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, int, str]]:
        """A batch, in a DataLoader worker or the trainer's process: each sample carries the paths it
        skipped to reach a readable image (SEPARATOR between them), for the trainer to tally."""
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + zlib.crc32(",".join(map(str, indices)).encode()))
        return [self._sample(int(i), g) for i in indices]

    def batch(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(x, y) decoded in this process (validation, evaluate.py), its skipped files tallied here."""
        samples = self.__getitems__(indices)
        if self.skipped is not None:
            for _, _, joined in samples:
                self.skipped.add(joined)
        return torch.stack([x for x, _, _ in samples]), torch.tensor([y for _, y, _ in samples])

    def _sample(self, i: int, g: torch.Generator) -> tuple[torch.Tensor, int, str]:
        skipped = []
        n = len(self.samples)
        for k in range(n):
            path, label = self.samples[(i + k) % n]
            try:
                img = pil_images.decode(path)
            except UnreadableFile:
                if self.skipped is None:
                    raise
                skipped.append(path)
                continue
            return self._tensor(img, g), label, SEPARATOR.join(skipped)
        first = self.samples[i][0]
        raise UnreadableFile.of(first, OSError(f"not one of the {n} images of its set decodes"),
                                fix="check the folder's files (do they open in an image viewer?)")

    def _tensor(self, img: PILImage, g: torch.Generator) -> torch.Tensor:
        if self.crop == "random":
            box, flip = pil_images.random_box(*img.size, g), bool(torch.rand((), generator=g) < 0.5)
        else:
            box, flip = pil_images.center_box(*img.size, VAL_FRACTION if self.crop == "val" else 1.0), False
        return pil_images.to_tensor(img, self.size, box, flip)


def _split(root: Path, names: set[str], where: str) -> Path:
    for name in sorted(names):
        if (root / name).is_dir():
            return root / name
    raise EnvkitError(f"no {' or '.join(sorted(names))}/ folder in {root}", where=where,
                      fix="lay the images out as DIR/train/<class>/*.jpg and DIR/val/<class>/*.jpg")


def scan(folder: Path, where: str) -> tuple[list[str], list[tuple[str, int]]]:
    """(classes, [(path, label)]): the class folders in name order, each one's image files in the order
    torchvision's ImageFolder lists them (sorted walk, links followed), labelled by class index."""
    try:
        classes = sorted(entry.name for entry in os.scandir(folder) if entry.is_dir())
    except OSError as exc:
        raise EnvkitError(f"cannot read the image folder: {exc}", where=where) from None
    if not classes:
        raise EnvkitError(f"{folder} holds no class folders", where=where, fix="lay the images out as DIR/train/<class>/*.jpg")
    samples = []
    for label, name in enumerate(classes):
        found = [(os.path.join(top, file), label) for top, _, files in sorted(os.walk(folder / name, followlinks=True))
                 for file in sorted(files) if file.lower().endswith(EXTENSIONS)]
        if not found:
            raise EnvkitError(f"class folder {folder / name} holds no image files ({', '.join(EXTENSIONS)})", where=where,
                              fix="put its images in, or remove the empty folder")
        samples += found
    return classes, samples


def imagefolder(cfg, seed: int) -> DataBundle:
    d = cfg.dataset
    where = f"dataset.path {d.path}"
    if not d.path:
        raise EnvkitError("dataset type imagefolder needs a path (a folder with train/ and val/)", where="dataset.path")
    pil_images.pillow()  # missing: one line now, not in a worker at the first batch
    root = Path(d.path)
    size = d.image_size
    classes, train_samples = scan(_split(root, SPLITS[0], where), where)
    val_classes, val_samples = scan(_split(root, SPLITS[1], where), where)
    if classes != val_classes:
        raise EnvkitError(f"train/ has classes {classes[:5]}..., val/ {val_classes[:5]}...: they must match", where=where)
    k = len(classes)
    y = torch.tensor([label for _, label in train_samples], dtype=torch.long)
    notes = [f"imagefolder: {len(train_samples)} training and {len(val_samples)} validation images, {k} classes, {size}px, from {root}"]
    if d.label_noise > 0:
        y, flipped = flip_labels(y, d.label_noise, k, seed)
        train_samples = [(path, int(label)) for (path, _), label in zip(train_samples, y.tolist())]
        notes.append(note(flipped, len(y), d.label_noise, seed))
    skipped = SkippedFiles() if d.on_bad_file == "skip" else None
    train = FolderImages(train_samples, size, "random" if d.augment else "center", seed, skipped)
    val = FolderImages(val_samples, size, "val", seed, skipped)

    def check_batch(batch):
        """In the trainer's process: the paths the batch's samples skipped go into the tally."""
        x, labels, paths = batch
        if skipped is not None:
            for joined in paths:
                skipped.add(joined)
        return x, labels

    counts = torch.bincount(y, minlength=k)
    val_counts = torch.bincount(torch.tensor([label for _, label in val_samples], dtype=torch.long), minlength=k)
    return DataBundle("classify", train, val, {"num_classes": k, "in_channels": 3, "image_size": size},
                      baseline_loss=label_entropy(counts), chance_accuracy=float(val_counts.max()) / max(1, len(val_samples)),
                      check_batch=check_batch, skipped=skipped, notes=notes)
