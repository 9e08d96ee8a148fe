"""CIFAR-10/100 binary readers, bad files, label noise, augmentation, ImageFolder without Pillow and
`envkit init cifar10`. The folders are written by tests/cifar_fixture.py from the published format,
so what the reader returns is checked against bytes the test chose, not against envkit."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cifar_fixture import write_cifar10, write_cifar100
from conftest import envkit
from envkit.errors import EnvkitError
from envkit.train.data.datasets import build_data
from envkit.config.config import load_config


def config(path: Path, dtype: str = "cifar10", **dataset):
    return load_config(None, data={"dataset": {"type": dtype, "path": str(path), **dataset}, "model": {"type": "resnet18"}})


def raw_image(cfg_data, x: torch.Tensor) -> torch.Tensor:
    """Undo the normalisation: back to 0-255."""
    ds = cfg_data.train
    return (x * ds.std[0] + ds.mean[0]) * 255.0


def test_cifar10_reads_every_record_with_its_label_and_pixels(tmp_path):
    folder = write_cifar10(tmp_path, per_file=20, test=30)
    data = build_data(config(folder, augment=False), seed=0)
    assert (len(data.train), len(data.val), data.info["num_classes"]) == (100, 30, 10)
    # the fixture writes labels 0..9 cycling in every file, each class in its own colour
    labels = [int(data.train[i][1]) for i in range(len(data.train))]
    assert labels == [i % 10 for i in range(20)] * 5
    # records read back exactly: record r of data_batch_f is training image (f - 1) * 20 + r; the
    # bytes after the label are the red plane, then green, then blue, rows from the top left
    for f, r in ((1, 0), (1, 7), (2, 3), (5, 19)):
        raw = (folder / f"data_batch_{f}.bin").read_bytes()[r * 3073:(r + 1) * 3073]
        want = torch.tensor(list(raw[1:]), dtype=torch.float32).view(3, 32, 32)
        x, y = data.train[(f - 1) * 20 + r]
        assert int(y) == raw[0]
        assert torch.allclose(raw_image(data, x), want, atol=1e-3)
    x, y = data.val[11]
    raw = (folder / "test_batch.bin").read_bytes()[11 * 3073:12 * 3073]
    assert int(y) == raw[0] and torch.allclose(raw_image(data, x), torch.tensor(list(raw[1:]), dtype=torch.float32).view(3, 32, 32), atol=1e-3)


def test_cifar10_accepts_the_parent_folder_of_the_archive(tmp_path):
    write_cifar10(tmp_path, per_file=10, test=10)
    assert len(build_data(config(tmp_path), seed=0).train) == 50


@pytest.mark.parametrize("labels,classes", [("fine", 100), ("coarse", 20)])
def test_cifar100_fine_and_coarse_labels(tmp_path, labels, classes):
    folder = write_cifar100(tmp_path, train=200, test=50)
    data = build_data(config(folder, "cifar100", labels=labels, augment=False), seed=0)
    assert data.info["num_classes"] == classes
    got = [int(data.train[i][1]) for i in range(200)]
    fine = [i % 100 for i in range(200)]
    assert got == (fine if labels == "fine" else [f // 5 for f in fine])
    assert [int(data.val[i][1]) for i in range(3)] == ([0, 1, 2] if labels == "fine" else [0, 0, 0])


def test_normalisation_gives_zero_mean_unit_std_per_channel(tmp_path):
    data = build_data(config(write_cifar10(tmp_path, per_file=20, test=10), augment=False), seed=0)
    x = torch.stack([data.train[i][0] for i in range(len(data.train))])
    assert torch.allclose(x.mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-3)
    assert torch.allclose(x.std(dim=(0, 2, 3)), torch.ones(3), atol=1e-2)


def test_augmentation_crops_and_flips_and_repeats_for_the_same_batch(tmp_path):
    data = build_data(config(write_cifar10(tmp_path, per_file=20, test=10)), seed=3)
    plain = build_data(config(tmp_path / "cifar-10-batches-bin", augment=False), seed=3)
    batch = list(range(0, 64))
    a = torch.stack([x for x, _ in data.train.__getitems__(batch)])
    b = torch.stack([x for x, _ in data.train.__getitems__(batch)])
    assert torch.equal(a, b)  # the same batch (a resumed run) gets the same crops and flips
    orig = torch.stack([x for x, _ in plain.train.__getitems__(batch)])
    assert not torch.equal(a, orig)
    pad_value = ((0 - data.train.mean) / data.train.std).view(3)  # a black border, normalised
    # every augmented image is the original shifted by at most 4 pixels (zeros come in), maybe mirrored
    for k in range(8):
        found = False
        for img in (a[k], a[k].flip(-1)):
            for dy in range(-4, 5):
                for dx in range(-4, 5):
                    shifted = torch.full_like(orig[k], 0) + pad_value.view(3, 1, 1)
                    ys, xs = slice(max(0, dy), 32 + min(0, dy)), slice(max(0, dx), 32 + min(0, dx))
                    yo, xo = slice(max(0, -dy), 32 + min(0, -dy)), slice(max(0, -dx), 32 + min(0, -dx))
                    shifted[:, yo, xo] = orig[k][:, ys, xs]
                    found = found or torch.allclose(img, shifted, atol=1e-5)
        assert found, f"image {k} is not a shifted (and maybe flipped) copy"


def test_label_noise_flips_that_fraction_to_other_classes_with_the_seed(tmp_path):
    folder = write_cifar10(tmp_path, per_file=100, test=20)
    clean = [int(y) for _, y in build_data(config(folder, augment=False), seed=5).train.__getitems__(list(range(500)))]
    noisy_data = build_data(config(folder, augment=False, label_noise=0.2), seed=5)
    noisy = [int(y) for _, y in noisy_data.train.__getitems__(list(range(500)))]
    changed = [i for i in range(500) if noisy[i] != clean[i]]
    assert len(changed) == 100  # exactly 20% of 500, each to a different class
    assert all(0 <= noisy[i] < 10 for i in changed)
    assert any("label noise: 100 of 500" in n for n in noisy_data.notes)  # recorded in the run's log
    again = [int(y) for _, y in build_data(config(folder, augment=False, label_noise=0.2), seed=5).train.__getitems__(list(range(500)))]
    other = [int(y) for _, y in build_data(config(folder, augment=False, label_noise=0.2), seed=6).train.__getitems__(list(range(500)))]
    assert again == noisy and other != noisy
    assert [int(noisy_data.val[i][1]) for i in range(20)] == [i % 10 for i in range(20)]  # the test set keeps its labels


# ---------------------------------------------------------------- bad folders: one line, exit 2


def write_yaml(tmp_path, folder) -> Path:
    y = tmp_path / "train.yaml"
    y.write_text(f"dataset: {{type: cifar10, path: {folder}}}\nmodel: {{type: resnet18}}\ndevice: {{type: cpu}}\n")
    return y


def one_error_line(res) -> str:
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    return lines[0]


def test_a_truncated_file_is_one_line_naming_it(tmp_path):
    folder = write_cifar10(tmp_path, per_file=10, test=10)
    f = folder / "data_batch_3.bin"
    f.write_bytes(f.read_bytes()[:-100])
    line = one_error_line(envkit("validate", str(write_yaml(tmp_path, folder)), "--profile", "cpu", cwd=tmp_path))
    assert "data_batch_3.bin" in line and "record 9" in line


def test_a_label_out_of_range_names_file_and_record(tmp_path):
    folder = write_cifar10(tmp_path, per_file=10, test=10)
    f = folder / "data_batch_2.bin"
    raw = bytearray(f.read_bytes())
    raw[4 * 3073] = 17  # record 4's label byte
    f.write_bytes(bytes(raw))
    with pytest.raises(EnvkitError) as e:
        build_data(config(folder), seed=0)
    assert "data_batch_2.bin, record 4" in str(e.value) and "17" in str(e.value)
    res = envkit("run", str(write_yaml(tmp_path, folder)), "--profile", "cpu", "--set", "training.max_steps=1", cwd=tmp_path)
    assert res.returncode == 2 and "data_batch_2.bin, record 4" in res.stdout + res.stderr


def test_the_pickled_python_version_is_refused_with_the_reason(tmp_path):
    py = tmp_path / "cifar-10-batches-py"
    py.mkdir()
    for name in ("data_batch_1", "data_batch_2", "test_batch", "batches.meta"):
        (py / name).write_bytes(b"\x80\x04not really a pickle")
    line = one_error_line(envkit("validate", str(write_yaml(tmp_path, py)), "--profile", "cpu", cwd=tmp_path))
    assert "pickle" in line and "binary version" in line


def test_a_missing_batch_file_is_named(tmp_path):
    folder = write_cifar10(tmp_path, per_file=10, test=10)
    (folder / "data_batch_5.bin").unlink()
    line = one_error_line(envkit("validate", str(write_yaml(tmp_path, folder)), "--profile", "cpu", cwd=tmp_path))
    assert "data_batch_5.bin is missing" in line


def test_imagefolder_without_pillow_names_it(tmp_path, monkeypatch):
    """ImageFolder reads images with Pillow alone (torchvision need not load beside this torch)."""
    import builtins

    real_import = builtins.__import__

    def no_pillow(name, *args, **kwargs):
        if name == "PIL" or name.startswith("PIL.") or name.startswith("torchvision"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pillow)
    (tmp_path / "train" / "cat").mkdir(parents=True)
    cfg = load_config(None, data={"dataset": {"type": "imagefolder", "path": str(tmp_path)}, "model": {"type": "resnet18"}})
    with pytest.raises(EnvkitError) as e:
        build_data(cfg, seed=0)
    assert "Pillow" in str(e.value) and "pip install pillow" in (e.value.fix or "")


def test_imagefolder_reads_every_image_with_its_class_label(tmp_path):
    """Class folders in name order, files in sorted order (a nested folder too, other files left
    out), each image decoded, centre-cropped, resized and normalised with ImageNet's statistics."""
    from PIL import Image

    colours = {"cat": (255, 0, 0), "dog": (0, 0, 255)}
    for split in ("train", "val"):
        for name, colour in colours.items():
            (tmp_path / split / name / "more").mkdir(parents=True)
            Image.new("RGB", (12, 16), colour).save(tmp_path / split / name / "b.png")
            Image.new("RGB", (20, 10), colour).save(tmp_path / split / name / "more" / "a.jpg", quality=100)
            (tmp_path / split / name / "notes.txt").write_text("not an image")
    cfg = load_config(None, data={"dataset": {"type": "imagefolder", "path": str(tmp_path), "image_size": 8, "augment": False},
                                  "model": {"type": "resnet18"}})
    data = build_data(cfg, seed=0)
    assert (len(data.train), len(data.val), data.info["num_classes"]) == (4, 4, 2)
    assert [data.train.samples[i][0][len(str(tmp_path)) + 1:] for i in range(4)] == [
        "train/cat/b.png", "train/cat/more/a.jpg", "train/dog/b.png", "train/dog/more/a.jpg"]
    mean, std = torch.tensor((0.485, 0.456, 0.406)), torch.tensor((0.229, 0.224, 0.225))
    for i, (want_label, colour) in enumerate([(0, "cat"), (0, "cat"), (1, "dog"), (1, "dog")]):
        x, y = data.train[i]
        assert x.shape == (3, 8, 8) and int(y) == want_label
        want = (torch.tensor(colours[colour], dtype=torch.float32) / 255 - mean) / std
        assert torch.allclose(x.mean(dim=(1, 2)), want, atol=0.05), (i, x.mean(dim=(1, 2)), want)


