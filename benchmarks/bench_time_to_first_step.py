"""Time from `envkit run` to its first step with torch.compile on, cold and warm, against a plain
compiled loop of the same model; and the throughput after the warm-up.

    python benchmarks/bench_time_to_first_step.py --steps 60                  # GPT-2 small, batch 16 (CUDA)
    python benchmarks/bench_time_to_first_step.py --steps 60 --cifar          # ResNet-18 on CIFAR-10, batch 128
    python benchmarks/bench_time_to_first_step.py --steps 60 --set training.compile_scope=blocks
    python benchmarks/bench_time_to_first_step.py --device cpu --small --steps 4   # a smoke check on the CPU

Each measurement is a fresh process on data the script writes to a temporary folder (random uint16
tokens for templates/train/gpt2_small_tokens.yaml, random CIFAR-10 binary records for
templates/train/cifar10.yaml), the clock started when the process is and stopped at the plain progress
line `step 1/` (printed when the first step has ended, compilation included):
- cold: envkit's cache (ENVKIT_CACHE_DIR), Inductor's (TORCHINDUCTOR_CACHE_DIR) and Triton's
  (TRITON_CACHE_DIR) all fresh and empty: a new machine;
- warm: envkit's cache kept from the cold run, Inductor's and Triton's fresh again: another machine
  that got envkit's compile cache (training.compile_cache), the case it is for. Its summary.json's
  median window rate is the throughput after the warm-up;
- again: the same machine's second run, every cache as the cold run left it (Triton's compiled
  kernels too, which envkit's cache does not carry where torch's artifacts leave them out);
- plain: a hand-written loop of the same model (envkit's GPT or ResNet-18 definition, torch.compile
  of the forward and the loss as one graph, bf16 autocast on CUDA, fused AdamW / SGD), caches cold;
- plain again: the plain loop's second run, Inductor's and Triton's caches as its first left them:
  the fastest known warm start of the same model, beside envkit's `again`.
Prints a table (`--json`: one object) with the compile cache's lines and torch's compile counters.
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
TEMPLATES = ROOT / "templates" / "train"
SMALL_GPT = ["model.n_layer=2", "model.n_head=2", "model.n_embd=64", "model.block_size=64", "dataset.vocab_size=512"]
SMALL_CIFAR = ["model.width=8"]


def write_data(tmp: Path, cifar: bool, vocab: int) -> Path:
    sys.path.insert(0, str(ROOT))
    import torch

    if cifar:
        from bench_resnet_cifar import write_random_cifar10

        return write_random_cifar10(tmp / "cifar-10-batches-bin", per_file=2000, test=500)
    from envkit.train.data.tokens import write_tokens

    folder = tmp / "tokens"
    g = torch.Generator().manual_seed(0)
    for name, n in (("train.bin", 1 << 22), ("val.bin", 1 << 16)):
        write_tokens(folder / name, torch.randint(vocab, (n,), generator=g), "uint16")
    return folder


def settings(args, data: Path) -> list[str]:
    batch = args.batch or (128 if args.cifar else 16)
    out = [f"dataset.path={data}", f"training.max_steps={args.steps}", f"training.batch_size={batch}", "training.grad_accum=1",
           "training.epochs=null", "training.compile=true", "eval.every_steps=0", "checkpoint.every_steps=0",
           f"logging.every_steps={args.log_every}", "logging.progress=plain", "experiment.name=ttfs"]
    if args.cifar:
        out += ["dataset.augment=false"]  # the same batches for the plain loop, no crop/flip work in the timing
    if args.device:
        out.append(f"device.type={args.device}")
    if args.small:
        out += SMALL_CIFAR if args.cifar else SMALL_GPT
    return out + list(args.set)


def fresh_env(tmp: Path, name: str, envkit_cache: Path, torch_caches: str | None = None, tree: Path = ROOT) -> dict:
    d = tmp / f"caches-{torch_caches or name}"
    return dict(os.environ, PYTHONPATH=str(tree), PYTHONUNBUFFERED="1", ENVKIT_CACHE_DIR=str(envkit_cache),
                TORCHINDUCTOR_CACHE_DIR=str(d / "inductor"), TRITON_CACHE_DIR=str(d / "triton"))


def timed(argv: list[str], env: dict, cwd: Path, marker: str, log: Path) -> tuple[float, str]:
    """(seconds from the start to the first line starting with `marker`, the whole output)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd, text=True)
    seen, lines, stamped = None, [], []
    for line in proc.stdout:
        lines.append(line)
        stamped.append(f"{time.perf_counter() - t0:8.2f}s {line}")  # the log says when each line came: a timeline of the start
        if seen is None and line.startswith(marker):
            seen = time.perf_counter() - t0
    text = "".join(lines)
    log.write_text("".join(stamped))
    if proc.wait() != 0 or seen is None:
        raise SystemExit(f"{' '.join(argv[:4])} failed (exit {proc.returncode}); its output: {log}\n{text[-3000:]}")
    return seen, text


