"""Data-parallel scaling of a plain hand-written DDP loop: the reference `envkit run --nproc-per-node N`
is held to (benchmarks/bench_ddp_scaling.py measures envkit's side; run both in one lease).

    python benchmarks/bench_plain_ddp.py                         # CUDA: GPT-2 small, batch 16 per GPU, 1 and 2 processes
    python benchmarks/bench_plain_ddp.py --nproc 1 2 4 --batch 32 --bucket-mb 100
    python benchmarks/bench_plain_ddp.py --smoke                 # a tiny GPT on the CPU (gloo): seconds

The loop is nanoGPT's, written for speed rather than for features: the model envkit trains
(envkit.train.run.models.build_model on templates/train/gpt2_small_tokens.yaml, vocabulary 50,304),
compiled as forward + cross-entropy in one graph, then wrapped in DistributedDataParallel
(gradient_as_bucket_view, --bucket-mb), bf16 autocast, fused AdamW, gradient clipping, TF32, and the
batches drawn on the GPU (random tokens: no input pipeline at all, which no real loop beats). No
checkpoint, no NaN guard, no logging inside a window. Each process count is its own torchrun; each
prints, from rank 0, the median tokens/s over all processes of windows of --window steps after
--warmup windows; the scaling is that over one process's.
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
sys.path.insert(0, str(ROOT))

TEMPLATE = ROOT / "templates" / "train" / "gpt2_small_tokens.yaml"
SMOKE = ["model.n_layer=2", "model.n_head=2", "model.n_embd=64", "model.block_size=64"]
VOCAB = 50304


def worker(args) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    from envkit.train.run.config import load_config
    from envkit.train.run.models import build_model

    rank, local, world = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    cuda = torch.cuda.is_available() and not args.smoke
    device = torch.device(f"cuda:{local}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        dist.init_process_group("nccl", device_id=device)
    else:
        dist.init_process_group("gloo")
    with tempfile.TemporaryDirectory() as data:  # the config wants a token folder; the loop draws its own tokens
        from envkit.train.data.tokens import write_tokens

        for name in ("train.bin", "val.bin"):
            write_tokens(Path(data) / name, torch.zeros(100_000, dtype=torch.int64), "uint16")
        cfg = load_config(TEMPLATE, overrides=(SMOKE if args.smoke else []) + [f"dataset.path={data}"])
    block = cfg.model.block_size
    torch.manual_seed(0)
    model = build_model(cfg, {"vocab_size": VOCAB, "block_size": block}, device.type).to(device)

    class ForwardLoss(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x, y):
            logits = self.m(x)
            return F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.reshape(-1))

    step_module = ForwardLoss(model)
    if cuda:
        step_module = torch.compile(step_module)
    ddp = DDP(step_module, device_ids=[local] if cuda else None, gradient_as_bucket_view=True, bucket_cap_mb=args.bucket_mb)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}], lr=6e-4,
                            betas=(0.9, 0.95), **({"fused": True} if cuda else {}))
    ctx = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else torch.autocast("cpu", enabled=False)
    g = torch.Generator(device=device).manual_seed(rank)
    bs = args.batch
    rates = []
    for w in range(args.warmup + args.windows):
        t0 = time.perf_counter()
        for _ in range(args.window):
            x = torch.randint(VOCAB, (bs, block + 1), device=device, generator=g)
            with ctx:
                loss = ddp(x[:, :-1], x[:, 1:])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
        float(loss.detach())  # closes the window (a device sync)
        if w >= args.warmup:
            rates.append(bs * block * args.window * world / (time.perf_counter() - t0))
    if rank == 0:
        print("RESULT " + json.dumps({"nproc": world, "tokens_per_second": statistics.median(rates), "windows": rates}), flush=True)
    dist.destroy_process_group()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nproc", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--batch", type=int, default=16, help="per process")
    ap.add_argument("--bucket-mb", type=float, default=25.0, help="DDP's bucket_cap_mb (torch's default 25)")
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3, help="windows left out (compilation)")
    ap.add_argument("--windows", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=1, help="rounds over --nproc (the median of each count)")
    ap.add_argument("--smoke", action="store_true", help="a tiny GPT on the CPU with gloo")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.smoke:
        args.batch, args.window, args.warmup, args.windows = 4, 2, 1, 2
    if args.worker:
        worker(args)
        return 0
    passed = [f"--batch={args.batch}", f"--bucket-mb={args.bucket_mb}", f"--window={args.window}", f"--warmup={args.warmup}",
              f"--windows={args.windows}", *(["--smoke"] if args.smoke else [])]
    results: dict[int, list[float]] = {}
    for _ in range(args.repeats):
        for n in args.nproc:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}", __file__, "--worker", *passed]
            env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if proc.returncode != 0 or line is None:
                print(f"{n} processes failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}", file=sys.stderr)
                return 1
            results.setdefault(n, []).append(json.loads(line[7:])["tokens_per_second"])
    base = statistics.median(results[min(results)])
    out = {n: {"tokens_per_second": statistics.median(r), "rounds": r, "scaling": statistics.median(r) / base} for n, r in results.items()}
    if args.json:
        print(json.dumps({"batch_per_process": args.batch, "bucket_mb": args.bucket_mb, "runs": out}, indent=2))
        return 0
    print(f"plain DDP loop, {'tiny GPT on the CPU (smoke)' if args.smoke else 'GPT-2 small'}, batch {args.batch} per process, "
          f"bucket {args.bucket_mb:g} MB")
    for n, r in out.items():
        print(f"  {n} proc  {r['tokens_per_second']:>12,.0f} tokens/s  scaling x{r['scaling']:.3f} of {min(results)} "
              f"(rounds: {', '.join(f'{x:,.0f}' for x in r['rounds'])})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
