"""Checkpoints are kept by validity, not by file name: unreadable files with high step numbers
beside the run's good checkpoints must not push the good ones out (checkpoint.keep_last), and are
moved aside into checkpoints/unreadable/ with one line in train.log, never deleted. Real runs of the
trainer on the CPU, as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import envkit

CONFIG = """\
experiment: {name: keep, output_dir: runs, seed: 0}
model: {type: mlp, hidden: 8, depth: 1}
dataset: {type: synthetic, task: teacher, num_samples: 64}
training: {max_steps: 130, batch_size: 8}
eval: {every_steps: 0}
checkpoint: {every_steps: 10, keep_last: 2}
logging: {every_steps: 10, device_seconds: 0}
device: {type: cpu}
"""


def _run(proj: Path, *args):
    return envkit("run", "train.yaml", "--profile", "cpu", "--run-id", "r", *args, cwd=proj, timeout=600)


def test_unreadable_high_steps_do_not_prune_the_good_checkpoints(tmp_path):
    (tmp_path / "train.yaml").write_text(CONFIG)
    res = _run(tmp_path, "--stop-after", "100")
    assert res.returncode == 0, res.stderr[-2000:]
    ckpts = tmp_path / "runs" / "keep" / "r" / "checkpoints"
    assert sorted(p.name for p in ckpts.glob("step_*.pt")) == ["step_00000090.pt", "step_00000100.pt"]
    # two files a crash, a copy cut short or another tool left behind, with higher step numbers
    (ckpts / "step_00099999.pt").write_bytes(b"not a checkpoint at all")
    good = (ckpts / "step_00000100.pt").read_bytes()
    (ckpts / "step_00099998.pt").write_bytes(good[: len(good) // 2])  # truncated

    res = _run(tmp_path, "--stop-after", "110")
    assert res.returncode == 0, res.stderr[-2000:]
    # the newest keep_last (2) checkpoints that load: the one just written and the one before it
    assert sorted(p.name for p in ckpts.glob("step_*.pt")) == ["step_00000100.pt", "step_00000110.pt"]
    # the unreadable ones moved aside, bytes intact, not deleted
    assert (ckpts / "unreadable" / "step_00099999.pt").read_bytes() == b"not a checkpoint at all"
    assert (ckpts / "unreadable" / "step_00099998.pt").read_bytes() == good[: len(good) // 2]
    log = (tmp_path / "runs" / "keep" / "r" / "train.log").read_text()
    moved = [line for line in log.splitlines() if "unreadable" in line and "moved" in line]
    assert len(moved) == 2 and any("step_00099999.pt" in m for m in moved) and any("step_00099998.pt" in m for m in moved), moved

    # the next run continues from step 110, not from 0
    res = _run(tmp_path, "--stop-after", "120")
    assert res.returncode == 0, res.stderr[-2000:]
    log = (tmp_path / "runs" / "keep" / "r" / "train.log").read_text()
    assert "resumed from step_00000110.pt: step 110" in log
    steps = [json.loads(line).get("step") for line in (tmp_path / "runs" / "keep" / "r" / "metrics.jsonl").read_text().splitlines()]
    assert len([s for s in steps if s == 100]) == 1  # nothing was trained twice
