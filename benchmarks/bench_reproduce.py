"""`envkit reproduce` on a GPU: GPT-2 small on tokens and ResNet-18 on CIFAR-10, each trained with
training.deterministic false (the profile's settings: bf16, compile, on a Hopper CUDA graphs and
cudnn benchmark) and true, each run reproduced in a fresh venv from its own pylock.toml, and the
throughput of each beside the other (the cost of determinism).

    python benchmarks/bench_reproduce.py                     # both models, 60 steps each
    python benchmarks/bench_reproduce.py --models gpt2 --steps 100 --venv /tmp/repro-venv
    python benchmarks/bench_reproduce.py --quick             # tiny shapes: minutes on a CPU
    python benchmarks/bench_reproduce.py --repeat --reproduce det --cifar-steps 400   # the determinism figures
    python benchmarks/bench_reproduce.py --models gpt2 --nproc 2 --repeat --reproduce det   # deterministic DDP on 2 GPUs

--repeat trains each deterministic config a second time and compares its metrics with the first's
(identical at every logged step is required); --reproduce det reproduces the deterministic runs
only. The step time is the median of the logged windows after the first (summary.json's
*_per_second_median_window), so compilation and CUDA-graph recording are left out.

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


def _losses(run_dir: Path) -> dict:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {r["step"]: {k: r[k] for k in ("loss", "grad_norm") if k in r} for r in rows if "loss" in r}


def train(model: str, det: bool, args, out: Path, data: dict, run_id: str) -> tuple[Path | None, str | None]:
    template = {"gpt2": "gpt2_small_tokens.yaml", "cifar": "cifar10.yaml"}[model]
    steps = args.cifar_steps if model == "cifar" else args.steps
    sets = [f"training.deterministic={'true' if det else 'false'}", f"training.max_steps={steps}",
            "eval.every_steps=0", "checkpoint.every_steps=0", f"logging.every_steps={max(5, steps // 20)}", f"dataset.path={data[model]}"]
    if model == "gpt2":
        sets += ["training.batch_size=16", "training.grad_accum=1"] + (["model.n_layer=2", "model.n_embd=128", "model.n_head=2",
                                                                         "model.block_size=128"] if args.quick else [])
    else:
        sets += ["training.epochs=null"] + (["model.width=8"] if args.quick else [])
    sets += args.set
    profile = ["--profile-steps", args.profile_steps] if args.profile_steps and not run_id.endswith("-again") else []
    nproc = ["--nproc-per-node", str(args.nproc)] if args.nproc > 1 else []
    r = envkit("run", str(ROOT / "templates" / "train" / template), "--run-id", run_id, "--resume", "never",
               *[a for s in sets for a in ("--set", s)], *profile, *nproc, cwd=out)
    if r.returncode != 0:
        return None, (r.stderr.strip().splitlines() or ["?"])[-1]
    return next(out.glob(f"runs/*/{run_id}")), None


def one(model: str, det: bool, args, out: Path, data: dict) -> dict:
    run_id = f"{model}-{'det' if det else 'default'}"
    run_dir, error = train(model, det, args, out, data, run_id)
    if error:
        return {"run": run_id, "error": error}
    summary = json.loads((run_dir / "summary.json").read_text())
    unit = "tokens" if summary.get("tokens_per_second") else "samples"
    speed = summary.get(f"{unit}_per_second_median_window") or summary.get(f"{unit}_per_second")
    per_step = (16 * (128 if args.quick else 1024) if model == "gpt2" else 128) * args.nproc
    row = {"run": run_id, "per_second": speed, "unit": f"{unit}/s", "step_ms": 1000 * per_step / speed if speed else None,
           "device": summary.get("device_name"), "precision": summary.get("precision"), "compile": summary.get("compile"),
           "compile_mode": (summary.get("derived") or {}).get("training.compile_mode")}
    log = (run_dir / "train.log").read_text()
    row["determinism_lines"] = [line.split("training.deterministic: ", 1)[1] for line in log.splitlines() if "training.deterministic: " in line]
    if det and args.repeat:
        again, error = train(model, det, args, out, data, run_id + "-again")
        if error:
            row["again"] = f"error: {error}"
        else:
            a, b = _losses(run_dir), _losses(again)
            differ = [s for s in a if a[s] != b.get(s)]
            row["again"] = (f"identical at all {len(a)} logged steps" if a and not differ and a.keys() == b.keys() else
                            f"different at {len(differ)} of {len(a)} logged steps (first: step {differ[0] if differ else '?'})")
            s2 = json.loads((again / "summary.json").read_text())
            row["again_per_second"] = s2.get(f"{unit}_per_second_median_window")
    if args.reproduce == "none" or (args.reproduce == "det" and not det):
        return {**row, "outcome": "not reproduced", "exit": None, "why": ""}
    rep = envkit("reproduce", str(run_dir), "--json", *(["--venv", args.venv] if args.venv else []), cwd=out)
    try:
        res = json.loads(rep.stdout)
    except ValueError:
        return {**row, "outcome": "error", "why": (rep.stderr.strip().splitlines() or ["?"])[-1], "exit": rep.returncode}
    loss = res["metrics"].get("loss", {})
    return {**row, "outcome": res["outcome"], "exit": rep.returncode, "max_abs_loss": loss.get("max_abs"),
            "at_step": loss.get("at_step"), "tolerance": (res.get("tolerance") or {}).get("loss"), "why": res["why"]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["gpt2", "cifar"], choices=["gpt2", "cifar"])
    ap.add_argument("--steps", type=int, default=60, help="GPT-2 small's steps")
    ap.add_argument("--cifar-steps", type=int, default=60, help="ResNet-18's steps (a 3 ms step: 400 give 20 windows of 60 ms)")
    ap.add_argument("--repeat", action="store_true", help="train each deterministic config twice and compare the metrics")
    ap.add_argument("--reproduce", choices=["all", "det", "none"], default="all", help="which runs `envkit reproduce` checks")
    ap.add_argument("--set", action="append", default=[], help="a config override for every run (repeatable)")
    ap.add_argument("--nproc", type=int, default=1, help="processes (one GPU each, DDP) for every run")
    ap.add_argument("--profile-steps", help="A:B: `envkit run --profile-steps` for the first run of each config (the tables stay in its folder)")
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
        dl = r.get("max_abs_loss")
        print(f"{r['run']:<14} {r['per_second'] or 0:,.0f} {r['unit']} ({r['step_ms'] or 0:.2f} ms a step; {r['device']}, {r['precision']}, "
              f"compile {r['compile']}, mode {r['compile_mode']})"
              + (f" | again: {r['again']} ({r.get('again_per_second') or 0:,.0f})" if "again" in r else "")
              + f" | reproduce: {r['outcome']} exit {r['exit']}" + (f" max |dloss| {dl:.3g} at step {r['at_step']}" if dl is not None else "")
              + (f" tolerance {r['tolerance']}" if r.get("tolerance") is not None else "") + (f": {r['why']}" if r.get("why") else ""))
    for m in args.models:
        base = next((r for r in rows if r["run"] == f"{m}-default" and r.get("step_ms")), None)
        det = next((r for r in rows if r["run"] == f"{m}-det" and r.get("step_ms")), None)
        if base and det:
            print(f"{m}: deterministic step time {det['step_ms']:.2f} ms against {base['step_ms']:.2f}: {det['step_ms'] / base['step_ms']:.3f}x")
    print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
