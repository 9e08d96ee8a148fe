"""Throughput and MFU of envkit's trainer next to a plain hand-written loop: what users train
(GPT-2 small on token data with GPT-2's padded vocabulary), same process, data and model init.

    python benchmarks/bench_trainer.py                       # CUDA: GPT-2 small, vocab 50304, batch 16 and 32
    python benchmarks/bench_trainer.py --batch 64 --try training.sdpa_backend=cudnn --try training.compile_mode=reduce-overhead
    python benchmarks/bench_trainer.py --data DIR            # a tokens folder (train.bin/val.bin) and its vocabulary
    python benchmarks/bench_trainer.py --batch 16 32 --repeats 3   # alternating pairs: median ratio and its spread
    python benchmarks/bench_trainer.py --smoke               # a tiny shape (automatic without CUDA): seconds on a CPU

envkit: `envkit.train.run.loop.train` on templates/train/gpt2_small_tokens.yaml (dataset type tokens,
its DataLoader, NaN guard, metrics row every --window steps). Plain: nanoGPT's loop written the way
a careful engineer writes it: random windows from a memory map, pinned non_blocking copies with the
next batch fetched during the backward, forward + cross-entropy compiled as one function, fused
AdamW, bf16 autocast, grad clipping, TF32, no host sync inside a window. Both start from
torch.manual_seed(seed) and build the model with envkit's build_model; the data is one folder of
random tokens (or --data). Timing: windows of --window steps, each closed by a device sync
(envkit: its logging row), the first --warmup-windows dropped (compilation), median tokens/s of the
rest. MFU = FLOPs/token (6N + 12*L*H*Q*T) x tokens/s / peak (envkit/data/peaks.toml; n/a when the
device is not in the table). --try KEY=VALUE (repeatable) adds an envkit run with that override at
each batch size. --json for machines.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from envkit.config.config import load_config  # noqa: E402
from envkit.train.run.loop import train  # noqa: E402
from envkit.train.watching.mfu import mfu, peak_flops  # noqa: E402
from envkit.train.run.models import build_model  # noqa: E402
from envkit.train.run.speed import compile_kwargs  # noqa: E402
from envkit.train.data.tokens import open_tokens, write_tokens  # noqa: E402

TEMPLATE = ROOT / "templates" / "train" / "gpt2_small_tokens.yaml"
SMOKE_SHAPE = ["model.n_layer=2", "model.n_head=2", "model.n_embd=64", "model.block_size=64"]


def make_config(args, batch: int, data_dir: Path, vocab: int | None, extra=()):
    precision = args.precision or ("bf16" if args.device == "cuda" else "fp32")
    compile_ = args.compile if args.compile is not None else args.device == "cuda"
    sets = (SMOKE_SHAPE if args.smoke else []) + [
        f"dataset.path={data_dir}", f"dataset.dtype={args.dtype}",
        f"dataset.vocab_size={vocab if vocab else 'null'}",
        f"device.type={args.device}", f"training.precision={precision}", f"training.compile={str(compile_).lower()}",
        f"training.batch_size={batch}", "training.grad_accum=1", f"training.max_steps={args.steps}",
        "training.warmup_steps=0", "training.schedule=constant", f"logging.every_steps={args.window}",
        "logging.progress=none", "eval.every_steps=0", "eval.batches=1", f"checkpoint.every_steps={args.steps}",
        "checkpoint.keep_last=1", "dataloader.num_workers=0", *args.set, *extra]
    return load_config(TEMPLATE, overrides=sets)


def write_random_tokens(folder: Path, vocab: int, n: int, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    for name in ("train.bin", "val.bin"):
        write_tokens(folder / name, torch.randint(vocab, (n,), generator=g), "uint16")


def window_rates(dts: list[float], tokens_per_step: int) -> list[float]:
    return [tokens_per_step / dt for dt in dts if dt > 0]


def run_envkit(cfg, args) -> list[float]:
    """Seconds per step of each timed window, from the trainer's own metrics rows."""
    torch._dynamo.reset()  # each loop compiles from scratch (no shapes marked dynamic by an earlier run)
    with tempfile.TemporaryDirectory() as tmp:
        summary = train(cfg, Path(tmp), resume="never", handle_signals=False).summary()
        rows = [json.loads(line) for line in open(Path(tmp) / "metrics.jsonl")]
    assert summary["status"] == "completed", summary
    return [r["dt_ms"] / 1000 for r in rows if "dt_ms" in r and r["step"] > args.window * args.warmup_windows]


