"""What training.deterministic costs GPT-2 small on one GPU, through `envkit run`: the default run, then
each deterministic way twice, the second compared with the first at every logged step (identical
required), and the step time of each beside the default's, in one lease.

    python benchmarks/bench_determinism_gpt2.py [--steps 120] [--batch 16] [--logs DIR]
    python benchmarks/bench_determinism_gpt2.py --run "det-efficient=training.deterministic=true,training.sdpa_backend=efficient"

Runs (each `--run NAME=KEY=VALUE[,KEY=VALUE][,env:VAR=VALUE]`, in order; these by default):
- default: the config as shipped (bf16, compile, the profile's CUDA graphs; SDPA picks cuDNN's attention on Hopper);
- det-sdpa: training.deterministic with ENVKIT_DETERMINISTIC_ATTENTION=sdpa (SDPA, which falls to
  FlashAttention-2's deterministic backward where cuDNN's attention is refused; the default before 2026-12-07);
- det: training.deterministic as shipped: FlexAttention in the compiled step (envkit/train/run/determinism.py).
Each deterministic run is followed by its repeat.
Data: random GPT-2 tokens (benchmarks/bench_time_to_first_step.py's writer), batch 16 x 1,024, no accumulation.
The step time is the median of the logged windows after the first (summary.json's
tokens_per_second_median_window), so compilation and CUDA-graph recording are left out. All runs share
envkit's, Inductor's and Triton's caches (the repeats start warm).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

DEFAULT_RUNS = ["default=", "det-sdpa=training.deterministic=true,env:ENVKIT_DETERMINISTIC_ATTENTION=sdpa",
                "det=training.deterministic=true"]


def run(tmp: Path, data: Path, name: str, items: list[str], args) -> dict:
    sets = [i for i in items if not i.startswith("env:")]
    extra = dict(i[4:].split("=", 1) for i in items if i.startswith("env:"))
    template = ROOT / "templates" / "train" / "gpt2_small_tokens.yaml"
    argv = [sys.executable, "-m", "envkit", "run", str(template), "--run-id", name, "--resume", "never"]
    base = [f"dataset.path={data}", f"training.max_steps={args.steps}", f"training.batch_size={args.batch}", "training.grad_accum=1",
            "training.epochs=null", "eval.every_steps=0", "checkpoint.every_steps=0", f"logging.every_steps={args.log_every}",
            "logging.progress=plain", "experiment.name=det"]
    for s in base + sets:
        argv += ["--set", s]
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", ENVKIT_CACHE_DIR=str(tmp / "envkit-cache"),
               TORCHINDUCTOR_CACHE_DIR=str(tmp / "inductor"), TRITON_CACHE_DIR=str(tmp / "triton"), **extra)
    proc = subprocess.run(argv, env=env, cwd=tmp, capture_output=True, text=True, check=False)
    (tmp / f"{name}.log").write_text(proc.stdout + proc.stderr)
    folder = tmp / "runs" / "det" / name
    if proc.returncode != 0:
        return {"name": name, "error": f"exit {proc.returncode}: {(proc.stdout + proc.stderr)[-600:]}"}
    summary = json.loads((folder / "summary.json").read_text())
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rate = summary.get("tokens_per_second_median_window")
    attention = [line for line in (proc.stdout + proc.stderr).splitlines() if "attention" in line.lower()]
    return {"name": name, "sets": items, "tokens_per_second": rate, "step_ms": 1000 * args.batch * 1024 / rate if rate else None,
            "losses": [(r["step"], r["loss"]) for r in rows if "loss" in r], "attention": attention[:2],
            "compile": summary.get("compile")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--run", action="append", default=None, metavar="NAME=KEY=VALUE[,...]")
    ap.add_argument("--once", action="store_true", help="each run once (no identical-twice check)")
    ap.add_argument("--logs", default=None, help="copy each run's output and a results.json here")
    args = ap.parse_args(argv)
    from bench_time_to_first_step import write_data

    tmp = Path(tempfile.mkdtemp(prefix="bench-det-"))
    data = write_data(tmp, False, 50304)
    results: list[dict] = []
    specs = [(n, [s for s in rest.split(",") if s]) for n, _, rest in (r.partition("=") for r in (args.run or DEFAULT_RUNS))]
    for name, sets in specs:  # a deterministic run's repeat right after it (Inductor's caches warm), compared with it
        for again in ("", "-again") if not args.once and "training.deterministic=true" in sets else ("",):
            results.append(run(tmp, data, name + again, sets, args))
            print(json.dumps({k: v for k, v in results[-1].items() if k != "losses"}), file=sys.stderr, flush=True)
    by = {r["name"]: r for r in results}
    base = by.get("default", {}).get("step_ms")
    print(f"GPT-2 small, batch {args.batch} x 1024, {args.steps} steps, median logged window after the first")
    print(f"{'run':<18} {'tokens/s':>10} {'ms/step':>8} {'x default':>9}  identical to its first run (logged steps)")
    for r in results:
        if "error" in r:
            print(f"{r['name']:<18} {r['error']}")
            continue
        first = by.get(r["name"].removesuffix("-again"))
        same = ""
        if r["name"].endswith("-again") and first and "losses" in first:
            diff = [(a[0], abs(a[1] - b[1])) for a, b in zip(first["losses"], r["losses"]) if a[1] != b[1]]
            same = (f"yes, all {len(r['losses'])}" if not diff and len(first["losses"]) == len(r["losses"])
                    else f"NO: {len(diff)} differ, first at step {diff[0][0] if diff else '?'}")
        ratio = f"{r['step_ms'] / base:.3f}" if base and r.get("step_ms") else ""
        print(f"{r['name']:<18} {r['tokens_per_second'] or 0:>10,.0f} {r['step_ms'] or 0:>8.2f} {ratio:>9}  {same}")
    for r in results:
        if r.get("attention"):
            print(f"{r['name']}: {' | '.join(r['attention'])}")
    if args.logs:
        dest = Path(args.logs)
        dest.mkdir(parents=True, exist_ok=True)
        for f in tmp.glob("*.log"):
            shutil.copy(f, dest / f"det-{f.name}")
        (dest / "det-results.json").write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
