"""`envkit reproduce` on a GPU: GPT-2 small on tokens and ResNet-18 on CIFAR-10, each trained with
training.deterministic false (the profile's settings: bf16, compile, on a Hopper CUDA graphs and
cudnn benchmark) and true, each run reproduced in a fresh venv from its own pylock.toml, and the
throughput of each beside the other (the cost of determinism).

    python benchmarks/bench_reproduce.py                     # both models, 60 steps each
    python benchmarks/bench_reproduce.py --models gpt2 --steps 100 --venv /tmp/repro-venv
    python benchmarks/bench_reproduce.py --quick             # tiny shapes: minutes on a CPU

Data is made here (the GPU machine reaches no network): random GPT-2 tokens (vocabulary 50,304,
uint16) and a random CIFAR-10 binary folder (benchmarks/bench_resnet_cifar.py's writer). The runs
go to --out (default a temporary folder); the venv `envkit reproduce` builds is --venv (default:
envkit's cache, one per lock, reused by the next reproduction of the same lock when nothing drifted).
Prints one row per run: outcome, exit code, the largest |difference| of loss and at which step, the
tolerance (0: identical required), and tokens/s or samples/s of the original run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def gpt2_data(folder: Path, tokens: int) -> Path:
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name, n in (("train.bin", tokens), ("val.bin", tokens // 10)):
        rng.integers(0, 50257, size=n, dtype=np.uint16).tofile(folder / name)
    (folder / "meta.json").write_text(json.dumps({"vocab_size": 50304}))
    return folder


def cifar_data(folder: Path, per_file: int) -> Path:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_resnet_cifar import write_random_cifar10

    return write_random_cifar10(folder, per_file, per_file // 5)


def envkit(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envkit", *args], cwd=cwd, capture_output=True, text=True, check=False)


def one(model: str, det: bool, args, out: Path, data: dict) -> dict:
    template = {"gpt2": "gpt2_small_tokens.yaml", "cifar": "cifar10.yaml"}[model]
    sets = [f"training.deterministic={'true' if det else 'false'}", f"training.max_steps={args.steps}",
            "eval.every_steps=0", "checkpoint.every_steps=0", "logging.every_steps=5", f"dataset.path={data[model]}"]
    if model == "gpt2":
        sets += ["training.batch_size=16", "training.grad_accum=1"] + (["model.n_layer=2", "model.n_embd=128", "model.n_head=2",
                                                                         "model.block_size=128"] if args.quick else [])
    else:
        sets += ["training.epochs=null"] + (["model.width=8"] if args.quick else [])
    run_id = f"{model}-{'det' if det else 'default'}"
    r = envkit("run", str(ROOT / "templates" / "train" / template), "--run-id", run_id, "--resume", "never",
               *[a for s in sets for a in ("--set", s)], cwd=out)
    if r.returncode != 0:
        return {"run": run_id, "error": (r.stderr.strip().splitlines() or ["?"])[-1]}
    run_dir = next(out.glob(f"runs/*/{run_id}"))
    summary = json.loads((run_dir / "summary.json").read_text())
    rep = envkit("reproduce", str(run_dir), "--json", *(["--venv", args.venv] if args.venv else []), cwd=out)
    try:
        res = json.loads(rep.stdout)
    except ValueError:
        return {"run": run_id, "error": (rep.stderr.strip().splitlines() or ["?"])[-1], "exit": rep.returncode}
    loss = res["metrics"].get("loss", {})
    speed = summary.get("tokens_per_second") or summary.get("samples_per_second")
    return {"run": run_id, "outcome": res["outcome"], "exit": rep.returncode, "max_abs_loss": loss.get("max_abs"),
            "at_step": loss.get("at_step"), "tolerance": (res.get("tolerance") or {}).get("loss"), "why": res["why"],
            "per_second": speed, "unit": "tokens/s" if summary.get("tokens_per_second") else "samples/s",
            "device": summary.get("device_name"), "precision": summary.get("precision"), "compile": summary.get("compile")}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["gpt2", "cifar"], choices=["gpt2", "cifar"])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--venv", help="where `envkit reproduce` builds its venv (default: envkit's cache)")
    ap.add_argument("--out", help="folder for the data and the runs (default: a temporary one)")
    ap.add_argument("--quick", action="store_true", help="tiny shapes (a CPU check of the script)")
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="bench-reproduce-"))
    data = {}
    if "gpt2" in args.models:
        data["gpt2"] = gpt2_data(out / "tokens", 16 * 1024 * (args.steps + 10))
    if "cifar" in args.models:
        data["cifar"] = cifar_data(out / "cifar", 640 if args.quick else 10_000)
    rows = [one(m, det, args, out, data) for m in args.models for det in (False, True)]
    print(f"runs in {out}")
    for r in rows:
        if "error" in r:
            print(f"{r['run']:<14} error: {r['error']}")
            continue
        print(f"{r['run']:<14} {r['outcome']:<17} exit {r['exit']}  max |dloss| {r['max_abs_loss'] or 0:.3g} at step {r['at_step']}  "
              f"tolerance {r['tolerance'] if r['tolerance'] is not None else '-'}  {r['per_second']:,.0f} {r['unit']}  "
              f"({r['device']}, {r['precision']}, compile {r['compile']}): {r['why']}")
    print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
