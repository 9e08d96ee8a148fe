"""dataset.on_device: the training and validation sets held on the training device, each batch
gathered, cropped, flipped and normalised there as batched operations. The batches must be the
same floats as the DataLoader path's (so results and resume do not depend on the switch), and the
batched crop must be the crop a per-image loop makes."""

from __future__ import annotations

import json

import pytest
import torch

from cifar_fixture import write_cifar10
from conftest import has_cuda
from envkit.train.data.cifar import PAD, CifarImages, crop_and_flip, crop_columns, normalise
from envkit.config.config import load_config


def per_image_reference(x, dy, dx, flip, pad):
    """Pad, slice each image at its own offset, flip the flagged ones: one image at a time."""
    padded = torch.nn.functional.pad(x, (pad, pad, pad, pad))
    h, w = x.shape[-2:]
    out = []
    for k in range(len(x)):
        crop = padded[k, :, int(dy[k]):int(dy[k]) + h, int(dx[k]):int(dx[k]) + w]
        out.append(crop.flip(-1) if bool(flip[k]) else crop)
    return torch.stack(out)


def test_the_batched_crop_and_flip_is_the_per_image_crop_and_flip():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (64, 3, 32, 32), dtype=torch.uint8, generator=g)
    dy, dx = torch.randint(0, 2 * PAD + 1, (2, 64), generator=g)
    flip = torch.rand(64, generator=g) < 0.5
    assert 10 < int(flip.sum()) < 54 and set(dy.tolist()) == set(range(2 * PAD + 1))  # both flips, every offset
    padded = torch.nn.functional.pad(x, (PAD, PAD, PAD, PAD))
    first_col, step = crop_columns(dx, flip.long(), 32)
    order = torch.randperm(64, generator=g)  # images taken out of order, as a batch takes them
    assert torch.equal(crop_and_flip(padded, order, dy, first_col, step), per_image_reference(x[order], dy, dx, flip, PAD))


def test_normalising_by_lookup_is_the_arithmetic_to_the_bit():
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 256, (8, 3, 32, 32), dtype=torch.uint8, generator=g)
    mean, std = torch.tensor([0.49, 0.48, 0.45]), torch.tensor([0.25, 0.24, 0.26])
    table = CifarImages(x, torch.zeros(8, dtype=torch.long), mean, std, augment=False, seed=0).table
    assert torch.equal(normalise(x, table), (x.float() * (1 / 255) - mean.view(1, 3, 1, 1)) / std.view(1, 3, 1, 1))


def _cfg(folder, **dataset):
    return load_config(None, data={
        "experiment": {"seed": 5}, "dataset": {"type": "cifar10", "path": str(folder), "label_noise": 0.1, **dataset},
        "model": {"type": "cnn", "width": 4}, "device": {"type": "cpu"},
        "training": {"max_steps": 8, "batch_size": 16, "lr": 3e-3, "compile": False},
        "eval": {"every_steps": 4, "batches": 2}, "checkpoint": {"every_steps": 0},
        "logging": {"every_steps": 1, "progress": "none", "device_seconds": 0}})


