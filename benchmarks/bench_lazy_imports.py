"""What each late import named in LAZY_OK (tests/project/test_code_shape.py) saves: the time to import the
module after the one it would burden is already imported, and how many modules that adds.

    python benchmarks/bench_lazy_imports.py [--runs 7]

Each measurement is a fresh process (`import BURDENED`, then time `import MODULE`); the median of
the runs is printed. A pair whose import adds a few modules and a millisecond or so belongs at the
top of its module, not in LAZY_OK.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MEASURE = ("import sys, time; import {burdened}; before = len(sys.modules); t = time.perf_counter(); import {module}; "
           "print(time.perf_counter() - t, len(sys.modules) - before)")


def lazy_ok() -> dict[str, tuple[str, str]]:
    spec = importlib.util.spec_from_file_location("code_shape", ROOT / "tests" / "project" / "test_code_shape.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.LAZY_OK


def cost(burdened: str, module: str, runs: int) -> tuple[float, int]:
    """(median seconds, modules added) of importing `module` once `burdened` is imported."""
    times, added = [], 0
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", MEASURE.format(burdened=burdened, module=module)], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
        times.append(float(out[0]))
        added = int(out[1])
    return statistics.median(times), added


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    print(f"{'importer -> module':<68} {'after':<22} {'ms':>6} {'modules':>8}   ({args.runs} runs each)")
    for pair, (burdened, _why) in lazy_ok().items():
        seconds, added = cost(burdened, pair.split(" -> ")[1], args.runs)
        print(f"{pair:<68} {burdened:<22} {seconds * 1000:>6.1f} {added:>8}")


if __name__ == "__main__":
    main()
