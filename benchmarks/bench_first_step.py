"""Time from `envkit run` to the trainer's first step, two envkit trees against each other (#42:
writing a run's record must not delay its first step).

    git worktree add /tmp/before <commit>
    python benchmarks/bench_first_step.py --before /tmp/before --after . [--runs 9]

Each round starts a fresh `envkit run` of a one-step MLP on the CPU from each tree in turn (same
interpreter, envkit's caches warm after one unmeasured run each) and stops the clock at the plain
progress line `step 1/`. Prints each tree's median and the ratio after/before.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFIG = ("experiment: {name: one, output_dir: %s}\n"
          "dataset: {type: synthetic, task: teacher, input_dim: 8, num_samples: 256}\n"
          "model: {type: mlp, hidden: 16, depth: 1}\n"
          "training: {max_steps: 1, batch_size: 16}\n"
          "eval: {every_steps: 0, batches: 1}\ncheckpoint: {every_steps: 0}\ndevice: {type: cpu}\n")


def first_step(tree: str, config: Path) -> float:
    env = dict(os.environ, PYTHONPATH=str(Path(tree).resolve()))
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "envkit", "run", str(config), "--profile", "cpu", "--resume", "never",
                             "--set", "logging.every_steps=1", "--set", "logging.progress=plain"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=config.parent, text=True)
    seen = None
    for line in proc.stdout:
        if seen is None and line.startswith("step 1/"):
            seen = time.perf_counter() - t0
    if proc.wait() != 0 or seen is None:
        raise SystemExit(f"envkit run from {tree} failed (exit {proc.returncode})")
    return seen


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--runs", type=int, default=9)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-first-step-"))
    config = tmp / "one.yaml"
    config.write_text(CONFIG % (tmp / "runs"))
    trees = {"before": args.before, "after": args.after}
    for tree in trees.values():
        first_step(tree, config)  # fills envkit's caches (the environment's lock) as every run but the first finds them
    times: dict[str, list[float]] = {k: [] for k in trees}
    for _ in range(args.runs):
        for name, tree in trees.items():
            times[name].append(first_step(tree, config))
    med = {k: statistics.median(v) for k, v in times.items()}
    for name, tree in trees.items():
        print(f"{name:<7} {tree}: median {med[name] * 1000:.0f} ms to the first step ({', '.join(f'{t * 1000:.0f}' for t in times[name])})")
    print(f"after / before: {med['after'] / med['before']:.3f} ({args.runs} alternating rounds)")


if __name__ == "__main__":
    main()
