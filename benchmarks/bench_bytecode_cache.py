"""torch's imports without bytecode, before and after `envkit doctor --fix` writes it into envkit's cache.

    unshare -m sh -c 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" "$0" && exec "$@"' SITE_PACKAGES \
        python benchmarks/bench_bytecode_cache.py --runs 3

Run it where torch has no bytecode and Python writes none: the script sets PYTHONDONTWRITEBYTECODE=1, and
the wrapper above mounts site-packages read-only (in a mount namespace of its own), as on a shared
cluster module or a read-only image. Each measurement is a fresh process: `import torch`, then
torch.compile's imports (torch._dynamo, torch._inductor.compile_fx), timed inside it. Then `envkit doctor
--fix --json` (its seconds, and what it did), then the same processes with PYTHONPYCACHEPREFIX pointing at
envkit's cache, as `envkit run`, `exec` and `sweep` start them. ENVKIT_CACHE_DIR is a fresh folder. Prints
medians and the ratio; --json prints one object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_IMPORTS = ("import time; t0 = time.perf_counter(); import torch; t1 = time.perf_counter(); "
            "import torch._dynamo, torch._inductor.compile_fx; t2 = time.perf_counter(); print(t1 - t0, t2 - t1)")


def imports(env: dict, runs: int) -> dict:
    torch_s, compile_s = [], []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", _IMPORTS], env=env, capture_output=True, text=True, check=True)
        a, b = (float(x) for x in out.stdout.split())
        torch_s.append(a)
        compile_s.append(b)
    return {"import torch": statistics.median(torch_s), "compile imports": statistics.median(compile_s),
            "runs": runs, "each": list(zip(torch_s, compile_s))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    cache = Path(tempfile.mkdtemp(prefix="envkit-bytecode-"))
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "ENVKIT_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONPYCACHEPREFIX", None)
    before = imports(env, args.runs)
    t = time.perf_counter()
    fix = subprocess.run([sys.executable, "-m", "envkit", "doctor", "--fix", "--json", "--python", sys.executable], env=env,
                         capture_output=True, text=True)
    fix_s = time.perf_counter() - t
    doc = json.loads(fix.stdout) if fix.stdout.strip().startswith("{") else {}
    check = next((c for c in doc.get("checks", []) if c.get("id") == "bytecode"), {})
    after = imports({**env, "PYTHONPYCACHEPREFIX": str(cache / "pycache")}, args.runs)
    out = {"before": before, "after": after, "doctor --fix s": round(fix_s, 1), "fixed": doc.get("fixed"),
           "check after": {"status": check.get("status"), "message": check.get("message")}}
    if args.json:
        print(json.dumps(out))
        return
    for part in ("import torch", "compile imports"):
        b, a = before[part], after[part]
        print(f"{part:18s} no bytecode {b:6.2f} s   envkit's cache {a:6.2f} s   {b / a:4.1f}x")
    total_b, total_a = before["import torch"] + before["compile imports"], after["import torch"] + after["compile imports"]
    print(f"{'both':18s} no bytecode {total_b:6.2f} s   envkit's cache {total_a:6.2f} s   {total_b / total_a:4.1f}x")
    print(f"envkit doctor --fix: {fix_s:.1f} s, {json.dumps(doc.get('fixed'))}")
    print(f"the bytecode check after it: {check.get('status')}: {check.get('message')}")


if __name__ == "__main__":
    main()
