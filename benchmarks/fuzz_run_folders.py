"""Fuzz envkit's commands with hostile run folders (tests/hostile_folders.py), many more cases than
the suite's test_runfolder_fuzz.py, and print what was found: cases, time, findings grouped by what
broke. A genuine run folder is made first (`envkit exec` of a three-step script in a git
repository, in a temporary folder); every case is a mutated copy of it, from a folder whose key is
not this machine's (a fresh ENVKIT_CACHE_DIR), as a received folder is.

    python benchmarks/fuzz_run_folders.py --cases 2000 --seed 1
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from hostile_folders import COMMANDS, check, genuine_run, mutate  # noqa: E402 - tests/ is put on the path above

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--all-commands-every", type=int, default=4, help="run runs/monitor/plot on every Nth case too")
    ap.add_argument("--verbose", action="store_true", help="print each finding as it is found")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="envkit-fuzz-"))
    try:
        run0 = genuine_run(root, {"ENVKIT_CACHE_DIR": str(root / "cache"), "ENVKIT_HOME": str(root / "no-managed-env")})
        os.environ["ENVKIT_CACHE_DIR"] = str(root / "another-machines-cache")
        os.environ["ENVKIT_HOME"] = str(root / "no-managed-env")
        rng = random.Random(args.seed)
        found: dict[str, list[str]] = collections.defaultdict(list)
        times = []
        t0 = time.monotonic()
        for i in range(args.cases):
            case = root / f"case{i}"
            run = case / "runs" / "proj" / run0.name
            shutil.copytree(run0, run, symlinks=True)
            marker = case / "PWNED"
            done = mutate(run, rng, marker)
            commands = COMMANDS if i % args.all_commands_every == 0 else [c for c in COMMANDS if c[0] == "reproduce"]
            t = time.monotonic()
            for f in check(run, marker, commands=commands):
                if args.verbose:
                    print(f"case {i} ({', '.join(done)}): {f}"[:500], file=sys.stderr, flush=True)
                found[f.split(":")[0] + ": " + f.split(": ", 1)[1].split(" (")[0][:80]].append(f"case {i} ({', '.join(done)}): {f}")
            times.append(time.monotonic() - t)
            shutil.rmtree(case, ignore_errors=True)
        total = time.monotonic() - t0
        times.sort()
        print(f"{args.cases} hostile folders (seed {args.seed}) in {total:.1f} s: median {times[len(times) // 2] * 1000:.0f} ms a case, "
              f"slowest {times[-1]:.2f} s; {sum(len(v) for v in found.values())} findings in {len(found)} kinds")
        for kind, cases in sorted(found.items(), key=lambda kv: -len(kv[1])):
            print(f"  {len(cases):5d}  {kind}\n         e.g. {cases[0][:400]}")
        return 1 if found else 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