def envkit_run(args, tmp: Path, data: Path, name: str, envkit_cache: Path, torch_caches: str | None = None) -> dict:
    template = TEMPLATES / ("cifar10.yaml" if args.cifar else "gpt2_small_tokens.yaml")
    argv = [sys.executable, "-m", "envkit", "run", str(template), "--run-id", name, "--resume", "never"]
    for s in settings(args, data):
        argv += ["--set", s]
    seconds, text = timed(argv, fresh_env(tmp, name, envkit_cache, torch_caches, Path(args.tree).resolve()), tmp, "step 1/",
                          tmp / f"{name}.log")
    s = json.loads((tmp / "runs" / "ttfs" / name / "summary.json").read_text())
    unit = "tokens" if not args.cifar else "samples"
    return {"first_step_s": round(seconds, 2), "per_second": s.get(f"{unit}_per_second_median_window"), "unit": unit,
            "compile": s.get("compile"), "mode": s.get("derived", {}).get("training.compile_mode"),
            "cache": (s.get("compile_cache") or {}).get("notes"), "counters": s.get("compile_stats"),
            "device_name": s.get("device_name")}


def plain_run(args, tmp: Path, name: str = "plain") -> dict:
    argv = [sys.executable, str(Path(__file__).resolve()), "--plain-child", "--steps", str(args.steps),
            "--batch", str(args.batch or (128 if args.cifar else 16))] + (["--cifar"] if args.cifar else []) \
        + (["--small"] if args.small else []) + (["--device", args.device] if args.device else [])
    seconds, text = timed(argv, fresh_env(tmp, name, tmp / "plain-envkit-cache", torch_caches="plain"), tmp, "first step done",
                          tmp / f"{name}.log")
    rate = [line for line in text.splitlines() if line.startswith("median ")]
    return {"first_step_s": round(seconds, 2), "per_second": float(rate[-1].split()[1]) if rate else None}


