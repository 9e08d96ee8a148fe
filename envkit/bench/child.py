"""One measured run, in a fresh interpreter: `python -m envkit.bench.child SPEC.json`.

Started by envkit/bench/runner.py with the run's environment already set (variables such as
PYTORCH_MPS_HIGH_WATERMARK_RATIO are read when torch starts). It trains with the trainer itself
(envkit/train/run/loop.py `train`: the same model, data loader, fetch-ahead, optimizer, compiled
forward + loss, accumulation and out-of-memory handling as `envkit run`) and times its steps from
the `on_step` hook (StepClock): `warmup_steps` steps first (compilation, allocator, caches), then
`windows` windows of `seconds / windows` seconds each, each closed by a device sync; the rate is
the median window. Prints one line `@@envkit-bench {json}`. Needs torch and the standard library only.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import traceback
from pathlib import Path

from envkit.bench.clock import StepClock
from envkit.bench.stages import StagedClock
from envkit.config.config import Config
from envkit.train.recovery import faults
from envkit.train.recovery.faults import asked_for, events
from envkit.train.run.batch_probe import device_memory_mb, peak_mb
from envkit.runfolder.bounded import read_bytes
from envkit.runfolder.folder import RunFolder

MARK = "@@envkit-bench "
# PyTorch's own settings (profiles/base.toml): what the rungs before the profile rung run with
PYTORCH_DEFAULTS = {"matmul_precision": "highest", "allow_tf32": False, "cudnn_benchmark": False}


def run_config(spec: dict):
    """The user's config with this run's settings: the rung's (or candidate's) precision, compile,
    batch, loader and device; no eval, checkpoint, tracker or progress display inside the clock."""
    cfg = Config.from_resolved(spec["config"])
    workers = int(spec.get("num_workers") or 0)
    v = {"device.type": spec["device"], "device.fallback_to_cpu": False, "device.fallback": "none",
         "training.precision": spec["precision"], "training.compile": "auto" if spec["compile"] == "auto" else bool(spec["compile"]),
         "training.batch_size": int(spec["batch_size"]), "training.grad_accum": int(spec.get("grad_accum") or 1),
         "training.empty_cache_every": int(spec.get("empty_cache_every") or 0),
         "training.max_steps": 10**9, "training.epochs": 0,  # the clock ends the run: a config's epochs would end it first (a short epoch)
         "dataloader.num_workers": workers, "dataloader.pin_memory": bool(spec.get("pin_memory")) and spec["device"] == "cuda",
         "dataloader.persistent_workers": bool(spec.get("persistent_workers")) and workers > 0,
         "dataloader.prefetch_factor": spec.get("prefetch_factor") if workers > 0 else None}
    if cfg.model.type == "cnn":
        v["model.channels_last"] = bool(spec.get("channels_last"))
    if spec.get("compile_mode"):
        v["training.compile_mode"] = spec["compile_mode"]
    if spec.get("on_device") is not None:
        v["dataset.on_device"] = bool(spec["on_device"])
    if spec.get("parallel"):  # the data-parallel rungs, under torchrun: the trainer sets up DDP/FSDP from its environment
        v["training.parallel"] = spec["parallel"]
    v.update({"eval.every_steps": 0, "checkpoint.every_steps": 0, "logging.progress": "none", "logging.trackers": [],
              "experiment.seed": int(spec["seed"])})
    return cfg.replace_many(v)


def measure(spec: dict) -> dict:
    import torch

    from envkit.train.run.loop import train

    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))

    real = Config.from_resolved(spec["config"]).training  # before run_config changes it: the run this one stands for
    run_length = {"epochs": real.epochs, "max_steps": real.max_steps}
    cfg = run_config(spec)
    device_type = spec["device"]
    if device_type == "cuda":
        torch.cuda.init()
        # under torchrun each process has its GPU (the trainer's cuda:LOCAL_RANK): the memory read
        # below must be that one's, not a context on GPU 0 for every process
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    _, free_before = device_memory_mb(device_type) if device_type in ("cuda", "cpu") else (None, None)
    clock = StepClock(spec["device"], warmup_steps=int(spec["warmup_steps"]), seconds=float(spec["seconds"]),
                      windows=int(spec["windows"]), max_steps=spec.get("max_steps"))
    if spec.get("stages"):  # sweep --pack auto: timed at several counts at once, started once (bench/stages.py)
        clock = StagedClock(clock, spec["stages"], int(spec.get("stage_index") or 0), free_before, run_length=run_length)
    # The run's folder sits in the folder of the spec, which the parent made and removes even when it
    # kills this process at a rung's timeout or budget (a folder of its own in /tmp was left behind then)
    with tempfile.TemporaryDirectory(prefix="run-", dir=spec.get("work_dir")) as tmp:
        run_dir = Path(tmp)
        try:
            result = train(cfg, run_dir, resume="never", handle_signals=False, on_step=clock,
                            torch_settings=spec.get("torch_settings") or PYTORCH_DEFAULTS, split_oom=bool(spec.get("split_oom", True)))
        except Exception as exc:  # noqa: BLE001 - out of memory is an answer: this batch does not fit
            if not faults.is_oom(exc):
                raise
            last = min([int(spec["batch_size"])] + [e["micro_batch"] for e in faults.events(run_dir) if e.get("event") == "oom"])
            return {"status": "fail", "oom": True, "reason": _first_line(exc),
                    "did_not_fit": _splits(run_dir) + [{"micro_batch": last, "asked": faults.asked_for(exc)}]}
        log = (read_bytes(RunFolder(run_dir).train_log, max_bytes=16 << 20, tail=True) or b"").decode(errors="replace")
        splits = _splits(run_dir)
    if spec.get("compile") and "torch.compile failed" in log:
        line = next(ln for ln in log.splitlines() if "torch.compile failed" in ln)
        return {"status": "fail", "reason": line.split("warning: ", 1)[-1][:300], "did_not_fit": splits}
    if not clock.rates:
        return {"status": "fail", "reason": f"no timed window ({result.status}: {result.error or 'stopped early'})",
                "did_not_fit": splits}
    memory = {"rss_peak_mb": peak_mb("cpu"), "device_free_mb": free_before}
    free_after = device_memory_mb("cuda")[1] if device_type == "cuda" and free_before is not None else None
    if free_before is not None and free_after is not None:  # what this process took from the device, its context included
        memory["device_used_mb"] = free_before - free_after
    return {"status": "ok", "per_second": statistics.median(clock.rates), "unit": clock.unit, "peak_memory_mb": clock.peak_mb,
            **memory, "loss": clock.loss, "windows": len(clock.rates), "steps": clock.steps_timed,
            "world": result.world_size or 1, "timed_s": clock.timed_s,
            "micro_batch": result.micro_batch, "grad_accum": result.grad_accum, "did_not_fit": splits}


def _splits(run_dir: Path) -> list[dict]:
    """The micro-batches the trainer split because they did not fit, with what each asked for."""
    return [{"micro_batch": e["micro_batch_before"], "asked": asked_for(Exception(e.get("error", "")))}
            for e in events(run_dir) if e.get("event") == "oom"]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:300]}" if text else type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    import warnings

    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    args = sys.argv[1:] if argv is None else argv
    spec = json.loads(open(args[0]).read())
    spec.setdefault("work_dir", os.path.dirname(os.path.abspath(args[0])))
    try:
        out = measure(spec)
    except Exception as exc:  # noqa: BLE001 - the rung failed: say how, in one line, and exit cleanly
        out = {"status": "fail", "reason": _first_line(exc), "oom": False}
        if "--debug" in args:
            traceback.print_exc()
    if os.environ.get("RANK", "0") == "0":  # under torchrun every rank measured; rank 0 speaks for them
        print(MARK + json.dumps(out), flush=True)
    elif out["status"] == "fail":  # another rank's failure ends rank 0 before it speaks: its stderr says why
        print(f"rank {os.environ['RANK']}: {out['reason']}", file=sys.stderr, flush=True)
    # under torchrun a rank that failed exits non-zero, so torchrun ends the others (which would
    # otherwise wait in a collective for it until NCCL's timeout); rank 0's line is out by then
    return 1 if out["status"] == "fail" and int(os.environ.get("WORLD_SIZE", "1")) > 1 else 0


if __name__ == "__main__":  # the spawn guard: DataLoader workers re-import the main module on macOS
    sys.exit(main())
