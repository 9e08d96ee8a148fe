"""Throughput and MFU of envkit's trainer next to a plain hand-written loop, same model, same
settings, same process.

    python benchmarks/bench_trainer.py                 # CUDA: GPT-2-small shape, bf16 + compile
    python benchmarks/bench_trainer.py --device cpu --small --steps 12 --warmup 4   # a quick CPU run

Both loops train envkit's GPT (models.GPT) on the gpt template's arithmetic data with AdamW
(fused on CUDA), weight decay on 2-D params, grad clipping, the same precision and compile
setting, and sync once per step (loss.item()). Reported: median tokens/s over the steps after
warm-up, MFU = FLOPs/token (6N + 12*L*H*Q*T) x tokens/s / peak (envkit/data/peaks.toml by device
name; n/a when the device is not in the table), and envkit/plain ratios. --json for machines.
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

from envkit.train.config import load_config  # noqa: E402
from envkit.train.data import build_data  # noqa: E402
from envkit.train.loop import train  # noqa: E402
from envkit.train.mfu import mfu, peak_flops  # noqa: E402
from envkit.train.models import build_model  # noqa: E402

GPU_SHAPE = ["model.n_layer=12", "model.n_head=12", "model.n_embd=768", "model.block_size=1024",
             "training.batch_size=16", "training.grad_accum=1", "dataset.num_samples=200000"]
SMALL_SHAPE = ["model.n_layer=2", "model.n_head=2", "model.n_embd=64", "model.block_size=40",
               "training.batch_size=16", "training.grad_accum=1", "dataset.num_samples=4000"]


def make_config(args):
    device = args.device
    sets = list(GPU_SHAPE if not args.small else SMALL_SHAPE)
    precision = args.precision or ("bf16" if device == "cuda" else "fp32")
    compile_ = args.compile if args.compile is not None else device == "cuda"
    sets += [f"device.type={device}", f"training.precision={precision}", f"training.compile={str(compile_).lower()}",
             f"training.max_steps={args.steps}", "training.warmup_steps=0", "training.schedule=constant",
             "logging.every_steps=1", "logging.progress=none", "eval.every_steps=0", "eval.batches=1",
             "eval.accuracy_samples=0", f"checkpoint.every_steps={args.steps}", "checkpoint.keep_last=1",
             "dataloader.num_workers=0", *args.set]
    return load_config(ROOT / "templates" / "train" / f"{args.template}.yaml", overrides=sets)


def run_envkit(cfg, args) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        summary = train(cfg, Path(tmp), resume="never", handle_signals=False)
        rows = [json.loads(line) for line in open(Path(tmp) / "metrics.jsonl")]
    dts = [r["dt_ms"] / 1000 for r in rows if "dt_ms" in r and r["step"] > args.warmup]
    assert summary["status"] == "completed", summary
    return dts


def run_plain(cfg, args) -> list[float]:
    """nanoGPT-style: random windows, pinned + non_blocking copies, autocast, fused AdamW."""
    T, M = cfg.values["training"], cfg.values["model"]
    device = torch.device(args.device)
    torch.manual_seed(cfg.values["experiment"]["seed"])
    data = build_data(cfg, seed=cfg.values["experiment"]["seed"])
    tokens = data.train.tokens
    block, bs = M["block_size"], T["batch_size"]
    model = build_model(cfg, data.info, args.device).to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": T["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=T["lr"], betas=(T["beta1"], T["beta2"]), **({"fused": True} if args.device == "cuda" else {}))
    if T["compile"] is True:
        model = torch.compile(model)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(T["precision"])
    ctx = torch.autocast(args.device, dtype=dtype) if dtype else torch.autocast(args.device, enabled=False)

    def get_batch():
        ix = torch.randint(len(tokens) - block - 1, (bs,))
        x = torch.stack([tokens[i:i + block] for i in ix])
        y = torch.stack([tokens[i + 1:i + 1 + block] for i in ix])
        if device.type == "cuda":
            return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
        return x.to(device), y.to(device)

    dts = []
    x, y = get_batch()
    t0 = time.perf_counter()
    for step in range(1, T["max_steps"] + 1):
        for micro in range(T["grad_accum"]):
            with ctx:
                logits = model(x)
                loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1)) / T["grad_accum"]
            x, y = get_batch()  # prefetch during the backward, as nanoGPT does
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), T["grad_clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()  # one sync per step, like the trainer's logging every step
        t1 = time.perf_counter()
        if step > args.warmup:
            dts.append(t1 - t0)
        t0 = t1
    return dts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--template", default="gpt_full_training")
    ap.add_argument("--small", action="store_true", help="a tiny model (CPU smoke test)")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=15, help="steps excluded from the median (compilation, caches)")
    ap.add_argument("--precision", choices=("fp32", "bf16", "fp16"))
    ap.add_argument("--compile", type=lambda s: s.lower() in ("1", "true", "yes"), default=None)
    ap.add_argument("--set", action="append", default=[], help="extra config override (repeatable)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.warmup >= args.steps:
        ap.error("--warmup must be below --steps")

    cfg = make_config(args)
    tokens_per_step = cfg.values["training"]["batch_size"] * cfg.values["training"]["grad_accum"] * cfg.values["model"]["block_size"]
    name = torch.cuda.get_device_name() if args.device == "cuda" else args.device
    data = build_data(cfg, seed=0)
    fpt = build_model(cfg, data.info, args.device).flops_per_token()
    peak = peak_flops(name)

    results = {}
    for label, fn in (("envkit", run_envkit), ("plain", run_plain)):
        if args.device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        dts = fn(cfg, args)
        med = statistics.median(dts)
        tps = tokens_per_step / med
        results[label] = {"median_step_ms": 1000 * med, "tokens_per_second": tps, "mfu": mfu(fpt, tps, name),
                          "steps_measured": len(dts)}
    ratio = results["envkit"]["tokens_per_second"] / results["plain"]["tokens_per_second"]
    out = {"device": name, "peak_flops": peak[0] if peak else None, "peak_name": peak[1] if peak else None,
           "precision": cfg.values["training"]["precision"], "compile": cfg.values["training"]["compile"],
           "flops_per_token": fpt, "tokens_per_step": tokens_per_step, "torch": torch.__version__,
           "results": results, "ratio_envkit_over_plain": ratio}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    m = cfg.values["model"]
    print(f"device {name} | torch {torch.__version__} | gpt {m['n_layer']}L {m['n_head']}H {m['n_embd']}d T={m['block_size']} | "
          f"{cfg.values['training']['precision']}, compile {cfg.values['training']['compile']} | "
          f"{tokens_per_step} tokens/step | {fpt / 1e6:.1f} MFLOP/token | peak "
          + (f"{peak[0] / 1e12:.0f} TFLOP/s ({peak[1]})" if peak else "unknown (MFU n/a)"))
    for label, r in results.items():
        mfu_s = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "n/a"
        print(f"{label:>7}: {r['tokens_per_second']:>12,.0f} tokens/s | median step {r['median_step_ms']:.2f} ms "
              f"over {r['steps_measured']} steps | MFU {mfu_s}")
    print(f"  ratio: envkit / plain = {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
