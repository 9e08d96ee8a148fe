"""Start-up cost of envkit's commands next to importing torch, measured in one run.

    python benchmarks/bench_startup.py [--runs 7]

Prints the median wall time of each command (fresh process each run) and its ratio to
`python -c "import torch"`. doctor imports torch once in a subprocess, so it should cost little
more than that import; `--help` and `check` never import torch and should cost far less.
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
    cases = {
        "envkit --help": envkit + ["--help"],
        "envkit check": envkit + ["check"],
        "envkit doctor --json": envkit + ["doctor", "--json"],
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
    print(f"{'command':<28} {'median (ms)':>12} {'vs import torch':>16}   ({args.runs} runs each, {shutil.which('nproc') and subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()} cores)")
    for name, m in medians.items():
        print(f"{name:<28} {m * 1000:>12.0f} {m / base:>15.2f}x")


if __name__ == "__main__":
    main()