def _rows(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _curve(run_dir):
    return [(r["step"], r.get("loss"), r.get("val_loss"), r.get("accuracy")) for r in _rows(run_dir)]


def test_on_device_trains_the_same_floats_as_the_dataloader_and_says_so(tmp_path):
    from envkit.train.run.loop import train

    folder = write_cifar10(tmp_path, per_file=20, test=40)
    runs = {}
    for setting in (True, False):
        run_dir = tmp_path / f"on_device_{setting}"
        run_dir.mkdir()
        train(_cfg(folder, on_device=setting), run_dir, resume="never", handle_signals=False)
        runs[setting] = run_dir
    assert _curve(runs[True]) == _curve(runs[False]) and len(_curve(runs[True])) == 10  # 8 steps, 2 evals
    log_on, log_off = ((runs[s] / "train.log").read_text() for s in (True, False))
    assert "dataset.on_device true: the data sets are in host memory" in log_on
    assert "cropped, flipped and normalised there as batched tensor operations" in log_on
    assert "dataset.on_device" not in log_off


def test_a_resumed_on_device_run_is_the_uninterrupted_run(tmp_path):
    from envkit.train.run.loop import train

    folder = write_cifar10(tmp_path, per_file=20, test=40)
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    straight.mkdir(), stopped.mkdir()
    train(_cfg(folder, on_device=True), straight, resume="never", handle_signals=False)
    assert train(_cfg(folder, on_device=True), stopped, resume="never", stop_after=3, handle_signals=False).status == "stopped"
    assert train(_cfg(folder, on_device=True), stopped, resume="auto", handle_signals=False).resumed_from == "step_00000003.pt"
    losses = [(r["step"], r["loss"]) for r in _rows(straight) if "loss" in r]
    assert [(r["step"], r["loss"]) for r in _rows(stopped) if "loss" in r] == losses and len(losses) == 8


def test_auto_keeps_the_data_on_the_host_when_it_does_not_fit_and_says_so(tmp_path, monkeypatch):
    """A device with 1 MB free (the sets take about 0.5 MB, more than a quarter of it)."""
    from envkit.train.data import on_device
    from envkit.train.run.loop import train

    monkeypatch.setattr(on_device, "free_bytes", lambda device_type, device: 2**20)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    result = train(_cfg(write_cifar10(tmp_path, per_file=20, test=40)), run_dir, resume="never", handle_signals=False)
    assert result.status == "completed"
    lines = [ln for ln in (run_dir / "train.log").read_text().splitlines() if "dataset.on_device" in ln]
    assert len(lines) == 1 and "auto: host memory: the sets take 0.6 MB, more than a quarter of the 1.0 MB free on cpu" in lines[0]


def test_on_device_is_refused_for_a_dataset_type_that_cannot_hold_it(tmp_path):
    from envkit.errors import EnvkitError

    with pytest.raises(EnvkitError, match="on_device"):
        load_config(None, data={"dataset": {"type": "tokens", "path": str(tmp_path), "on_device": True}})


@pytest.mark.gpu
@pytest.mark.skipif(not has_cuda(), reason="needs CUDA")
def test_on_cuda_the_batches_built_on_the_gpu_train_the_same_floats(tmp_path):
    from envkit.train.run.loop import train

    folder = write_cifar10(tmp_path, per_file=20, test=40)
    curves = []
    for setting in (True, False):
        run_dir = tmp_path / f"cuda_{setting}"
        run_dir.mkdir()
        cfg = _cfg(folder, on_device=setting)
        cfg = cfg.replace_many({"device.type": "cuda", "training.precision": "fp32"})
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
        train(cfg, run_dir, resume="never", handle_signals=False)
        curves.append(_curve(run_dir))
        assert ("held on cuda" in (run_dir / "train.log").read_text()) is setting
    assert curves[0] == curves[1]  # bit for bit: the same floats built on the GPU as on the host


@pytest.mark.parametrize(("width", "channels_last"), [(4, False), (8, True)])
def test_channels_last_auto_keeps_a_narrow_strided_cnn_contiguous_on_the_cpu(width, channels_last):
    """A width-4 cnn's 1x1 stride-2 shortcut corrupts the heap in channels-last backward on an AVX2
    CPU (torch 2.13.0+cpu): auto keeps it contiguous there; from 8 channels on it is channels-last."""
    from envkit.train.run.models import build_model

    cfg = load_config(None, data={"dataset": {"type": "synthetic", "task": "images"}, "model": {"type": "cnn", "width": width}})
    model = build_model(cfg, {"num_classes": 10, "in_channels": 3}, "cpu")
    assert model.stages[1].short[0].stride == (2, 2) and model.stages[1].short[0].in_channels == width  # the narrow one
    weight = model.stem[0].weight  # 3x3: channels-last or not tells apart (a 1x1 weight is both)
    assert weight.is_contiguous(memory_format=torch.channels_last) is channels_last
    x = torch.randn(4, 3, 32, 32)
    model(x.contiguous(memory_format=torch.channels_last) if channels_last else x).sum().backward()  # alive after it
