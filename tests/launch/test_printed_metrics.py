"""Metrics from what a script prints (envkit/exec/scalars.py): the lines real training scripts print
become metrics rows, the lines around them do not, and a script nobody edited is recorded, listed,
plotted and reproduced from its output alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import envkit

from envkit.exec.scalars import Scalars

# (line, the metrics it holds or None): the progress lines of well-known training scripts and
# frameworks, in the order they print them, among the lines they print around them; each script's
# output is read by a parser of its own, as each run's is
PRINTED = [
    ("Overriding config with config/train_shakespeare_char.py:", None),
    ("Overriding: max_iters = 20", None),
    ("tokens per iteration will be: 16,384", None),
    ("found vocab_size = 65 (inside data/shakespeare_char/meta.pkl)", None),
    ("Initializing a new model from scratch", None),
    ("number of parameters: 10.65M", None),
    ("num decayed parameter tensors: 26, with 10,740,096 parameters", None),
    ("using fused AdamW: False", None),
    ("compiling the model... (takes a ~minute)", None),
    ("step 0: train loss 4.2874, val loss 4.2823", {"step": 0, "train_loss": 4.2874, "val_loss": 4.2823}),
    ("iter 0: loss 4.2654, time 12345.67ms, mfu -100.00%", {"step": 0, "loss": 4.2654, "mfu": -1.0}),
    ("iter 10: loss 3.2134, time 51.20ms, mfu 7.31%", {"step": 10, "loss": 3.2134, "mfu": 0.0731}),
    ("saving checkpoint to out-shakespeare-char", None),
    ("| epoch   1 |   200/ 2983 batches | lr 20.00 | ms/batch 15.73 | loss  7.61 | ppl  2014.39",
     {"step": 200, "lr": 20.0, "ms_batch": 15.73, "loss": 7.61, "ppl": 2014.39}),
    ("| end of epoch   1 | time: 48.21s | valid loss  5.58 | valid ppl   264.78", None),
    ("| epoch   2 |   200/ 2983 batches | lr 20.00 | ms/batch 15.80 | loss  5.61 | ppl   273.11",
     {"step": 3183, "lr": 20.0, "ms_batch": 15.8, "loss": 5.61, "ppl": 273.11}),
    None,
    ("{'loss': 2.3100, 'grad_norm': 1.25, 'learning_rate': 5e-05, 'epoch': 0.5}",
     {"step": 1, "loss": 2.31, "grad_norm": 1.25, "learning_rate": 5e-05}),
    ("loss=0.31 acc=0.88", {"step": 2, "loss": 0.31, "acc": 0.88}),
    None,
    ("Epoch 3/10, Loss: 0.5432, Accuracy: 87.5%", {"step": 3, "loss": 0.5432, "accuracy": 0.875}),
    ("Using device: cuda:0", None),
    ("torch 2.13.0+cpu, numpy 2.1.0", None),
    ("lr: 0.001", None),  # a config dump, not a measurement
    ("lr: 0.001, weight_decay: 0.1", None),
    ("batch_size: 64", None),
    ("Loading 50000 images from data/train", None),
    ("epoch 1 of 10", None),
    ("Warning: lr 0.1 is high, loss may diverge", None),
    ("Saved checkpoint to out/ckpt.pt at step 100", None),
    ("Downloading: 100%|##########| 170M/170M [00:05<00:00, 30.1MB/s]", None),
]


def test_the_progress_lines_of_real_scripts_are_metrics_and_the_lines_around_them_are_not():
    s, got = Scalars(), []
    for item in PRINTED:
        if item is None:  # the next script's output
            s = Scalars()
            continue
        row = s.parse(item[0])
        got.append(None if row is None else {k: v for k, v in row.items() if k != "printed"})
    assert got == [item[1] for item in PRINTED if item is not None]


def test_a_value_keeps_the_precision_it_was_printed_with():
    row = Scalars().parse("iter 10: loss 3.2134, acc 87.5%, lr 3e-4")
    assert row is not None and row["printed"] == {"loss": 4, "acc": 3, "lr": 4}


def test_a_pattern_of_ones_own_replaces_the_defaults():
    s = Scalars(pattern=__import__("re").compile(r"it=(?P<step>\d+) nll=(?P<nll>[\d.]+)"))
    assert s.parse("it=7 nll=1.250") == {"step": 7, "nll": 1.25, "printed": {"nll": 3}}
    assert s.parse("iter 10: loss 3.2") is None


TRAIN = """\
import math, sys
for i in range(0, 30, 10):
    print(f"iter {i}: loss {2.0 + math.sin(i):.4f}, time 12.00ms", flush=True)