def test_init_cifar10_writes_a_config_that_validates(tmp_path):
    write_cifar10(tmp_path / "data", per_file=10, test=10)
    res = envkit("init", "cifar10", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    text = (tmp_path / "train.yaml").read_text()
    assert "type: cifar10" in text and "resnet18" in text
    res = envkit("validate", "train.yaml", "--profile", "cpu", "--set", "dataset.path=data/cifar-10-batches-bin", cwd=tmp_path)
    assert res.returncode == 0, res.stderr




def test_a_resumed_cifar_run_is_the_uninterrupted_run_bit_for_bit(tmp_path):
    """Augmentation and label noise on: stopped at step 5 and resumed, the losses are the same floats."""
    import json

    from envkit.train.run.loop import train

    folder = write_cifar10(tmp_path, per_file=20, test=20)

    def cfg():
        return load_config(None, data={
            "experiment": {"seed": 1}, "dataset": {"type": "cifar10", "path": str(folder), "label_noise": 0.1},
            "model": {"type": "cnn", "width": 4}, "device": {"type": "cpu"},
            "training": {"max_steps": 10, "batch_size": 16, "lr": 3e-3, "compile": False},
            "eval": {"every_steps": 0, "batches": 1}, "checkpoint": {"every_steps": 0},
            "logging": {"every_steps": 1, "progress": "none", "device_seconds": 0}})

    def losses(d):
        return [(r["step"], r["loss"]) for r in map(json.loads, (d / "metrics.jsonl").read_text().splitlines()) if "loss" in r]

    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    straight.mkdir(), stopped.mkdir()
    train(cfg(), straight, resume="never", handle_signals=False)
    assert train(cfg(), stopped, resume="never", stop_after=5, handle_signals=False).status == "stopped"
    assert train(cfg(), stopped, resume="auto", handle_signals=False).resumed_from == "step_00000005.pt"
    assert losses(straight) == losses(stopped) and len(losses(straight)) == 10
