"""A CIFAR-10 epoch of ResNet-18 with envkit's trainer and with careful plain PyTorch loops, same
machine, same data and model, alternating; medians and the ratio to the fastest plain loop, next to
the figures a common optimizer-comparison guide publishes for the same epoch (about 30 s on a T4,
about 1.5 min on an M2; the guide's, not envkit's: docs/knowledge/common-guides.md).

    python benchmarks/bench_resnet_cifar.py                  # CUDA: 50,000 images, batch 128, 2 alternating rounds
    python benchmarks/bench_resnet_cifar.py --batch 512 --epochs 6 --window 10 --skip-steps 100 --compile-mode reduce-overhead
    python benchmarks/bench_resnet_cifar.py --loops envkit resident --repeats 3
    python benchmarks/bench_resnet_cifar.py --quick          # a narrow ResNet-18 on 640 images: seconds on a CPU

Data: a CIFAR-10 *binary* folder of random images and labels (5 x 10,000 training records and a test
file), written to a temporary folder: envkit reads it with `dataset.type: cifar10`, the plain loops
load the same bytes. envkit: `envkit.train.run.loop.train` with templates/train/cifar10.yaml
(ResNet-18, CIFAR stem, SGD Nesterov, augmentation on; auto picks channels_last, bf16, compile and
data on the device on CUDA). Two plain loops, the model definition envkit trains (torchvision's where
it loads, else envkit/train/run/resnets.py), channels_last, bf16 autocast, torch.compile, fused SGD,
TF32: `plain` crops and flips per image in DataLoader workers (pinned memory, persistent workers,
non_blocking copies); `resident` keeps the data on the device and augments there in batches (the
fastest known way, as airbench does). --compile-mode applies to every loop (reduce-overhead: CUDA
graphs). Timing: windows of --window steps, each closed by a device sync (envkit: its logging row);
windows before --skip-steps (compilation, warm caches) are dropped; the epoch time is the median
step time x the steps of one epoch (390 at batch 128).
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

from envkit.train.data.cifar import channel_stats  # noqa: E402
from envkit.config.config import load_config  # noqa: E402
from envkit.train.run.loop import train  # noqa: E402
from envkit.train.run.resnets import build_resnet  # noqa: E402
from envkit.train.run.speed import compile_kwargs  # noqa: E402

TEMPLATE = ROOT / "templates" / "train" / "cifar10.yaml"
# seconds per CIFAR-10 epoch, ResNet-18, batch 128, as the optimizer-comparison guide gives them
# (docs/knowledge/common-guides.md, "The optimizer-comparison experiment"); not measured by envkit
GUIDE_FIGURES = {"T4": 30.0, "M2": 90.0}


def write_random_cifar10(folder: Path, per_file: int, test: int, seed: int = 0) -> Path:
    """The binary layout (label byte + 3,072 pixel bytes per record) filled with random bytes."""
    g = torch.Generator().manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for name, n in [(f"data_batch_{i}.bin", per_file) for i in range(1, 6)] + [("test_batch.bin", test)]:
        records = torch.randint(0, 256, (n, 3073), dtype=torch.uint8, generator=g)
        records[:, 0] = torch.randint(0, 10, (n,), dtype=torch.uint8, generator=g)
        (folder / name).write_bytes(records.numpy().tobytes())
    return folder


def make_config(args, data: Path, extra=()):
    sets = [f"dataset.path={data}", f"device.type={args.device}", f"training.epochs={args.epochs}", f"training.batch_size={args.batch}",
            f"training.compile_mode={args.compile_mode}",
            f"logging.every_steps={args.window}", "logging.progress=none", "logging.device_seconds=0",
            "eval.every_steps=0", "eval.batches=1", "checkpoint.every_steps=0", "checkpoint.keep_last=1",
            f"dataloader.num_workers={args.workers}", *(["model.width=8", "training.compile=false"] if args.quick else []),
            *args.set, *extra]
    return load_config(TEMPLATE, overrides=sets)


def run_envkit(cfg, args) -> tuple[list[float], float]:
    """(seconds per step of each timed window, wall seconds of the whole run)."""
    torch._dynamo.reset()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        summary = train(cfg, Path(tmp), resume="never", handle_signals=False).summary()
        wall = time.perf_counter() - t0
        rows = [json.loads(line) for line in open(Path(tmp) / "metrics.jsonl")]
    assert summary["status"] == "completed", summary
    return [r["dt_ms"] / 1000 for r in rows if "dt_ms" in r and r["step"] > args.skip_steps], wall


class CropFlip(torch.utils.data.Dataset):
    """What a plain loop does per image (torchvision's RandomCrop(32, padding=4) + RandomHorizontalFlip
    written out): pad, crop at a random offset, maybe mirror, normalise."""

    def __init__(self, pixels, labels, mean, std):
        self.pixels, self.labels, self.mean, self.std = pixels, labels, mean.view(3, 1, 1), std.view(3, 1, 1)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        x = F.pad(self.pixels[i], (4, 4, 4, 4))
        dy, dx = torch.randint(0, 9, (2,)).tolist()
        x = x[:, dy:dy + 32, dx:dx + 32]
        if torch.rand(()) < 0.5:
            x = x.flip(-1)
        return (x.float() / 255.0 - self.mean) / self.std, self.labels[i]


def _setup(cfg, args):
    """What both plain loops start with: TF32 and cuDNN autotuning on CUDA, the seed, and the
    training set's bytes read the way envkit reads them."""
    torch._dynamo.reset()
    t_start = time.perf_counter()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
    torch.manual_seed(cfg.experiment.seed)
    folder = Path(cfg.dataset.path)
    raw = b"".join((folder / f"data_batch_{i}.bin").read_bytes() for i in range(1, 6))
    table = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(-1, 3073)
    pixels, labels = table[:, 1:].reshape(-1, 3, 32, 32).clone(), table[:, 0].long()
    return cfg.training, device, cuda, pixels, labels, t_start


