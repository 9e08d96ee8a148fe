"""Where the imports of torch.compile spend their time on this machine (benchmarks/bench_start_floors.py
measures how long they take): cProfile of `import torch, torch._dynamo, torch._inductor.compile_fx` in a
fresh process, the functions with the most time of their own and the most time in all, and
`-X importtime`'s slowest modules by their own time.

    python benchmarks/profile_compile_imports.py [--top 25]
"""

from __future__ import annotations

import argparse
import subprocess
import sys

PROFILE = """
import cProfile, pstats, io
pr = cProfile.Profile()
pr.enable()
import torch, torch._dynamo, torch._inductor.compile_fx
pr.disable()
for key in ("tottime", "cumulative"):
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats(key).print_stats({top})
    print("\\n".join(line for line in s.getvalue().splitlines() if line.strip())[:12000])
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    out = subprocess.run([sys.executable, "-c", PROFILE.format(top=args.top)], capture_output=True, text=True)
    print(out.stdout[-24000:], out.stderr[-2000:])
    imp = subprocess.run([sys.executable, "-X", "importtime", "-c", "import torch, torch._dynamo, torch._inductor.compile_fx"],
                         capture_output=True, text=True).stderr
    rows = []
    for line in imp.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[0].split(":")[-1].strip().isdigit():
            rows.append((int(parts[0].split(":")[-1]), int(parts[1]), parts[2].rstrip()))
    print("slowest modules by their own import time (us self | us cumulative | module):")
    for own, cum, name in sorted(rows, reverse=True)[:args.top]:
        print(f"{own:>10} | {cum:>10} | {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