def plain_child(args) -> None:
    """The plain loop: model, compile, one optimizer, steps; `first step done` after the first step's sync."""
    sys.path.insert(0, str(ROOT))
    import torch
    import torch.nn.functional as F

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    cuda = device == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(0)
    if args.cifar:
        from envkit.train.run.resnets import build_resnet

        model, _ = build_resnet(18, 10, 3, "cifar", 8 if args.small else 64)
        model = model.to(device, memory_format=torch.channels_last)
        x = torch.randn(args.batch, 3, 32, 32, device=device).to(memory_format=torch.channels_last)
        y = torch.randint(10, (args.batch,), device=device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
        per_step = args.batch
    else:
        from envkit.train.run.models import GPT

        vocab, T = (512, 64) if args.small else (50304, 1024)
        model = (GPT(vocab, T, 2, 2, 64) if args.small else GPT(vocab, T, 12, 12, 768)).to(device)
        x = torch.randint(vocab, (args.batch, T), device=device)
        y = torch.randint(vocab, (args.batch, T), device=device)
        opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=cuda)
        per_step = args.batch * T

    def loss_fn(x, y):
        logits = model(x)
        return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))

    step = torch.compile(loss_fn)
    ctx = torch.autocast(device, dtype=torch.bfloat16) if cuda else torch.autocast(device, enabled=False)
    times = []
    for i in range(args.steps):
        t = time.perf_counter()
        with ctx:
            loss = step(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        float(loss)  # a sync, as envkit's logged steps
        times.append(time.perf_counter() - t)
        if i == 0:
            print("first step done", flush=True)
    later = times[len(times) // 3:] or times
    print(f"median {per_step / statistics.median(later):.1f} per second", flush=True)


def table(results: dict) -> str:
    rows = [f"{'':<11} {'first step':>11} {'after warm-up':>16}  compile / cache"]
    for name, r in results.items():
        rate = f"{r['per_second']:,.0f}/s" if r.get("per_second") else "n/a"
        cache = "; ".join(r.get("cache") or [])
        misses = (r.get("counters") or {}).get("fxgraph_cache_miss")
        extra = f"{r.get('compile') or 'plain torch.compile'}" + (f" | {cache}" if cache else "") \
            + (f" | graphs compiled here: {misses}" if misses is not None else "")
        rows.append(f"{name:<11} {r['first_step_s']:>10.1f}s {rate:>16}  {extra}")
        seconds = (r.get("counters") or {}).get("seconds") or {}
        if seconds:  # torch's own phase timers, the longest first (they nest: compile_inner holds the rest)
            rows.append(f"{'':<11} compile phases: " + ", ".join(f"{k} {v:.1f}s" for k, v in list(seconds.items())[:6]))
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=60, help="steps per run (the throughput is the median window after the first)")
    ap.add_argument("--cifar", action="store_true", help="ResNet-18 on CIFAR-10 (templates/train/cifar10.yaml) instead of GPT-2 small")
    ap.add_argument("--batch", type=int, default=None, help="micro-batch (default: 16 for GPT-2 small, 128 for ResNet-18)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: what envkit picks (CUDA where there is one)")
    ap.add_argument("--small", action="store_true", help="a tiny model of the same kind: a smoke check on the CPU")
    ap.add_argument("--log-every", type=int, default=1, help="logging.every_steps of the envkit runs")
    ap.add_argument("--set", action="append", default=[], help="more `envkit run --set` KEY=VALUE (e.g. training.compile_scope=blocks)")
    ap.add_argument("--tree", default=str(ROOT), help="the envkit tree the runs import (another commit's `git archive`, "
                    "measured beside this one in the same lease); the plain loop always uses this one's model code")
    ap.add_argument("--skip-plain", action="store_true", help="leave out the plain loop")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--plain-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.plain_child:
        plain_child(args)
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="bench-ttfs-"))
    data = write_data(tmp, args.cifar, 512 if args.small else 50304)
    cache = tmp / "envkit-cache"  # fresh and empty for the cold run, kept for the warm one
    results = {"cold": envkit_run(args, tmp, data, "cold", cache), "warm": envkit_run(args, tmp, data, "warm", cache),
               # the same machine again: envkit's, Inductor's and Triton's caches all as the cold run left them
               "again": envkit_run(args, tmp, data, "again", cache, torch_caches="cold")}
    if not args.skip_plain:
        results["plain"] = plain_run(args, tmp)
        results["plain again"] = plain_run(args, tmp, "plain-again")  # Inductor's and Triton's caches as "plain" left them
    out = {"model": "resnet18-cifar" if args.cifar else "gpt2-small", "steps": args.steps, "settings": list(args.set),
           "folder": str(tmp), "results": results}
    print(json.dumps(out, indent=2) if args.json else table(results))
    if not args.json:
        print(f"logs, each line with its time from the start: {tmp}/*.log")
    return 0


if __name__ == "__main__":
    sys.exit(main())
