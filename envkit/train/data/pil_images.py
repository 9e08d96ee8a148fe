"""One image file to a normalised tensor with Pillow alone: decode, crop, resize, flip, normalise.

Not torchvision: its wheels are built against one torch release (PyPI's against the CUDA build)
and do not load beside another (torch 2.13.0+cpu, for one), while Pillow has no tie to torch. The
crops are torchvision's: RandomResizedCrop (scale 0.08-1, aspect 3/4-4/3) for training,
Resize + CenterCrop (side 8/7 of the crop for validation, as 256 -> 224); each is one
`Image.resize` over a box of the decoded image, with Pillow's antialiasing bilinear filter."""

from __future__ import annotations

import math

import torch

from envkit.errors import EnvkitError
from envkit.train.data.bad_files import UnreadableFile

# ImageNet's per-channel statistics: what torchvision's pretrained models and most recipes use.
MEAN = torch.tensor((0.485, 0.456, 0.406)).view(3, 1, 1)
STD = torch.tensor((0.229, 0.224, 0.225)).view(3, 1, 1)
SCALE, RATIO = (0.08, 1.0), (3 / 4, 4 / 3)


def pillow():
    """PIL.Image, or one line saying how to install it."""
    try:
        from PIL import Image
    except ImportError:
        raise EnvkitError("dataset type imagefolder reads images with Pillow, which is not installed in the training environment",
                          where="dataset.type", fix="pip install pillow (or 'envkit[vision]') in the environment that trains") from None
    return Image


def decode(path: str):
    """The whole image, decoded, as RGB; UnreadableFile naming `path` when it does not decode (not an
    image, truncated, corrupt, unreadable: whatever Pillow raises is about this file)."""
    Image = pillow()
    try:
        with Image.open(path) as img:
            return img.convert("RGB")  # decodes every pixel: a truncated or corrupt file fails here, not later
    except Exception as exc:  # noqa: BLE001 - Pillow raises OSError, SyntaxError, ValueError, struct.error... per format
        raise UnreadableFile.of(path, exc) from exc


def center_box(width: int, height: int, fraction: float = 1.0) -> tuple[float, float, float, float]:
    """Resize(shorter side to s / fraction) + CenterCrop(s), as the box of the original image it reads."""
    side = min(width, height) * fraction
    left, top = (width - side) / 2, (height - side) / 2
    return left, top, left + side, top + side


def random_box(width: int, height: int, g: torch.Generator) -> tuple[int, int, int, int]:
    """RandomResizedCrop's box: an area of SCALE and an aspect of RATIO (log-uniform), ten tries,
    then the centre crop of the clamped aspect (torchvision's algorithm)."""
    area = width * height
    for _ in range(10):
        u = torch.rand(2, generator=g).tolist()
        target = area * (SCALE[0] + u[0] * (SCALE[1] - SCALE[0]))
        aspect = math.exp(math.log(RATIO[0]) + u[1] * (math.log(RATIO[1]) - math.log(RATIO[0])))
        w, h = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = int(torch.randint(0, height - h + 1, (1,), generator=g))
            left = int(torch.randint(0, width - w + 1, (1,), generator=g))
            return left, top, left + w, top + h
    ratio = width / height
    w, h = (width, round(width / RATIO[0])) if ratio < RATIO[0] else (round(height * RATIO[1]), height) if ratio > RATIO[1] else (width, height)
    left, top = (width - w) // 2, (height - h) // 2
    return left, top, left + w, top + h


def to_tensor(img, size: int, box, flip: bool) -> torch.Tensor:
    """The box of `img` resized to size x size, flipped left-right when `flip`, normalised (3, size, size)."""
    Image = pillow()
    out = img.resize((size, size), Image.BILINEAR, box=box)  # pyright: ignore[reportAttributeAccessIssue] - Pillow sets its filter constants in a loop, not in its stubs
    x = torch.frombuffer(bytearray(out.tobytes()), dtype=torch.uint8).view(size, size, 3).permute(2, 0, 1)
    if flip:
        x = x.flip(2)
    return (x.float().mul_(1 / 255) - MEAN) / STD