print("saving checkpoint to out", flush=True)
"""


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@e", "-c", "user.name=t", *args], check=True, capture_output=True)


@pytest.fixture
def project(tmp_path):
    repo = tmp_path / "proj"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / ".gitignore").write_text("runs/\n")
    (repo / "train.py").write_text(TRAIN)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "one")
    return repo, {"ENVKIT_CACHE_DIR": str(tmp_path / "cache"), "ENVKIT_HOME": str(tmp_path / "no-managed-env")}


def test_a_script_that_only_prints_is_recorded_listed_and_reproduced_from_its_output(project):
    repo, env = project
    r = envkit("exec", "--name", "printed", "--", sys.executable, "train.py", cwd=repo, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    run = next((repo / "runs" / "printed").iterdir())
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["loss"], r["source"]) for r in rows] == [(0, 2.0, "printed"), (10, 1.456, "printed"),
                                                                     (20, 2.9129, "printed")]
    r = envkit("runs", str(repo / "runs"), env=env, timeout=120)
    line = next(x for x in r.stdout.splitlines() if run.name in x)
    assert " 20/- " in line and " 2.9129 " in line, r.stdout
    r = envkit("reproduce", str(run), "--venv", sys.prefix, "--json", env=env, timeout=300)
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["outcome"] == "same" and out["steps_compared"] == 3, r.stderr[-2000:]
    assert out["printed"] == {"loss": 4} and "compared as the script printed them (loss to 4 decimals)" in out["why"]


def test_a_script_that_logs_through_envkit_track_wins_over_what_it_prints(project):
    repo, env = project
    (repo / "both.py").write_text("from envkit import track\nfor i in range(1, 4):\n"
                                  "    print(f'step {i}: loss {9.0:.2f}', flush=True)\n    track.log(i, loss=1.0 / i)\n")
    r = envkit("exec", "--name", "both", "--", sys.executable, "both.py", cwd=repo, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    run = next((repo / "runs" / "both").iterdir())
    from envkit.runfolder.metrics import read_metrics

    assert [(r["step"], r["loss"]) for r in read_metrics(run)] == [(1, 1.0), (2, 0.5), (3, 1.0 / 3)]


def test_metrics_pattern_off_records_none_and_a_bad_one_is_one_line(project):
    repo, env = project
    r = envkit("exec", "--name", "off", "--metrics-pattern", "off", "--", sys.executable, "train.py", cwd=repo, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    run = next((repo / "runs" / "off").iterdir())
    assert not (run / "metrics.jsonl").exists()
    r = envkit("exec", "--metrics-pattern", "(unclosed", "--", sys.executable, "train.py", cwd=repo, env=env, timeout=120)
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith("envkit: error: --metrics-pattern: not a regular")


def test_a_projects_own_pattern_lives_in_its_pyproject(project):
    repo, env = project
    (repo / "pyproject.toml").write_text('[tool.envkit]\nmetrics_pattern = "it=(?P<step>\\\\d+) nll=(?P<nll>[\\\\d.]+)"\n')
    (repo / "own.py").write_text("for i in (1, 2):\n    print(f'it={i} nll={3.0 / i:.3f}', flush=True)\n")
    r = envkit("exec", "--name", "own", "--", sys.executable, "own.py", cwd=repo, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    run = next((repo / "runs" / "own").iterdir())
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["nll"], r["printed"]) for r in rows] == [(1, 3.0, {"nll": 3}), (2, 1.5, {"nll": 3})]
    (repo / "pyproject.toml").write_text('[tool.envkit]\nmetrics_pattern = "(unclosed"\n')
    r = envkit("exec", "--", sys.executable, "own.py", cwd=repo, env=env, timeout=120)
    line = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 2 and "pyproject.toml: tool.envkit.metrics_pattern: not a regular expression" in line, line


def test_a_scripts_own_settings_are_columns_of_runs(project):
    repo, env = project
    (repo / "cfg.py").write_text("import sys\nfrom envkit import track\n"
                                 "track.config({'lr': float(sys.argv[1]), 'batch_size': 64})\ntrack.config(optimizer='adamw')\n"
                                 "print('step 1: loss 2.5000', flush=True)\n")
    for lr in ("0.001", "0.003"):
        r = envkit("exec", "--name", "cfg", "--", sys.executable, "cfg.py", lr, cwd=repo, env=env, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
    r = envkit("runs", str(repo / "runs"), env=env, timeout=120)
    header, *lines = r.stdout.splitlines()
    assert header.split()[-3:] == ["lr", "batch_size", "optimizer"], r.stdout  # the one that differs first
    assert sorted(line.split()[-3] for line in lines) == ["0.001", "0.003"] and all(line.split()[-2:] == ["64", "adamw"]
                                                                                    for line in lines), r.stdout
    r = envkit("runs", str(repo / "runs"), "--json", env=env, timeout=120)
    assert sorted(s["settings"]["lr"] for s in json.loads(r.stdout)) == [0.001, 0.003]

