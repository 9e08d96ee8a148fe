"""Does `envkit bench` measure what `envkit run` does, and does `envkit tune` write a profile, on a
real model? One command, three CLI runs on the same config, a table for benchmarks/RESULTS.md.

    python benchmarks/bench_ladder_vs_run.py            # CUDA: GPT-2 small on random tokens, vocab 50,304 (~8 min on an H100)
    python benchmarks/bench_ladder_vs_run.py --quick    # a tiny GPT (same vocabulary) on the CPU: checks the script end to end

What it does, as a user would: writes a token folder of random tokens (train.bin, val.bin) and a
train.yaml from templates/train/gpt2_small_tokens.yaml pointed at it (batch --batch, grad_accum 1,
no eval); then `envkit bench --config` (the whole ladder within --bench-budget), `envkit run` on
the same file (its median logged tokens/s), and `envkit tune --config --budget --tune-budget` into
a throw-away user folder (ENVKIT_CONFIG_DIR, so this machine's own profiles are untouched and the
bench and the run use the shipped profile). Prints the top rung's tokens/s (the last device rung
that ran: everything the profile turns on), envkit run's, their ratio (target >= 0.97), tune's
batch and whether it wrote a profile, and the wall time of each command. --json for machines.

Needs what envkit needs (torch, click, rich, requests, PyYAML, packaging); runs from a checkout
(PYTHONPATH is set to it for the three commands).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "templates" / "train" / "gpt2_small_tokens.yaml"
QUICK_MODEL = {"n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 64}


def envkit(args: list[str], env: dict, cwd: Path, timeout: float) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "envkit", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return res, time.perf_counter() - t0


def write_tokens(folder: Path, vocab: int, n: int) -> None:
    import torch

    sys.path.insert(0, str(ROOT))
    from envkit.train.data.tokens import write_tokens as write

    g = torch.Generator().manual_seed(0)
    for name, count in (("train.bin", n), ("val.bin", max(n // 10, 100_000))):
        write(folder / name, torch.randint(vocab, (count,), generator=g), "uint16")


def write_config(path: Path, data: Path, a) -> None:
    import yaml

    cfg = yaml.safe_load(TEMPLATE.read_text())
    cfg["dataset"]["path"] = str(data)
    cfg["training"].update(batch_size=a.batch, grad_accum=1, max_steps=a.run_steps, warmup_steps=10)
    cfg["eval"] = {"every_steps": 0, "batches": 1}
    cfg["checkpoint"] = {"every_steps": 0, "keep_last": 1}
    cfg["logging"] = {"every_steps": 10, "progress": "none"}
    cfg["device"] = {"type": a.device}
    if a.quick:
        cfg["model"].update(QUICK_MODEL)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a tiny GPT (vocabulary 50,304) on the CPU: minutes, checks the script")
    ap.add_argument("--batch", type=int, default=None, help="micro-batch of the config (default 16; quick 8)")
    ap.add_argument("--run-steps", type=int, default=None, help="envkit run's steps (default 200; quick 30)")
    ap.add_argument("--bench-budget", default=None, help="envkit bench --budget (default 4m; quick 3m)")
    ap.add_argument("--tune-budget", default=None, help="envkit tune --budget (default 150s; quick 60s)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    a.device = "cpu" if a.quick else "cuda"
    a.batch = a.batch or (8 if a.quick else 16)
    a.run_steps = a.run_steps or (30 if a.quick else 200)
    a.bench_budget = a.bench_budget or ("3m" if a.quick else "4m")
    a.tune_budget = a.tune_budget or ("60s" if a.quick else "150s")

    work = Path(tempfile.mkdtemp(prefix="envkit-ladder-vs-run-"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "ENVKIT_CONFIG_DIR": str(work / "config"), "PYTHONUNBUFFERED": "1"}
    env.pop("ENVKIT_TRAIN_INJECT", None)
    t0 = time.perf_counter()
    write_tokens(work / "tok", 50304, 2_000_000 if a.quick else 20_000_000)
    cfg = work / "train.yaml"
    write_config(cfg, work / "tok", a)
    print(f"work folder {work}; config {cfg} (batch {a.batch}, grad_accum 1, {a.device})", file=sys.stderr, flush=True)

    bench_args = ["bench", "--config", str(cfg), "--budget", a.bench_budget, "--json", "--output", str(work / "bench.json")]
    if a.quick:
        bench_args += ["--no-compile", "--seconds", "1"]
    bench, bench_s = envkit(bench_args, env, work, timeout=900)
    print(f"envkit bench: exit {bench.returncode} in {bench_s:.0f} s", file=sys.stderr, flush=True)
    run, run_s = envkit(["run", str(cfg), "--run-id", "r"], env, work, timeout=900)
    print(f"envkit run: exit {run.returncode} in {run_s:.0f} s", file=sys.stderr, flush=True)
    tune_args = ["tune", "--config", str(cfg), "--budget", a.tune_budget, "--json"] + (["--seconds", "1"] if a.quick else [])
    tune, tune_s = envkit(tune_args, env, work, timeout=900)
    print(f"envkit tune: exit {tune.returncode} in {tune_s:.0f} s", file=sys.stderr, flush=True)

    ladder = json.loads((work / "bench.json").read_text()) if (work / "bench.json").exists() else {"rungs": []}
    ran = [r for r in ladder["rungs"] if r["status"] in ("ok", "flagged") and r["name"].startswith(a.device)]
    top = ran[-1] if ran else None
    summaries = list((work / "runs").glob("*/r/summary.json"))
    summary = json.loads(summaries[0].read_text()) if summaries else {}
    run_rate = summary.get("tokens_per_second")
    try:
        tuned = json.loads(tune.stdout)
    except ValueError:
        tuned = {}
    batch = next((s["value"] for s in tuned.get("settings", []) if s["key"] == "batch_size"), None)
    out = {
        "device": ladder.get("device"), "torch": ladder.get("torch"), "profile": ladder.get("profile"), "batch": a.batch,
        "top_rung": top and top["name"], "top_rung_tokens_per_second": top and top["per_second"],
        "run_tokens_per_second": run_rate, "ratio": (top["per_second"] / run_rate) if top and run_rate else None,
        "rungs": [(r["name"], r["status"], r["per_second"], r.get("reason")) for r in ladder["rungs"]],
        "bench_ok": bench.returncode == 0 and all(r["status"] in ("ok", "skip", "flagged") for r in ladder["rungs"]),
        "tune_profile_written": bool(tuned.get("path")), "tune_batch": batch, "tune_stopped": tuned.get("stopped"),
        "wall_s": {"bench": round(bench_s, 1), "run": round(run_s, 1), "tune": round(tune_s, 1),
                   "total": round(time.perf_counter() - t0, 1)},
    }
    if a.json:
        print(json.dumps(out, indent=2))
    else:
        _table(out, a)
    for name, res in (("bench", bench), ("run", run), ("tune", tune)):
        if res.returncode not in (0,):
            print(f"--- envkit {name} exited {res.returncode}; its last stderr lines:\n" + "\n".join(res.stderr.splitlines()[-15:]),
                  file=sys.stderr)
    return 0 if out["ratio"] and out["tune_profile_written"] and out["bench_ok"] else 1


def _table(o: dict, a) -> None:
    def n(v):
        return "-" if v is None else f"{v:,.0f}"

    shape = "tiny GPT (2 x 64, context 64)" if a.quick else "GPT-2 small (12 x 768, context 1024)"
    print(f"{shape}, vocabulary 50,304, batch {o['batch']}, {o['device']}, profile {o['profile']}, torch {o['torch']}")
    print()
    print("| ladder top rung | tokens/s | envkit run tokens/s | top / run | tune batch | profile written | bench s | run s | tune s |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|")
    ratio = "-" if o["ratio"] is None else f"{o['ratio']:.3f}"
    w = o["wall_s"]
    print(f"| {o['top_rung']} | {n(o['top_rung_tokens_per_second'])} | {n(o['run_tokens_per_second'])} | {ratio} | "
          f"{o['tune_batch'] if o['tune_batch'] is not None else '(shipped)'} | {'yes' if o['tune_profile_written'] else 'no'} "
          f"({o['tune_stopped']}) | {w['bench']:.0f} | {w['run']:.0f} | {w['tune']:.0f} |")
    print()
    print("| rung | status | tokens/s | note |")
    print("|---|---|---:|---|")
    for name, status, rate, reason in o["rungs"]:
        print(f"| {name} | {status} | {n(rate)} | {reason or ''} |")
    print(f"\ntotal {w['total']:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
