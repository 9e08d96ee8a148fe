"""One measured run, in a fresh interpreter: `python -m envkit.bench.child SPEC.json`.

Started by envkit/bench/runner.py with the run's environment already set (variables such as
PYTORCH_MPS_HIGH_WATERMARK_RATIO are read when torch starts). Builds the model and data as the
trainer does (envkit/train/run/models.py, data.py), trains `warmup` steps, then `windows` timed
windows of `window_steps` steps; the device is synchronised before the clock is read. Prints one
line `@@envkit-bench {json}` with the median rate, peak device memory and the last window's mean
loss. Needs torch and the standard library only.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import sys
import time
import traceback

MARK = "@@envkit-bench "


def _sync(device_type: str) -> None:
    import torch

    if device_type == "cuda":
        torch.cuda.synchronize()
    elif device_type == "mps":
        torch.mps.synchronize()


def _peak_mb(device_type: str, seen: float) -> float | None:
    import torch

    if device_type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    if device_type == "mps":  # no peak counter on MPS: the largest value seen at window ends
        return max(seen, torch.mps.driver_allocated_memory() / 2**20)
    return None


def measure(spec: dict) -> dict:
    import torch
    import torch.nn.functional as F

    from envkit.train.run.config import Config
    from envkit.train.data.datasets import ResumableBatchSampler, build_data
    from envkit.train.run.models import build_model

    cfg = Config.from_resolved(spec["config"])
    dev = spec["device"]
    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    if spec.get("torch_settings"):
        from envkit.profiles.torch_settings import apply_torch_settings

        apply_torch_settings(spec["torch_settings"], dev)
    elif dev == "cuda":  # no profile yet: PyTorch's defaults (TF32 off) are what the ladder starts from
        torch.backends.cuda.matmul.allow_tf32 = False
    seed = spec["seed"]
    torch.manual_seed(seed)
    data = build_data(cfg, seed=seed)
    cfg.values["model"]["channels_last"] = bool(spec.get("channels_last"))
    model = build_model(cfg, data.info, dev)  # built on the CPU from the seed: the same weights on every device
    device = torch.device(dev)
    model = model.to(device)
    if spec.get("channels_last") and cfg.values["model"]["type"] == "cnn":
        model = model.to(memory_format=torch.channels_last)
    T = cfg.values["training"]
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": T["weight_decay"]}, {"params": rest, "weight_decay": 0.0}]
    opt_kw = {"fused": True} if spec.get("fused") else {}
    optimizer = torch.optim.AdamW(groups, lr=T["lr"], betas=(T["beta1"], T["beta2"]), **opt_kw)
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[spec["precision"]]
    scaler = torch.amp.GradScaler("cuda", enabled=(dtype is torch.float16 and dev == "cuda"))
    step_model = torch.compile(model) if spec.get("compile") else model

    bs = int(spec["batch_size"])
    workers = int(spec.get("num_workers") or 0)
    kw = {}
    if workers > 0:
        kw = {"persistent_workers": bool(spec.get("persistent_workers"))}
        if spec.get("prefetch_factor"):
            kw["prefetch_factor"] = int(spec["prefetch_factor"])
    sampler = ResumableBatchSampler(len(data.train), bs, seed)
    pin = bool(spec.get("pin_memory")) and dev == "cuda"
    loader = iter(torch.utils.data.DataLoader(data.train, batch_sampler=sampler, num_workers=workers, pin_memory=pin,
                                              generator=torch.Generator().manual_seed(seed), **kw))
    per_step = bs * (data.tokens_per_sample if data.kind == "lm" else 1)
    unit = "tokens" if data.kind == "lm" else "samples"
    empty_every = int(spec.get("empty_cache_every") or 0)
    steps = 0

    def one_step() -> torch.Tensor:
        nonlocal steps
        x, y = next(loader)
        x, y = x.to(device, non_blocking=pin), y.to(device, non_blocking=pin)
        if spec.get("channels_last") and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(device_type=dev, dtype=dtype) if dtype else contextlib.nullcontext():
            logits = step_model(x)
            loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))
        scaler.scale(loss).backward()
        if T["grad_clip"] > 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), T["grad_clip"])
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        steps += 1
        if empty_every and steps % empty_every == 0 and dev in ("cuda", "mps"):
            getattr(torch, dev).empty_cache()  # torch.cuda.empty_cache / torch.mps.empty_cache
        return loss.detach()

    for _ in range(int(spec["warmup"])):
        one_step()
    _sync(dev)
    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times, seen, last = [], 0.0, None
    for _ in range(int(spec["windows"])):
        total = torch.zeros((), device=device)
        _sync(dev)
        t0 = time.perf_counter()
        for _ in range(int(spec["window_steps"])):
            total += one_step()
        _sync(dev)  # the work of the window is done before the clock is read
        times.append(time.perf_counter() - t0)
        last = float(total) / int(spec["window_steps"])
        if dev == "mps":
            seen = max(seen, torch.mps.driver_allocated_memory() / 2**20)
    median = statistics.median(times)
    return {"status": "ok", "per_second": per_step * int(spec["window_steps"]) / median, "unit": unit,
            "peak_memory_mb": _peak_mb(dev, seen), "loss": last, "windows_s": times}


def main(argv: list[str] | None = None) -> int:
    import warnings

    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    args = sys.argv[1:] if argv is None else argv
    spec = json.loads(open(args[0]).read())
    try:
        out = measure(spec)
    except Exception as exc:  # noqa: BLE001 - the rung failed: say how, in one line, and exit cleanly
        text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
        out = {"status": "fail", "reason": f"{type(exc).__name__}: {text}",
               "oom": "out of memory" in str(exc).lower() or type(exc).__name__ == "OutOfMemoryError"}
        if "--debug" in args:
            traceback.print_exc()
    print(MARK + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":  # the spawn guard: DataLoader workers re-import the main module on macOS
    sys.exit(main())
