"""ResNet-18/34/50 (He et al. 2015) for `model.type: resnet18|resnet34|resnet50`.

torchvision's definition when torchvision is installed and loads; otherwise envkit's own below,
built to the same layout (module names, parameter count, initialisation), so a checkpoint loads
into either. Two stems: `imagenet` (7x7 stride-2 convolution and a 3x3 max-pool, for 224px images)
and `cifar` (a 3x3 stride-1 convolution and no max-pool: 32x32 images keep their resolution into
the first stage, the form CIFAR papers and the common optimizer-comparison experiment train:
docs/knowledge/common-guides.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn as nn

if TYPE_CHECKING:
    from envkit.config.schema import ResnetStem

LAYOUTS = {18: ("basic", (2, 2, 2, 2)), 34: ("basic", (3, 4, 6, 3)), 50: ("bottleneck", (3, 4, 6, 3))}


class ResidualBlock(nn.Module):  # torchvision's BasicBlock
    expansion = 1

    def __init__(self, cin: int, width: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))


class BottleneckBlock(nn.Module):  # torchvision's Bottleneck ("ResNet v1.5": the stride on the 3x3)
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, width * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(width * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))


class StandardResNet(nn.Module):
    def __init__(self, depth: int, num_classes: int, in_channels: int = 3, stem: ResnetStem = "imagenet", base_width: int = 64):
        super().__init__()
        kind, counts = LAYOUTS[depth]
        block = ResidualBlock if kind == "basic" else BottleneckBlock
        self.conv1, self.maxpool = stem_layers(stem, in_channels, base_width)
        self.bn1 = nn.BatchNorm2d(base_width)
        self.relu = nn.ReLU(inplace=True)
        cin = base_width
        for i, (width, n) in enumerate(zip((base_width, 2 * base_width, 4 * base_width, 8 * base_width), counts)):
            stride = 1 if i == 0 else 2
            down = None
            if stride != 1 or cin != width * block.expansion:
                down = nn.Sequential(nn.Conv2d(cin, width * block.expansion, 1, stride, bias=False), nn.BatchNorm2d(width * block.expansion))
            blocks = [block(cin, width, stride, down)]
            cin = width * block.expansion
            blocks += [block(cin, width) for _ in range(n - 1)]
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)
        for m in self.modules():  # torchvision's initialisation
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))  # pyright: ignore[reportCallIssue] - layers set by setattr: Module.__getattr__'s stub type (Tensor | Module)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def stem_layers(stem: ResnetStem, in_channels: int, width: int = 64) -> tuple[nn.Module, nn.Module]:
    if stem == "cifar":
        conv = nn.Conv2d(in_channels, width, 3, 1, 1, bias=False)
        pool = nn.Identity()
    else:
        conv = nn.Conv2d(in_channels, width, 7, 2, 3, bias=False)
        pool = nn.MaxPool2d(3, 2, 1)
    nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
    return conv, pool


def build_resnet(depth: int, num_classes: int, in_channels: int = 3, stem: ResnetStem = "cifar", base_width: int = 64,
                 prefer_torchvision: bool = True) -> tuple[nn.Module, str]:
    """(model, where its definition came from). base_width below 64 (a narrow ResNet for quick
    checks and CI: 16 has 1/16 of the arithmetic) is envkit's own definition only."""
    if prefer_torchvision and base_width == 64:
        try:
            from torchvision import models  # pyright: ignore[reportMissingImports] - optional (envkit[vision]), not installed where CI type-checks
        except Exception:  # noqa: BLE001 - missing, or built for another torch: envkit's own definition
            models = None
        if models is not None:
            model = getattr(models, f"resnet{depth}")(num_classes=num_classes)
            if stem == "cifar" or in_channels != 3:
                model.conv1, pool = stem_layers(stem, in_channels)
                model.maxpool = pool
            return model, "torchvision"
    return StandardResNet(depth, num_classes, in_channels, stem, base_width), "envkit"
