"""envkit's FSDP path on one device: GPT-2 small stepped through `envkit.train.run.sharding` (FSDP2
per block, bf16 MixedPrecisionPolicy, torch.compile per block) next to the same model replicated and
compiled whole, as `envkit run` trains on one GPU; then a sharded checkpoint written and read back.

    python benchmarks/bench_fsdp_one_process.py                 # CUDA: GPT-2 small, batch 16, 2 alternating rounds
    python benchmarks/bench_fsdp_one_process.py --smoke         # a tiny GPT on the CPU (gloo): seconds

One process is a world of one, so nothing is sharded and nothing crosses a wire: the ratio is what
the FSDP machinery itself costs a step (its hooks, the per-block graphs, the bf16 weight copies),
the floor under what FSDP on N GPUs can reach against DDP. It also proves the CUDA half of the path
on a machine with one GPU: `envkit run` refuses fsdp on one process (it would only cost), and CI has
no GPU. Tokens/s is the median of windows of --window steps after --warmup steps; peak memory is
torch.cuda.max_memory_allocated over each run.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from envkit.train.data.tokens import write_tokens  # noqa: E402
from envkit.train.run import sharded_checkpoint as sharded  # noqa: E402
from envkit.train.run import sharding  # noqa: E402
from envkit.config.config import load_config  # noqa: E402
from envkit.train.run.models import build_model  # noqa: E402
from envkit.train.run.optim import build_optimizer  # noqa: E402
from envkit.train.run.speed import compile_kwargs  # noqa: E402
from envkit.train.run.step import LossModule  # noqa: E402

TEMPLATE = ROOT / "templates" / "train" / "gpt2_small_tokens.yaml"
SMOKE = ["model.n_layer=2", "model.n_head=2", "model.n_embd=64", "model.block_size=64"]


FSDP_COMPILE = ("block", "whole", "both", "keep", "grouped", "nomp")  # per block (torchtitan's way); the forward + loss as one; both;
# keep: both, and each block's gathered weights kept from the forward to the backward (reshard_after_forward=False);
# grouped: both, with blocks grouped into units of sharding.UNIT_MIN_PARAMS (what envkit run does); the others shard per block;
# nomp: grouped without the MixedPrecisionPolicy (fp32 weights gathered, bf16 by autocast alone)


def build(cfg, mode: str, device: torch.device, compiled: bool):
    """mode: replicated, or fsdp-block / fsdp-whole / fsdp-both (where torch.compile is applied)."""
    torch.manual_seed(0)
    model = build_model(cfg, {"vocab_size": 50304, "block_size": cfg.model.block_size}, device.type)
    if mode.startswith("fsdp"):
        how = mode.partition("-")[2] or "block"
        per_block = compiled and how in ("block", "both", "keep", "grouped", "nomp")
        sharding.apply_fsdp(model, sharding.shard_units(model, "gpt"), device, "bf16" if device.type == "cuda" and how != "nomp" else "fp32", 1,
                            compile_unit=(lambda u: u.compile(**compile_kwargs("default"))) if per_block else None,
                            reshard_after_forward=how != "keep", min_unit_params=sharding.UNIT_MIN_PARAMS if how in ("grouped", "nomp") else 0)
        step = torch.compile(LossModule(model)) if compiled and how in ("whole", "both", "keep", "grouped", "nomp") else LossModule(model)
    else:
        model.to(device)
        step = torch.compile(LossModule(model)) if compiled else LossModule(model)
    return model, step, build_optimizer(model, cfg.training, device.type)


def one_step(step, model, opt, ctx, bs: int, block: int, device, g):
    """One optimizer step on random tokens drawn on the device; the loss (not synced)."""
    x = torch.randint(50304, (bs, block), device=device, generator=g)
    with ctx:
        loss = step(x, torch.roll(x, -1, 1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def timed(cfg, mode: str, device: torch.device, args) -> dict:
    torch._dynamo.reset()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    model, step, opt = build(cfg, mode, device, compiled=device.type == "cuda")
    bs, block = args.batch, cfg.model.block_size
    g = torch.Generator(device=device).manual_seed(0)
    ctx = torch.autocast(device.type, dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast(device.type, enabled=False)
    rates, losses = [], []
    for w in range(args.warmup + args.windows):
        t0 = time.perf_counter()
        for _ in range(args.window):
            loss = one_step(step, model, opt, ctx, bs, block, device, g)
        losses.append(float(loss.detach()))  # syncs: closes the window
        if w >= args.warmup:
            rates.append(bs * block * args.window / (time.perf_counter() - t0))
    out = {"mode": mode, "tokens_per_second": statistics.median(rates), "last_loss": losses[-1],
           "peak_memory_mb": torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None}
    if args.profile and mode == args.profile:
        out["trace"] = profile_steps(step, model, opt, ctx, bs, block, device, g, args)
    if mode.startswith("fsdp") and args.checkpoint:
        out["checkpoint"] = roundtrip(cfg, model, opt, device)
        args.checkpoint = False  # once is enough
    return out


def profile_steps(step, model, opt, ctx, bs, block, device, g, args) -> str:
    """Three more steps under torch.profiler: a Chrome trace, and torch's table of the host's operators."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        for _ in range(3):
            loss = one_step(step, model, opt, ctx, bs, block, device, g)
        float(loss.detach())
    trace = Path(args.trace or "fsdp_trace.json")
    prof.export_chrome_trace(str(trace))
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25), file=sys.stderr)
    return str(trace)