def _model(cfg, args, device, cuda):
    """(model, optimizer, compiled forward + loss, autocast) as a careful engineer writes them."""
    T = cfg.training
    width = cfg.model.width if args.quick else 64
    model, _ = build_resnet(18, 10, 3, "cifar", width)  # the definition envkit trains (torchvision where it loads)
    model = model.to(device, memory_format=torch.channels_last)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": T.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
                          lr=T.lr, momentum=T.momentum, nesterov=T.nesterov, **({"fused": True} if cuda else {}))

    def forward_loss(x, y):
        return F.cross_entropy(model(x), y)

    step_fn = torch.compile(forward_loss, **compile_kwargs(args.compile_mode)) if (cuda and not args.quick) else forward_loss
    ctx = torch.autocast(device.type, dtype=torch.bfloat16) if cuda else torch.autocast(device.type, enabled=False)
    return model, opt, step_fn, ctx


def _timed_steps(batches, step_fn, ctx, opt, args, cuda) -> list[float]:
    """Seconds per step of each window of --window steps after --skip-steps, each window closed by
    one sync (as the trainer's logging row)."""
    dts, t0, step = [], None, 0
    for x, y in batches:
        if t0 is None:
            t0 = time.perf_counter()
        with ctx:
            loss = step_fn(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        if step % args.window == 0:
            loss.item()
            if cuda:
                torch.cuda.synchronize()
            t1 = time.perf_counter()
            if step > args.skip_steps:
                dts.append((t1 - t0) / args.window)
            t0 = t1
    return dts


def run_plain(cfg, args) -> tuple[list[float], float]:
    T, device, cuda, pixels, labels, t_start = _setup(cfg, args)
    mean, std = channel_stats(pixels)
    model, opt, step_fn, ctx = _model(cfg, args, device, cuda)
    loader = torch.utils.data.DataLoader(
        CropFlip(pixels, labels, mean, std), batch_size=T.batch_size, shuffle=True, drop_last=True,
        num_workers=args.workers, pin_memory=cuda, persistent_workers=args.workers > 0,
        **({"prefetch_factor": 4} if args.workers > 0 else {}), generator=torch.Generator().manual_seed(0))
    model.train()

    def batches():
        for x, y in (batch for _ in range(args.epochs) for batch in loader):
            yield x.to(device, non_blocking=True).contiguous(memory_format=torch.channels_last), y.to(device, non_blocking=True)

    dts = _timed_steps(batches(), step_fn, ctx, opt, args, cuda)
    return dts, time.perf_counter() - t_start


def run_resident(cfg, args) -> tuple[list[float], float]:
    """The fastest plain loop known for this workload (as airbench feeds its GPU): the training set
    on the device as uint8, padded once; each batch gathered, cropped, flipped and normalised there
    with random draws made on the device; forward + loss compiled (--compile-mode: reduce-overhead
    adds CUDA graphs); fused SGD; the batch order a permutation drawn on the device each epoch."""
    T, device, cuda, pixels, labels, t_start = _setup(cfg, args)
    mean, std = (t.to(device).view(1, 3, 1, 1) for t in channel_stats(pixels))
    padded, labels = F.pad(pixels, (4, 4, 4, 4)).to(device), labels.to(device)  # (N, 3, 40, 40) uint8
    model, opt, step_fn, ctx = _model(cfg, args, device, cuda)
    b, n = T.batch_size, len(labels)
    ar = torch.arange(32, device=device)
    channel = torch.arange(3, device=device).view(1, 3, 1, 1)

    def batch_of(idx):
        dy, dx = torch.randint(0, 9, (2, b, 1), device=device)
        flip = torch.rand(b, 1, device=device) < 0.5
        rows, cols = dy + ar, dx + torch.where(flip, 31 - ar, ar)
        x = padded[idx.view(b, 1, 1, 1), channel, rows.view(b, 1, 32, 1), cols.view(b, 1, 1, 32)]
        x = ((x.float() / 255.0 - mean) / std).contiguous(memory_format=torch.channels_last)
        return x, labels[idx]

    model.train()

    def batches():
        for _ in range(args.epochs):
            order = torch.randperm(n, device=device)
            for s in range(n // b):
                yield batch_of(order[s * b:(s + 1) * b])

    dts = _timed_steps(batches(), step_fn, ctx, opt, args, cuda)
    return dts, time.perf_counter() - t_start


LOOPS = {"envkit": run_envkit, "plain": run_plain, "resident": run_resident}


def measure(label: str, fn, cfg, args, steps_per_epoch: int) -> dict:
    dts, wall = fn(cfg, args)
    step = statistics.median(dts)
    return {"loop": label, "median_step_ms": 1000 * step, "epoch_seconds": step * steps_per_epoch,
            "samples_per_second": args.batch / step, "wall_seconds": wall, "windows": len(dts)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--quick", action="store_true", help="a narrow ResNet-18 on 640 images, fp32, eager (automatic off CUDA)")
    ap.add_argument("--batch", type=int, help="default 128 (quick: 32)")
    ap.add_argument("--workers", type=int, help="DataLoader workers for both loops (default: 4 on CUDA, 0 otherwise)")
    ap.add_argument("--window", type=int, help="steps per timed window (default 20; quick 4)")
    ap.add_argument("--skip-steps", type=int, help="steps left out of the median: compilation and warm-up (default 60; quick 4)")
    ap.add_argument("--repeats", type=int, default=2, help="alternating pairs of runs (default 2)")
    ap.add_argument("--epochs", type=int, default=1, help="epochs each loop trains (the median step spans them; default 1)")
    ap.add_argument("--compile-mode", default="default", help="torch.compile mode for every loop: default | reduce-overhead (CUDA "
                                                                "graphs) | max-autotune-no-cudagraphs (envkit: training.compile_mode)")
    ap.add_argument("--loops", nargs="+", default=list(LOOPS), choices=list(LOOPS),
                    help="envkit; plain (DataLoader workers, per-image augmentation); resident (data and augmentation on the device)")
    ap.add_argument("--set", action="append", default=[], help="config override for the envkit run (repeatable)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    args.quick = args.quick or args.device != "cuda"
    args.batch = args.batch or (32 if args.quick else 128)
    args.workers = args.workers if args.workers is not None else (4 if args.device == "cuda" else 0)
    args.window = args.window or (4 if args.quick else 20)
    args.skip_steps = args.skip_steps if args.skip_steps is not None else (args.window if args.quick else 60)
    per_file, test = (128, 64) if args.quick else (10_000, 10_000)
    train_images = 5 * per_file
    steps_per_epoch = train_images // args.batch
    if steps_per_epoch * args.epochs < args.skip_steps + args.window:
        ap.error("the epochs must cover --skip-steps and one timed window (raise --epochs)")

    name = torch.cuda.get_device_name() if args.device == "cuda" else args.device
    out = {"device": name, "torch": torch.__version__, "images": train_images, "batch": args.batch, "epochs": args.epochs,
           "compile_mode": args.compile_mode, "steps_per_epoch": steps_per_epoch, "workers": args.workers, "quick": args.quick,
           "pairs": []}
    loops = args.loops
    with tempfile.TemporaryDirectory() as tmp:
        data = write_random_cifar10(Path(tmp) / "cifar-10-batches-bin", per_file, test)
        cfg = make_config(args, data)
        for r in range(args.repeats):  # alternating order: no loop always runs on a warmer GPU
            order = loops[:: 1 if r % 2 == 0 else -1]
            out["pairs"].append({label: measure(label, LOOPS[label], cfg, args, steps_per_epoch) for label in order})
            if not args.json:
                print(f"round {r + 1}: " + ", ".join(f"{k} {v['epoch_seconds']:.2f} s/epoch" for k, v in out["pairs"][-1].items()),
                      flush=True)
    for label in loops:
        out[label] = {k: statistics.median(p[label][k] for p in out["pairs"])
                      for k in ("median_step_ms", "epoch_seconds", "samples_per_second", "wall_seconds")}
    plains = [x for x in loops if x != "envkit"]
    if "envkit" in loops and plains:  # against the fastest plain loop of each round
        ratios = [p["envkit"]["samples_per_second"] / max(p[x]["samples_per_second"] for x in plains) for p in out["pairs"]]
        out["ratios"], out["ratio"] = ratios, statistics.median(ratios)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"device {name} | torch {torch.__version__} | ResNet-18 (CIFAR stem{', width 8' if args.quick else ''}) | "
          f"{train_images} images, batch {args.batch}, {steps_per_epoch} steps/epoch | workers {args.workers}")
    for label in loops:
        m = out[label]
        print(f"  {label:<7} {m['epoch_seconds']:8.1f} s/epoch (median step {m['median_step_ms']:.2f} ms, "
              f"{m['samples_per_second']:,.0f} images/s; whole run with compile and data {m['wall_seconds']:.1f} s)")
    if "ratio" in out:
        print(f"  ratio envkit / fastest plain loop = {out['ratio']:.3f} (images/s; rounds: {', '.join(f'{x:.3f}' for x in out['ratios'])})")
    if not args.quick and "envkit" in loops:
        print("  a common guide's figures: " + ", ".join(f"{k} ~{v:.0f} s/epoch (x{v / out['envkit']['epoch_seconds']:.1f} envkit here)"
                                                  for k, v in GUIDE_FIGURES.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
