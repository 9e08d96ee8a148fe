"""The CPU first-step goal: `envkit run` of the mlp quick test reaches the end of its first step within
1.5x the time of `python -c "import torch"` (a newcomer's first minute on a laptop).

    python benchmarks/bench_cpu_first_step.py [--runs 5] [--before TREE]

Each round, alternating, in fresh processes: `python -c "import torch"`; `python -c "import torch,
torch._dynamo"` (what a torch.optim optimizer imports on its first use: `Optimizer.add_param_group`
and every `step()` import torch._dynamo, compile on or off); and `envkit run
templates/train/mlp_quick_test.yaml --profile cpu --stop-after 1`, its clock stopped at the plain
progress line `step 1/1500 | first step done`. One unmeasured round first warms the page cache and
envkit's caches. Prints each median, and the ratios to `import torch`. `--before TREE` (a checkout
of another commit: `git worktree add /tmp/before <commit>`) adds that tree's envkit run to each round.
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

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "templates" / "train" / "mlp_quick_test.yaml"


def wall(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def first_step(folder: Path, n: int, tree: Path = ROOT) -> float:
    argv = [sys.executable, "-m", "envkit", "run", str(TEMPLATE), "--profile", "cpu", "--run-id", f"r{n}", "--resume", "never",
            "--stop-after", "1", "--set", "logging.progress=plain"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVKIT_")}
    env["PYTHONPATH"] = str(Path(tree).resolve())
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=folder, env=env)
    seen = None
    for line in proc.stdout:
        if seen is None and line.startswith("step 1/"):
            seen = time.perf_counter() - t0
    if proc.wait() != 0 or seen is None:
        raise SystemExit(f"envkit run failed (exit {proc.returncode})")
    return seen


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--before", help="another envkit tree, measured in the same rounds")
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-cpu-first-step-"))
    cases = {
        "python -c 'import torch'": lambda n: wall([sys.executable, "-c", "import torch"]),
        "python -c 'import torch, torch._dynamo'": lambda n: wall([sys.executable, "-c", "import torch, torch._dynamo"]),
        "envkit run mlp_quick_test: step 1 ends": lambda n: first_step(folder, n),
    }
    if args.before:
        before = Path(args.before)
        cases["  the same, --before tree"] = lambda n: first_step(folder / "before", n, before)
        (folder / "before").mkdir()
    for case in cases.values():
        case(0)
    times: dict[str, list[float]] = {name: [] for name in cases}
    for n in range(1, args.runs + 1):
        for name, case in cases.items():
            times[name].append(case(n))
    base = statistics.median(times["python -c 'import torch'"])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{args.runs} alternating rounds, {os.cpu_count()} cores, load average {load:.2f} at the end")
    for name, values in times.items():
        med = statistics.median(values)
        print(f"{name:<42} median {med * 1000:>6.0f} ms  {med / base:.2f}x  ({', '.join(f'{v * 1000:.0f}' for v in values)})")


if __name__ == "__main__":
    main()
