"""Data-parallel scaling of `envkit run`: tokens/s with 1 process and with N (torchrun + DDP), as a
user runs it, on GPT-2 small (templates/train/gpt2_small_tokens.yaml) over a folder of random tokens.

    python benchmarks/bench_ddp_scaling.py                   # 1 and 2 processes, batch 16 per GPU
    python benchmarks/bench_ddp_scaling.py --nproc 1 2 4 --set training.grad_accum=4
    python benchmarks/bench_ddp_scaling.py --try training.ddp_comm_dtype=bf16 --try training.ddp_bucket_mb=100 --profile

    python benchmarks/bench_ddp_scaling.py --size 1.5b --nproc 1 2 --try training.parallel=fsdp
    python benchmarks/bench_ddp_scaling.py --size 6.7b --nproc 2 --set training.parallel=fsdp --try training.parallel=ddp
    python benchmarks/bench_ddp_scaling.py --size cifar --nproc 1 2 --steps 400 --try training.ddp_reduce=overlap

--size picks the GPT: small (GPT-2 small, 124M, batch 16 a GPU), 1.5b (48 layers, width 1600, batch 8)
or 6.7b (32 layers, width 4096, batch 8, activation checkpointing: weights, gradients and AdamW state
take 106 GB, more than one 80 GB GPU holds, so it trains only sharded); cifar is ResNet-18 on CIFAR-10
(templates/train/cifar10.yaml, batch 128 a GPU, random images): its rates are images/s. A run that fails says the
last line of its error (an out-of-memory, say) beside its peak memory.

--try KEY=VALUE[,KEY=VALUE] (repeatable) adds a run at the largest --nproc with those overrides, scaled
against the same 1-process run; a part `env:NAME=VALUE` sets an environment variable for that run
instead (`--try env:NCCL_PROTO=Simple`). --profile records steps 41-43 of the smallest and the largest plain run with
`--profile-steps` and prints rank 0's device timeline (idle time, and how much of the all-reduce
no computation hid: the number that says whether DDP overlaps).

Prints each run's tokens/s and MFU (median of the trainer's logging windows after the first, from
summary.json), the scaling against one process, and how many lines of torch/torchrun noise (the
OMP_NUM_THREADS banner, the barrier() device warning) the run printed. --json for machines.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TEMPLATE = ROOT / "templates" / "train" / "gpt2_small_tokens.yaml"
# --size: (model overrides, batch per GPU). 12 L d^2 parameters a GPT block plus the tied 50,304 x d embedding.
SIZES = {"small": ([], 16),
         "1.5b": (["model.n_layer=48", "model.n_head=25", "model.n_embd=1600"], 8),
         "6.7b": (["model.n_layer=32", "model.n_head=32", "model.n_embd=4096", "training.activation_checkpointing=full"], 8),
         "cifar": ([], 128)}  # ResNet-18 on CIFAR-10 (templates/train/cifar10.yaml), random images in CIFAR's binary format
NOISE = ("OMP_NUM_THREADS", "barrier(): using the device", "UserWarning")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nproc", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--size", choices=sorted(SIZES), default="small", help="the GPT's size (default GPT-2 small)")
    ap.add_argument("--batch", type=int, help="per GPU (default: the size's)")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--set", action="append", default=[], help="extra config override (repeatable)")
    ap.add_argument("--try", dest="tries", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE]")
    ap.add_argument("--profile", action="store_true", help="device timelines of the smallest and the largest run (steps 41-43)")
    ap.add_argument("--traces", type=Path, help="copy the profiled runs' chrome traces (gzip) here")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.profile and args.steps < 50:
        ap.error("--profile needs --steps 50 or more (steps 41-43 are recorded, after compilation)")
    model_sets, default_batch = SIZES[args.size]
    args.batch = args.batch or default_batch
    args.set = model_sets + args.set
    runs = [(n, [], False) for n in args.nproc] + [(max(args.nproc), t.split(","), False) for t in args.tries]
    if args.profile:  # the smallest and the largest, side by side: what the extra processes cost
        runs += [(n, [], True) for n in sorted({min(args.nproc), max(args.nproc)})]

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        import torch

        from envkit.train.data.tokens import write_tokens

        g = torch.Generator().manual_seed(0)
        if args.size == "cifar":
            from bench_resnet_cifar import write_random_cifar10

            data = write_random_cifar10(Path(tmp) / "cifar-10-batches-bin", 10_000, 1_000)
        else:
            for name in ("train.bin", "val.bin"):
                write_tokens(data / name, torch.randint(50304, (1 << 24,), generator=g), "uint16")
        template = ROOT / "templates" / "train" / "cifar10.yaml" if args.size == "cifar" else TEMPLATE
        for i, (n, extra, profile) in enumerate(runs):
            run_id = f"r{i}-n{n}"
            cmd = [sys.executable, "-m", "envkit", "run", str(template), "--run-id", run_id, "--resume", "never",
                   "--nproc-per-node", str(n), "--set", f"dataset.path={data}", "--set", f"training.batch_size={args.batch}",
                   "--set", "training.grad_accum=1", "--set", f"training.max_steps={args.steps}", "--set", "training.warmup_steps=10",
                   "--set", "eval.every_steps=0", "--set", "eval.batches=2", "--set", f"checkpoint.every_steps={args.steps}",
                   "--set", "checkpoint.keep_last=1", "--set", "logging.every_steps=10", "--set", "logging.progress=plain",
                   *[x for s in args.set + extra if not s.startswith("env:") for x in ("--set", s)],
                   *(["--profile-steps", "41:43"] if profile else [])]
            env = {**os.environ, **dict(p[4:].split("=", 1) for p in extra if p.startswith("env:"))}
            res = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, env=env)
            out = res.stdout + res.stderr
            run_dir = next((Path(tmp) / "runs").glob(f"*/{run_id}"), Path(tmp) / "runs" / "gpt2-small-tokens" / run_id)
            summary_path = run_dir / "summary.json"
            s = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
            noise = [line for line in out.splitlines() if any(w in line for w in NOISE)]
            parallel = next((line.strip() for line in out.splitlines() if "training.parallel: " in line), None)
            timeline = None
            if profile:
                txt = sorted(run_dir.glob("profile_steps_41-43*.txt"))
                head = txt[0].read_text().split("\n\n")[0] if txt else ""
                timeline = head if head.startswith("device timeline") else f"no device timeline ({'a CPU run' if txt else 'no profile written'})"
                if args.traces:
                    import gzip
                    import shutil

                    args.traces.mkdir(parents=True, exist_ok=True)
                    for js in run_dir.glob("profile_steps_41-43*.json"):
                        with js.open("rb") as src, gzip.open(args.traces / f"{run_id}-{js.name}.gz", "wb") as dst:
                            shutil.copyfileobj(src, dst)
            error = None if res.returncode == 0 else next((line.strip()[:300] for line in reversed(out.splitlines())
                                                           if "error" in line.lower() or "out of memory" in line.lower()), None)
            results.append({"nproc": n, "set": extra, "profile": profile, "timeline": timeline, "returncode": res.returncode,
                            "peak_memory_gb": round(s["peak_memory_mb"] / 1024, 1) if s.get("peak_memory_mb") else None,
                            "error": error,
                            "tokens_per_second": s.get("tokens_per_second_median_window") or s.get("samples_per_second_median_window"),
                            "mfu": s.get("mfu"), "status": s.get("status"), "device_name": s.get("device_name"),
                            "final_loss": s.get("final_loss"), "unit": "images" if args.size == "cifar" else "tokens",
                            "noise_lines": noise, "parallel_line": parallel})
            results[-1]["scaling"] = _scaling(results[-1], results[0])
            # each run's line as it ends: a call cut by its time limit still leaves the runs it finished
            print(f"[{i + 1}/{len(runs)}] " + describe(results[-1]), file=sys.stderr, flush=True)
            if res.returncode != 0:
                print(out[-4000:], file=sys.stderr)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0 if all(r["returncode"] == 0 for r in results) else 1
    for r in results:
        print(describe(r))
        for line in r["noise_lines"][:5]:
            print(f"    noise: {line}")
        if r["timeline"]:
            print("    " + r["timeline"].replace("\n", "\n    "))
    return 0 if all(r["returncode"] == 0 for r in results) else 1


def _scaling(run: dict, first: dict) -> float | None:
    """Against the first run (the smallest --nproc; a 6.7b run has no one-GPU baseline: its 2 processes are it)."""
    base, tps = first["tokens_per_second"], run["tokens_per_second"]
    return tps / base if base and tps else None


def describe(r: dict) -> str:
    tps = f"{r['tokens_per_second']:,.0f}" if r["tokens_per_second"] else "n/a"
    mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] else "n/a"
    scale = f"x{r['scaling']:.3f}" if r["scaling"] else "n/a"
    label = f" ({', '.join(r['set'])})" if r["set"] else " (profiled)" if r["profile"] else ""
    lines = [f"{r['nproc']} proc{label}: {tps} {r.get('unit', 'tokens')}/s | MFU {mfu} | scaling {scale} vs the first | {r['status']} "
             f"({r['device_name']}) | peak {r['peak_memory_gb'] or '?'} GB a GPU | final loss {r.get('final_loss')} | "
             f"torch/torchrun noise lines: {len(r['noise_lines'])}"]
    lines += [f"    {r['parallel_line']}"] if r.get("parallel_line") else []
    lines += [f"    failed: {r['error']}"] if r["error"] else []
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
