"""Data-parallel scaling of a plain hand-written DDP or FSDP2 loop: the reference `envkit run --nproc-per-node N`
is held to (benchmarks/bench_ddp_scaling.py measures envkit's side; run both in one lease).

    python benchmarks/bench_plain_ddp.py                         # CUDA: GPT-2 small, batch 16 per GPU, 1 and 2 processes
    python benchmarks/bench_plain_ddp.py --nproc 1 2 4 --batch 32 --bucket-mb 100
    python benchmarks/bench_plain_ddp.py --smoke                 # a tiny GPT on the CPU (gloo): seconds
    python benchmarks/bench_plain_ddp.py --parallel fsdp --nproc 2 --size 1.5b
    python benchmarks/bench_plain_ddp.py --parallel fsdp --nproc 2 --size 6.7b

--parallel fsdp is torchtitan's wrapping instead of DDP: the model built on the meta device, each block
compiled on its own, then `fully_shard` per block (bf16 weights, fp32 gradient reduction; every block
but the last resharded after its forward), then the root; the weights initialised on the GPU after
sharding; 6.7b with each block's activations checkpointed. --size as bench_ddp_scaling.py's.

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
SIZES = {"small": ([], 16),  # the same presets as bench_ddp_scaling.py: (model overrides, batch per GPU)
         "1.5b": (["model.n_layer=48", "model.n_head=25", "model.n_embd=1600"], 8),
         "6.7b": (["model.n_layer=32", "model.n_head=32", "model.n_embd=4096"], 8)}


def shard_like_torchtitan(model, device, checkpoint_blocks: bool) -> None:
    """fully_shard each block (compiled first, its activations checkpointed if asked), then the root."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.utils.checkpoint import checkpoint

    mesh = init_device_mesh(device.type, (int(os.environ["WORLD_SIZE"]),))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if device.type == "cuda" else None
    kw = {"mesh": mesh, **({"mp_policy": mp} if mp else {})}
    for i, block in enumerate(model.blocks):
        if checkpoint_blocks:
            block.forward = __import__("functools").partial(checkpoint, block.forward, use_reentrant=False)
        if device.type == "cuda":
            block.compile()
        fully_shard(block, reshard_after_forward=i < len(model.blocks) - 1, **kw)
    fully_shard(model, **kw)


def init_weights(model) -> None:
    """The GPT's own initialisation (envkit.train.run.models.GPT), run again on the sharded weights."""
    import math

    import torch

    with torch.no_grad():
        model.apply(model._init)
        for name, p in model.named_parameters():
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * model.n_layer))


def worker(args) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: N817 - its usual name

    from envkit.config.config import load_config
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
        sets = SMOKE if args.smoke else SIZES[args.size][0]
        cfg = load_config(TEMPLATE, overrides=sets + [f"dataset.path={data}"])
    block = cfg.model.block_size
    torch.manual_seed(0)
    fsdp = args.parallel == "fsdp"
    with torch.device("meta" if fsdp else "cpu"):
        model = build_model(cfg, {"vocab_size": VOCAB, "block_size": block}, device.type)
    if fsdp:
        shard_like_torchtitan(model, device, checkpoint_blocks=args.size == "6.7b")
        model.to_empty(device=device)
        init_weights(model)
    else:
        model.to(device)

    class ForwardLoss(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x, y):
            logits = self.m(x)
            return F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.reshape(-1))

    step_module = ForwardLoss(model)
    if fsdp:  # the blocks are compiled; the loss on the head's logits stays eager, as torchtitan's
        ddp = step_module
    else:
        if cuda:
            step_module = torch.compile(step_module)
        ddp = DDP(step_module, device_ids=[local] if cuda else None, gradient_as_bucket_view=True, bucket_cap_mb=args.bucket_mb)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}], lr=6e-4,
                            betas=(0.9, 0.95), **({"fused": True} if cuda else {}))
    ctx = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else torch.autocast("cpu", enabled=False)
    g = torch.Generator(device=device).manual_seed(rank)
    bs = args.batch or SIZES[args.size][1]
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
        peak = torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None
        print("RESULT " + json.dumps({"nproc": world, "tokens_per_second": statistics.median(rates), "windows": rates,
                                      "peak_memory_gib": peak}), flush=True)
    dist.destroy_process_group()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nproc", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--parallel", choices=("ddp", "fsdp"), default="ddp")
    ap.add_argument("--size", choices=sorted(SIZES), default="small", help="the GPT's size (default GPT-2 small)")
    ap.add_argument("--batch", type=int, help="per process (default: the size's)")
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
    passed = [f"--parallel={args.parallel}", f"--size={args.size}", *([f"--batch={args.batch}"] if args.batch else []),
              f"--bucket-mb={args.bucket_mb}", f"--window={args.window}", f"--warmup={args.warmup}",
              f"--windows={args.windows}", *(["--smoke"] if args.smoke else [])]
    results: dict[int, list[float]] = {}
    peaks: dict[int, float | None] = {}
    for _ in range(args.repeats):
        for n in args.nproc:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}", __file__, "--worker", *passed]
            env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if proc.returncode != 0 or line is None:
                print(f"{n} processes failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}", file=sys.stderr)
                return 1
            row = json.loads(line[7:])
            results.setdefault(n, []).append(row["tokens_per_second"])
            peaks[n] = row.get("peak_memory_gib")
    base = statistics.median(results[min(results)])
    out = {n: {"tokens_per_second": statistics.median(r), "rounds": r, "scaling": statistics.median(r) / base,
               "peak_memory_gib": peaks.get(n)} for n, r in results.items()}
    if args.json:
        print(json.dumps({"parallel": args.parallel, "size": args.size, "batch_per_process": args.batch or SIZES[args.size][1],
                          "bucket_mb": args.bucket_mb, "runs": out}, indent=2))
        return 0
    print(f"plain {args.parallel.upper()} loop, {'tiny GPT on the CPU (smoke)' if args.smoke else 'GPT ' + args.size}, "
          f"batch {args.batch or SIZES[args.size][1]} per process" + (f", bucket {args.bucket_mb:g} MB" if args.parallel == "ddp" else ""))
    for n, r in out.items():
        print(f"  {n} proc  {r['tokens_per_second']:>12,.0f} tokens/s  scaling x{r['scaling']:.3f} of {min(results)} "
              f"(rounds: {', '.join(f'{x:,.0f}' for x in r['rounds'])}), peak {r['peak_memory_gib'] or 0:.1f} GiB a GPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