def run_plain(cfg, args) -> list[float]:
    T, M, D = cfg.training, cfg.model, cfg.dataset
    torch._dynamo.reset()
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(cfg.experiment.seed)  # the trainer's seed, so the same initial weights
    path = Path(D.path) / "train.bin"
    data = open_tokens(path, D.dtype, path.stat().st_size // (2 if D.dtype == "uint16" else 4))  # a memory map
    vocab = D.vocab_size
    block, bs, accum = M.block_size, T.batch_size, T.grad_accum
    model = build_model(cfg, {"vocab_size": vocab, "block_size": block}, args.device).to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": T.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=T.lr, betas=(T.beta1, T.beta2), **({"fused": True} if device.type == "cuda" else {}))

    def forward_loss(x, y):
        logits = model(x)
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1))

    step_fn = torch.compile(forward_loss, **compile_kwargs(T.compile_mode)) if T.compile is True else forward_loss
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(T.precision)
    ctx = torch.autocast(device.type, dtype=dtype) if dtype else torch.autocast(device.type, enabled=False)
    gen = torch.Generator().manual_seed(cfg.experiment.seed)

    def get_batch():
        ix = torch.randint(len(data) - block - 1, (bs,), generator=gen).tolist()
        chunks = torch.stack([data[i:i + block + 1].to(torch.int64) for i in ix])
        x, y = chunks[:, :-1].contiguous(), chunks[:, 1:].contiguous()
        if device.type == "cuda":
            return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
        return x, y

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    dts = []
    x, y = get_batch()
    sync()
    t0 = time.perf_counter()
    for step in range(1, T.max_steps + 1):
        for g in opt.param_groups:
            g["lr"] = T.lr
        for _ in range(accum):
            with ctx:
                loss = step_fn(x, y) / accum
            x, y = get_batch()  # the next batch is read while the GPU runs the backward
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), T.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % args.window == 0:
            loss.item()  # the one sync of a window, as the trainer's logging row
            sync()
            t1 = time.perf_counter()
            if step > args.window * args.warmup_windows:
                dts.append((t1 - t0) / args.window)
            t0 = t1
    return dts


