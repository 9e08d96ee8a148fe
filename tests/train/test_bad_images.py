"""An ImageFolder with an image that does not decode (a truncated PNG, a corrupt JPEG) through
`envkit run`: with `dataset.on_bad_file: stop` (the default) the run ends with one line naming the
file and the fix, status failed, exit 1, no traceback; with `skip` it trains on, and summary.json
counts the files it skipped. Both with the images decoded in the trainer's process and in a
DataLoader worker process (where torch re-raises the worker's exception as a traceback's text).
The images are written here with Pillow; envkit reads them without torchvision."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import pytest

from conftest import envkit

CONFIG = """\
experiment: {{name: bad, output_dir: runs, seed: 0}}
dataset: {{type: imagefolder, path: {path}, image_size: 8{extra}}}
model: {{type: cnn, width: 4}}
training: {{epochs: 1, batch_size: 4, compile: false}}
eval: {{every_steps: 0, batches: 1}}
checkpoint: {{every_steps: 0}}
logging: {{every_steps: 1, progress: plain, device_seconds: 0}}
dataloader: {{num_workers: {workers}}}
device: {{type: cpu}}
"""


def _image(rng: random.Random, fmt: str) -> bytes:
    from PIL import Image

    img = Image.new("RGB", (16, 16))
    img.putdata([(rng.randrange(256), rng.randrange(256), rng.randrange(256)) for _ in range(256)])
    out = io.BytesIO()
    img.save(out, fmt)
    return out.getvalue()


def write_folder(root: Path) -> list[Path]:
    """root/train/{a,b}/ with three good images each and two bad ones (8 in all: one epoch of
    batch 4 reads every one), root/val/{a,b}/ with two good ones each. Returns the bad files."""
    rng = random.Random(0)
    for split, count in (("train", 3), ("val", 2)):
        for cls in ("a", "b"):
            (root / split / cls).mkdir(parents=True)
            for i in range(count):
                (root / split / cls / f"{i}.png").write_bytes(_image(rng, "PNG"))
    truncated = root / "train" / "a" / "truncated.png"
    truncated.write_bytes(_image(rng, "PNG")[:400])  # the pixel data cut off half way
    corrupt = root / "train" / "b" / "corrupt.jpg"
    corrupt.write_bytes(_image(rng, "JPEG")[:20] + bytes(rng.randrange(256) for _ in range(300)))  # a JFIF header, then noise
    return [truncated, corrupt]


def _run(tmp_path: Path, workers: int, on_bad_file: str | None):
    bad = write_folder(tmp_path / "images")
    extra = f", on_bad_file: {on_bad_file}" if on_bad_file else ""
    (tmp_path / "train.yaml").write_text(CONFIG.format(path=tmp_path / "images", extra=extra, workers=workers))
    res = envkit("run", "train.yaml", "--profile", "cpu", "--run-id", "r", cwd=tmp_path, timeout=600)
    return res, tmp_path / "runs" / "bad" / "r", bad


@pytest.mark.parametrize("workers", [0, 1])
def test_an_unreadable_image_stops_the_run_with_one_line_naming_it(tmp_path, workers):
    res, run, bad = _run(tmp_path, workers, None)  # stop is the default
    assert res.returncode == 1, (res.returncode, res.stderr[-3000:])
    assert "Traceback" not in res.stderr + res.stdout, res.stderr[-3000:]
    named = [line for line in res.stderr.splitlines() if any(str(p) in line for p in bad)]
    assert len(named) == 1, res.stderr[-3000:]
    assert "dataset.on_bad_file: skip" in named[0] and "remove or replace" in named[0], named[0]
    log = (run / "train.log").read_text()
    assert any(str(p) in line and "dataset.on_bad_file: skip" in line for line in log.splitlines() for p in bad), log[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "failed" and any(str(p) in summary["error"] for p in bad), summary


@pytest.mark.parametrize("workers", [0, 1])
def test_skip_trains_on_and_counts_the_unreadable_images(tmp_path, workers):
    res, run, bad = _run(tmp_path, workers, "skip")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr + res.stdout
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 2, summary
    skipped = summary["skipped_files"]
    assert skipped["count"] == 2 and sorted(skipped["paths"]) == sorted(map(str, bad)), skipped
    said = [line for line in (run / "train.log").read_text().splitlines() if "skipped 2 unreadable" in line]
    assert len(said) == 1 and all(str(p) in said[0] for p in bad), said
