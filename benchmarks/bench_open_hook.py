"""What `envkit exec`'s open hook (envkit/exec/opened.py) costs a script: the time of an open and
read of a small file, plain and under the hook, for a file opened the first time (the hook records
it: a realpath and one line appended) and for one read again (a set lookup).

    python benchmarks/bench_open_hook.py                 # 2,000 files, 7 passes, 5 rounds
    python benchmarks/bench_open_hook.py --files 20000 --json

Each measurement is a fresh interpreter; the figures are medians over the rounds (per pass: the
first pass is the first open of every file, the others a read again).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

LOOP = """
import json, sys, time
n, passes = int(sys.argv[1]), int(sys.argv[2])
times = []
for p in range(passes):
    t = time.perf_counter()
    for i in range(n):
        with open(f"files/{i}.bin", "rb") as fh:
            fh.read()
    times.append((time.perf_counter() - t) / n * 1e6)
print(json.dumps({"first": times[0], "again": sorted(times[1:])[len(times[1:]) // 2]}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--passes", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from envkit.exec.environment import track_path

    with tempfile.TemporaryDirectory(prefix="envkit-bench-hook-") as tmp:
        work = Path(tmp)
        (work / "files").mkdir()
        for i in range(args.files):
            (work / "files" / f"{i}.bin").write_bytes(b"x" * 100)
        base = {k: v for k, v in os.environ.items() if not k.startswith("ENVKIT_")}
        hooked = {**base, "PYTHONPATH": str(track_path()), "ENVKIT_RUN_DIR": str(work / "run")}
        out: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            (work / "run").mkdir(exist_ok=True)
            (work / "run" / "opened.jsonl").unlink(missing_ok=True)
            for label, env in (("plain", base), ("hook", hooked)):
                got = json.loads(subprocess.run([sys.executable, "-c", LOOP, str(args.files), str(args.passes)], cwd=work, env=env,
                                                capture_output=True, text=True, check=True).stdout)
                out.setdefault(f"{label} first open (us)", []).append(got["first"])
                out.setdefault(f"{label} read again (us)", []).append(got["again"])
    med = {k: statistics.median(v) for k, v in out.items()}
    med["first open, hook - plain (us)"] = med["hook first open (us)"] - med["plain first open (us)"]
    med["read again, hook - plain (us)"] = med["hook read again (us)"] - med["plain read again (us)"]
    if args.json:
        print(json.dumps({"medians": med, "rounds": out}))
    else:
        for k, v in med.items():
            print(f"{k:<34} {v:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