def measure(label, fn, cfg, args, fpt, name) -> dict:
    if args.device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    T, M = cfg.training, cfg.model
    tokens_per_step = T.batch_size * T.grad_accum * M.block_size
    rates = window_rates(fn(cfg, args), tokens_per_step)
    tps = statistics.median(rates)
    out = {"loop": label, "tokens_per_second": tps, "median_step_ms": 1000 * tokens_per_step / tps,
           "mfu": mfu(fpt, tps, name), "windows": len(rates)}
    if args.device == "cuda":
        out["peak_memory_gb"] = torch.cuda.max_memory_allocated() / 2**30
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--smoke", "--cpu-smoke", "--small", dest="smoke", action="store_true",
                    help="a tiny model (automatic on the CPU): checks the benchmark runs")
    ap.add_argument("--batch", type=int, nargs="+", help="batch sizes per step (default: 16 32; smoke: 8)")
    ap.add_argument("--data", type=Path, help="a tokens folder (train.bin, val.bin) instead of random tokens")
    ap.add_argument("--vocab", type=int, help="vocabulary (default 50304; smoke 512; --data: dataset.vocab_size or meta.json)")
    ap.add_argument("--dtype", default="uint16", choices=("uint16", "uint32"))
    ap.add_argument("--steps", type=int, help="optimizer steps per loop (default 60; smoke 12)")
    ap.add_argument("--window", type=int, help="steps per timed window (default 10; smoke 2)")
    ap.add_argument("--warmup-windows", type=int, default=2, help="windows dropped from the median (compilation, caches)")
    ap.add_argument("--precision", choices=("fp32", "bf16", "fp16"))
    ap.add_argument("--compile", type=lambda s: s.lower() in ("1", "true", "yes"), default=None)
    ap.add_argument("--set", action="append", default=[], help="config override for both loops (repeatable)")
    ap.add_argument("--try", dest="tries", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE]",
                    help="an extra envkit run with these overrides at each batch size (repeatable)")
    ap.add_argument("--repeats", type=int, default=1,
                    help="measure each loop this many times, alternating which runs first; medians and the median ratio")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    args.smoke = args.smoke or args.device != "cuda"
    args.batch = args.batch or ([8] if args.smoke else [16, 32])
    args.steps = args.steps or (12 if args.smoke else 60)
    args.window = args.window or (2 if args.smoke else 10)
    if args.steps < args.window * (args.warmup_windows + 1):
        ap.error("--steps must cover the warm-up windows and one timed window")

    name = torch.cuda.get_device_name() if args.device == "cuda" else args.device
    peak = peak_flops(name)
    out = {"device": name, "torch": torch.__version__, "peak_flops": peak[0] if peak else None,
           "peak_name": peak[1] if peak else None, "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        if args.data:
            data_dir, vocab = args.data.resolve(), args.vocab
        else:
            data_dir, vocab = Path(tmp), args.vocab or (512 if args.smoke else 50304)
            block = int(SMOKE_SHAPE[3].split("=")[1]) if args.smoke else 1024
            write_random_tokens(data_dir, vocab, max(1 << 20, 4 * max(args.batch) * (block + 1)))
        for batch in args.batch:
            cfg = make_config(args, batch, data_dir, vocab)
            D, M, T = cfg.dataset, cfg.model, cfg.training
            if D.vocab_size is None:  # --data with meta.json: the plain loop needs the number too
                from envkit.train.data.tokens import check_token_folder

                cfg = cfg.replace("dataset.vocab_size", check_token_folder(data_dir, D.dtype, None, batch_tokens=1).vocab_size)
                D = cfg.dataset
            fpt = build_model(cfg, {"vocab_size": D.vocab_size}, "cpu").flops_per_token()
            row = {"batch": batch, "tokens_per_step": batch * M.block_size, "flops_per_token": fpt, "vocab": D.vocab_size,
                   "shape": f"gpt {M.n_layer}L {M.n_head}H {M.n_embd}d T={M.block_size}",
                   "precision": T.precision, "compile": T.compile}
            pairs = []
            for r in range(args.repeats):  # alternating order: neither loop always runs on a warmer GPU
                order = (("envkit", run_envkit), ("plain", run_plain))[:: 1 if r % 2 == 0 else -1]
                got = {label: measure(label, fn, cfg, args, fpt, name) for label, fn in order}
                pairs.append(got)
            for label in ("envkit", "plain"):
                runs = [p[label] for p in pairs]
                best = sorted(runs, key=lambda x: x["tokens_per_second"])[len(runs) // 2]  # the median run
                row[label] = dict(best, repeats=[x["tokens_per_second"] for x in runs])
            row["ratios"] = [p["envkit"]["tokens_per_second"] / p["plain"]["tokens_per_second"] for p in pairs]
            row["ratio"] = statistics.median(row["ratios"])
            row["tries"] = []
            for t in args.tries:
                tcfg = make_config(args, batch, data_dir, vocab, extra=t.split(","))
                tcfg = tcfg.replace("dataset.vocab_size", D.vocab_size)
                r = measure(f"envkit {t}", run_envkit, tcfg, args, fpt, name)
                r["set"], r["ratio"] = t, r["tokens_per_second"] / row["plain"]["tokens_per_second"]
                row["tries"].append(r)
            out["runs"].append(row)
            if not args.json:
                show(row, out)
    if args.json:
        print(json.dumps(out, indent=2))
    return 0


def show(row: dict, out: dict) -> None:
    peak = f"{out['peak_flops'] / 1e12:.0f} TFLOP/s ({out['peak_name']})" if out["peak_flops"] else "unknown (MFU n/a)"
    print(f"device {out['device']} | torch {out['torch']} | {row['shape']} vocab {row['vocab']} | batch {row['batch']} "
          f"({row['tokens_per_step']} tokens/step) | {row['precision']}, compile {row['compile']} | "
          f"{row['flops_per_token'] / 1e6:.1f} MFLOP/token | peak {peak}")
    for r in [row["envkit"], row["plain"], *row["tries"]]:
        mfu_s = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "n/a"
        mem = f" | peak mem {r['peak_memory_gb']:.1f} GB" if "peak_memory_gb" in r else ""
        ratio = f" | x{r['ratio']:.3f} of plain" if "ratio" in r else ""
        print(f"  {r['loop']:<40} {r['tokens_per_second']:>12,.0f} tokens/s | step {r['median_step_ms']:.2f} ms "
              f"| MFU {mfu_s} | {r['windows']} windows{mem}{ratio}")
    if len(row["ratios"]) > 1:
        print(f"  repeats (tokens/s): envkit {', '.join(f'{x:,.0f}' for x in row['envkit']['repeats'])}; "
              f"plain {', '.join(f'{x:,.0f}' for x in row['plain']['repeats'])}")
        print(f"  ratio envkit / plain = {row['ratio']:.3f} (median of {len(row['ratios'])} alternating pairs: "
              f"{', '.join(f'{x:.3f}' for x in row['ratios'])})", flush=True)
    else:
        print(f"  ratio envkit / plain = {row['ratio']:.3f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
