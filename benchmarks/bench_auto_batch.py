"""Is `training.batch_size: auto` right on a real GPU? For each model: `envkit run` with batch auto
(the probe's choice B, its wall time, the run's compiled peak memory and speed), then the same run
at 2B (the next power of two): does it fit, and with how much memory? A good choice is B fits
within the budget; 2B is over it (or out of memory).

    python benchmarks/bench_auto_batch.py              # CUDA: GPT-2 small (vocab 50,304, context 1024) and ResNet-18 (32x32)
    python benchmarks/bench_auto_batch.py --quick      # a tiny GPT on the CPU: checks the script end to end

Runs the CLI as a user would, from this checkout (PYTHONPATH), under `--profile cuda` (whose batch
is auto; cuda-hopper carries a measured 32 for GPT-2 small). Prints a table for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ladder_vs_run import ROOT, TEMPLATE, envkit, write_tokens  # noqa: E402


def gpt_config(work: Path, quick: bool, steps: int) -> Path:
    import yaml

    cfg = yaml.safe_load(TEMPLATE.read_text())
    cfg["dataset"]["path"] = str(work / "tok")
    cfg["training"].update(grad_accum=1, max_steps=steps, warmup_steps=5)
    if quick:
        cfg["model"].update(n_layer=2, n_head=2, n_embd=64, block_size=64)
    return _finish(work / "gpt.yaml", cfg)


def resnet_config(work: Path, steps: int) -> Path:
    import yaml

    cfg = yaml.safe_load((ROOT / "templates" / "train" / "cnn_quick_test.yaml").read_text())
    cfg["model"] = {"type": "resnet18", "stem": "cifar"}
    cfg["dataset"].update(num_samples=50_000)
    cfg["training"].update(max_steps=steps, grad_accum=1, epochs=None)
    return _finish(work / "resnet18.yaml", cfg)


def _finish(path: Path, cfg: dict) -> Path:
    import yaml

    cfg["eval"] = {"every_steps": 0, "batches": 1}
    cfg["checkpoint"] = {"every_steps": 0, "keep_last": 1}
    cfg["logging"] = {"every_steps": 5, "progress": "none"}
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def one_run(cfg: Path, batch: str, run_id: str, env: dict, work: Path, device: str) -> dict:
    # --profile base on the CPU: the cpu profile's batch 16 would win over a --set auto (a profile's decision stands)
    res, wall = envkit(["run", str(cfg), "--profile", "cuda" if device == "cuda" else "base", "--run-id", run_id,
                        "--set", f"training.batch_size={batch}", "--set", f"device.type={device}"], env, work, timeout=900)
    note = next((ln for ln in res.stderr.splitlines() if "auto ->" in ln), None)
    d = next(iter((work / "runs").glob(f"*/{run_id}")), None)
    summary = json.loads((d / "summary.json").read_text()) if d and (d / "summary.json").exists() else {}
    rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()] if d and (d / "metrics.jsonl").exists() else []
    mem = max((r["memory_mb"] for r in rows if r.get("memory_mb")), default=None)
    ooms = [r for r in rows if r.get("event") == "oom"]
    rate = summary.get("tokens_per_second_median_window") or summary.get("samples_per_second_median_window")
    chosen = int(re.search(r"auto -> (\d+)", note).group(1)) if note else None
    return {"exit": res.returncode, "wall_s": round(wall, 1), "note": note, "batch": chosen or int(batch),
            "peak_mb": mem, "rate": rate, "unit": "tokens/s" if summary.get("tokens_per_second_median_window") else "samples/s",
            "micro_batch": summary.get("micro_batch"), "oom_splits": len(ooms), "status": summary.get("status"),
            "stderr_tail": res.stderr.splitlines()[-5:] if res.returncode else []}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--steps", type=int, default=None, help="optimizer steps per run (default 30; quick 4)")
    ap.add_argument("--models", default="gpt2,resnet18", help="comma-separated: gpt2, resnet18")
    a = ap.parse_args()
    device = "cpu" if a.quick else "cuda"
    steps = a.steps or (4 if a.quick else 30)
    work = Path(tempfile.mkdtemp(prefix="envkit-auto-batch-"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "ENVKIT_CONFIG_DIR": str(work / "config"), "PYTHONUNBUFFERED": "1"}
    env.pop("ENVKIT_TRAIN_INJECT", None)
    out = []
    for model in a.models.split(","):
        if model == "gpt2":
            write_tokens(work / "tok", 50304, 2_000_000 if a.quick else 20_000_000)
            cfg = gpt_config(work, a.quick, steps)
        else:
            cfg = resnet_config(work, steps)
        t0 = time.perf_counter()
        auto = one_run(cfg, "auto", f"{model}-auto", env, work, device)
        print(f"{model}: auto -> {auto['batch']} ({auto['status']}, {time.perf_counter() - t0:.0f} s)\n  {auto['note']}", file=sys.stderr, flush=True)
        double = one_run(cfg, str(2 * auto["batch"]), f"{model}-x2", env, work, device) if auto["exit"] == 0 else None
        out.append({"model": model, "auto": auto, "double": double})
    print(json.dumps(out, indent=2))
    print("\n| model | auto batch | its run: peak GB | rate | wall s | 2B | 2B: peak GB / splits |\n|---|---:|---:|---:|---:|---:|---|")
    for o in out:
        au, db = o["auto"], o["double"] or {}
        gb = lambda mb: "-" if mb is None else f"{mb / 1024:.1f}"  # noqa: E731
        print(f"| {o['model']} | {au['batch']} | {gb(au['peak_mb'])} | {au['rate'] or 0:,.0f} {au['unit']} | {au['wall_s']:.0f} | "
              f"{db.get('batch', '-')} | {gb(db.get('peak_mb'))} / {db.get('oom_splits', '-')} out-of-memory splits |")
    return 0 if all(o["auto"]["exit"] == 0 for o in out) else 1


if __name__ == "__main__":
    sys.exit(main())
