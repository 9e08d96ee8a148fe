"""`dataset.type: imagefolder`: a class-per-folder tree (DIR/train/<class>/*.jpg and DIR/val/<class>/...)
read through torchvision's ImageFolder, an optional extra (`pip install 'envkit[vision]'`)."""

from __future__ import annotations

import math

import torch

from envkit.errors import EnvkitError
from envkit.train.data.bundle import DataBundle, label_entropy
from envkit.train.data.label_noise import flip_labels, note
from envkit.train.data.paths import resolve_path

# ImageNet's per-channel statistics: what torchvision's pretrained models and most recipes use.
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
SPLITS = ({"train"}, {"val", "validation", "test"})


def _torchvision():
    try:
        import torchvision  # noqa: F401
        from torchvision import datasets, transforms
    except Exception as exc:  # noqa: BLE001 - missing, or built for another torch (its operators fail to load)
        raise EnvkitError(f"dataset type imagefolder needs torchvision, which {'is not installed' if isinstance(exc, ImportError) else 'does not load here'} "
                          f"({type(exc).__name__})", where="dataset.type",
                          fix=f"pip install 'envkit[vision]' (torchvision {'built for this torch' if not isinstance(exc, ImportError) else 'matching your torch'})")
    return datasets, transforms


def _split(root, names: set[str], where: str):
    for name in sorted(names):
        if (root / name).is_dir():
            return root / name
    raise EnvkitError(f"no {' or '.join(sorted(names))}/ folder in {root}", where=where,
                      fix="lay the images out as DIR/train/<class>/*.jpg and DIR/val/<class>/*.jpg")


def imagefolder(cfg, seed: int) -> DataBundle:
    d = cfg.values["dataset"]
    where = f"dataset.path {d['path']}"
    if not d["path"]:
        raise EnvkitError("dataset type imagefolder needs a path (a folder with train/ and val/)", where="dataset.path")
    datasets, T = _torchvision()
    root = resolve_path(cfg, d["path"])
    size = d["image_size"]
    norm = [T.ToTensor(), T.Normalize(MEAN, STD)]
    train_tf = ([T.RandomResizedCrop(size), T.RandomHorizontalFlip()] if d["augment"] else [T.Resize(size), T.CenterCrop(size)]) + norm
    val_tf = [T.Resize(math.ceil(size * 8 / 7)), T.CenterCrop(size)] + norm  # 256 -> 224, the usual ratio
    try:
        train = datasets.ImageFolder(str(_split(root, SPLITS[0], where)), transform=T.Compose(train_tf))
        val = datasets.ImageFolder(str(_split(root, SPLITS[1], where)), transform=T.Compose(val_tf))
    except (FileNotFoundError, OSError) as exc:
        raise EnvkitError(f"cannot read the image folders: {exc}", where=where)
    if train.classes != val.classes:
        raise EnvkitError(f"train/ has classes {train.classes[:5]}..., val/ {val.classes[:5]}...: they must match", where=where)
    k = len(train.classes)
    y = torch.tensor(train.targets, dtype=torch.long)
    notes = [f"imagefolder: {len(train)} training and {len(val)} validation images, {k} classes, {size}px, from {root}"]
    if d["label_noise"] > 0:
        y, flipped = flip_labels(y, d["label_noise"], k, seed)
        train.targets = y.tolist()
        train.samples = [(path, int(label)) for (path, _), label in zip(train.samples, train.targets)]
        notes.append(note(flipped, len(y), d["label_noise"], seed))
    counts = torch.bincount(y, minlength=k)
    val_counts = torch.bincount(torch.tensor(val.targets, dtype=torch.long), minlength=k)
    return DataBundle("classify", train, val, {"num_classes": k, "in_channels": 3, "image_size": size},
                      baseline_loss=label_entropy(counts), chance_accuracy=float(val_counts.max()) / max(1, len(val)), notes=notes)
