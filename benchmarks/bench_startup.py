"""Start-up cost of envkit's commands next to importing torch, measured in one run.

    python benchmarks/bench_startup.py [--runs 7]

Prints the median wall time of each command (fresh process each run) and its ratio to
`python -c "import torch"`. doctor imports torch once in a subprocess, so it should cost little
more than that import; `--help` and `check` never import torch and should cost far less.
`envkit run (1 step)` trains a tiny MLP for one step in a temporary folder: what a run pays before
its first step (config, doctor's facts, the run folder and its record, the trainer's start), with
envkit's caches warm (the first, unmeasured, round fills them), as every run but an environment's
first meets them.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time


def wall(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    py = sys.executable
    envkit = [py, "-m", "envkit"]
    import tempfile
    from pathlib import Path

    tmp = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    (tmp / "one.yaml").write_text("experiment: {name: one, output_dir: %s}\n"
                                  "dataset: {type: synthetic, task: teacher, input_dim: 8, num_samples: 256}\n"
                                  "model: {type: mlp, hidden: 16, depth: 1}\n"
                                  "training: {max_steps: 1, batch_size: 16}\n"
                                  "eval: {every_steps: 0, batches: 1}\ncheckpoint: {every_steps: 0}\n"
                                  "device: {type: cpu}\n" % (tmp / "runs"))
    cases = {
        "envkit --help": envkit + ["--help"],
        "envkit check": envkit + ["check"],
        "envkit doctor --json": envkit + ["doctor", "--json"],
        "envkit run (1 step)": envkit + ["run", str(tmp / "one.yaml"), "--profile", "cpu", "--resume", "never"],
        "python -c 'import torch'": [py, "-c", "import torch"],
        "python -c 'pass'": [py, "-c", "pass"],
    }
    for argv in cases.values():  # warm the page cache once
        wall(argv)
    medians = {}
    for name, argv in cases.items():
        times = [wall(argv) for _ in range(args.runs)]
        medians[name] = statistics.median(times)
    base = medians["python -c 'import torch'"]
    cores = shutil.which("nproc") and subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    print(f"{'command':<28} {'median (ms)':>12} {'vs import torch':>16}   ({args.runs} runs each, {cores} cores)")
    for name, m in medians.items():
        print(f"{name:<28} {m * 1000:>12.0f} {m / base:>15.2f}x")


if __name__ == "__main__":
    main()
