"""What any compiled GPU run pays before its first step on this machine, whoever starts it: Python,
`import torch`, CUDA's start, and the imports of torch.compile (Dynamo, Inductor). The floor under
`bench_time_to_first_step.py`'s warm row: a warm start cannot be shorter than these.

    python benchmarks/bench_start_floors.py [--runs 5] [--json]

Each case is a fresh process, the cases alternating round by round (one unmeasured round first warms
the page cache); the clock runs from the process's start to its exit. Cases:
- python: `python -c pass`;
- import torch;
- import torch, then CUDA's start (`torch.zeros(1, device="cuda")`: the driver, the primary context);
- the driver alone (ctypes: cuInit and the primary context, no torch);
- import torch, torch._dynamo, torch._inductor.compile_fx (what a compiled step imports);
- all of it in one process, CUDA started last.
CUDA's start alone is the driver's share: what starting it on a thread beside the imports could save at
most (tried at 9e88efe, measured in benchmarks/RESULTS.md, and dropped).
Prints each median and the spread (`--json`: one object).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

COMPILE_IMPORTS = "import torch, torch._dynamo, torch._inductor.compile_fx"
DRIVER = ("import ctypes; d = ctypes.CDLL('libcuda.so.1'); n, c = ctypes.c_int(), ctypes.c_void_p(); "
          "assert d.cuInit(0) == 0 and d.cuDeviceGet(ctypes.byref(n), 0) == 0 "
          "and d.cuDevicePrimaryCtxRetain(ctypes.byref(c), n) == 0")
CASES = {
    "python -c pass": "pass",
    "import torch": "import torch",
    "import torch + CUDA's start": "import torch; torch.zeros(1, device='cuda')",
    "the driver alone (ctypes)": DRIVER,
    "compile's imports": COMPILE_IMPORTS,
    "compile's imports, then CUDA": COMPILE_IMPORTS + "; torch.zeros(1, device='cuda')",
}


def wall(code: str) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"python -c {code!r} failed: {proc.stderr[-2000:]}")
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    times: dict[str, list[float]] = {name: [] for name in CASES}
    for round_ in range(args.runs + 1):
        for name, code in CASES.items():
            seconds = wall(code)
            if round_:
                times[name].append(seconds)
            if not args.json:  # as it goes: a run cut short by a time limit still shows what it measured
                print(f"round {round_}{' (warm-up)' if not round_ else ''}: {name:<40} {seconds:6.2f} s", file=sys.stderr, flush=True)
    out = {name: {"median_s": round(statistics.median(t), 3), "min_s": round(min(t), 3), "max_s": round(max(t), 3)}
           for name, t in times.items()}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for name, r in out.items():
            print(f"{name:<40} {r['median_s']:7.2f} s  ({r['min_s']:.2f}-{r['max_s']:.2f}, {args.runs} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