def roundtrip(cfg, model, opt, device) -> str:
    """Write a sharded checkpoint, read it into a freshly built sharded model: the weights match."""
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        path = sharded.save(Path(tmp), model, opt, {"step": 1, "rng": {}, "data": {}, "config_hash": "bench", "loop": {}},
                            rank=0, world=1)
        wrote = time.perf_counter() - t0
        meta = sharded.read_meta(path)
        fresh, _, fresh_opt = build(cfg, "fsdp-block", device, compiled=False)
        sharded.load_into(path, fresh, fresh_opt)
        same = all(torch.equal(a.full_tensor(), b.full_tensor()) for a, b in zip(model.parameters(), fresh.parameters()))
        size = sum(f.stat().st_size for f in path.iterdir())
    return f"{len(meta['files'])} files, {size / 1e6:.0f} MB written in {wrote:.1f} s, read back {'identical' if same else 'DIFFERENT'}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2, help="windows left out (compilation)")
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2, help="alternating rounds of (replicated, fsdp)")
    ap.add_argument("--smoke", action="store_true", help="a tiny GPT (automatic without CUDA)")
    ap.add_argument("--fsdp-compile", nargs="+", default=["block"], choices=FSDP_COMPILE,
                    help="where fsdp runs compile: per block, the forward + loss whole, or both (each a run per round)")
    ap.add_argument("--profile", metavar="MODE", help="record 3 steps of this mode (e.g. fsdp-both) after its windows")
    ap.add_argument("--trace", help="where the profiled steps' Chrome trace goes (default fsdp_trace.json)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda:0" if cuda else "cpu")
    smoke = args.smoke or not cuda
    if smoke:
        args.batch, args.window, args.warmup, args.windows, args.repeats = 4, 2, 1, 2, 1
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
    torch.distributed.init_process_group("nccl" if cuda else "gloo")
    results = []
    with tempfile.TemporaryDirectory() as data:  # the config's token folder; batches are drawn on the device
        g = torch.Generator().manual_seed(0)
        for name in ("train.bin", "val.bin"):
            write_tokens(Path(data) / name, torch.randint(50304, (200_000,), generator=g), "uint16")
        cfg = load_config(TEMPLATE, overrides=(SMOKE if smoke else []) + [f"training.batch_size={args.batch}", f"dataset.path={data}"])
        args.checkpoint = True
        for _ in range(args.repeats):
            for mode in ("replicated", *(f"fsdp-{c}" for c in args.fsdp_compile)):
                results.append(timed(cfg, mode, device, args))
    torch.distributed.destroy_process_group()
    rep = statistics.median(r["tokens_per_second"] for r in results if r["mode"] == "replicated")
    ratios = {m: statistics.median(r["tokens_per_second"] for r in results if r["mode"] == m) / rep
              for m in dict.fromkeys(r["mode"] for r in results if r["mode"] != "replicated")}
    if args.json:
        print(json.dumps({"device": torch.cuda.get_device_name(device) if cuda else "cpu", "batch": args.batch, "runs": results,
                          "over_replicated": ratios}, indent=2))
        return 0
    print(f"{torch.cuda.get_device_name(device) if cuda else 'cpu (smoke)'}, GPT-2 small shape{' (smoke: tiny)' if smoke else ''}, "
          f"batch {args.batch}, torch {torch.__version__}")
    for r in results:
        mem = f", peak {r['peak_memory_mb']:,.0f} MB" if r["peak_memory_mb"] else ""
        print(f"  {r['mode']:<11} {r['tokens_per_second']:>12,.0f} tokens/s, loss {r['last_loss']:.4f}{mem}"
              + (f"; checkpoint: {r['checkpoint']}" if "checkpoint" in r else ""))
    for m, x in ratios.items():
        print(f"{m} / replicated (medians): {x:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
