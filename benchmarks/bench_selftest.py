"""Cost of `envkit selftest --quick`: one reused worker (the default) vs a fresh interpreter per
probe (`--isolate`), next to the cost of importing torch once.

    python benchmarks/bench_selftest.py [--runs 3] [--device cpu] [--full]

Prints the median wall time of each mode, its ratio to `python -c "import torch"`, and the median
time of each probe (inside its interpreter, torch import excluded).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envkit.selftest import run_selftest  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--full", action="store_true", help="without --quick (includes torch.compile)")
    args = ap.parse_args()

    imports = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        imports.append(time.perf_counter() - t0)
    base = statistics.median(imports)
    print(f"{'import torch':<28} {base:7.2f} s  x1.0")

    per_probe: dict[str, list[float]] = defaultdict(list)
    for label, isolate in (("selftest (shared worker)", False), ("selftest --isolate", True)):
        walls = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            rep = run_selftest(device=args.device, quick=not args.full, isolate=isolate)
            walls.append(time.perf_counter() - t0)
            if not isolate:
                for p in rep.probes:
                    per_probe[p.name].append(p.seconds)
            if not rep.ok:
                print(f"  (a probe failed: {[p.name for p in rep.probes if p.status == 'fail']})")
        med = statistics.median(walls)
        print(f"{label:<28} {med:7.2f} s  x{med / base:.1f}")
    print("per probe (median, shared worker):")
    for name, secs in per_probe.items():
        print(f"  {name:<12} {statistics.median(secs):6.2f} s")


if __name__ == "__main__":
    main()
