"""The training loop, top to bottom like nanoGPT's train.py:
setup (distributed, device, seeds, torch settings) -> data -> model -> precision -> optimizer and
schedule -> resume -> compile/DDP -> loop (step, log, eval, checkpoint, NaN guard) -> summary.

Runs in the child process that `envkit run` starts (envkit/train/run/child.py), or in-process for
benchmarks. `step` always counts completed optimizer steps.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import random
import signal
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from envkit.train.run import checkpoint as ckpt
from envkit.train.recovery import faults
from envkit.train.run.config import Config
from envkit.train.data.datasets import BUILTIN_DATASETS, ResumableBatchSampler, build_data
from envkit.train.run.distributed import init_distributed, wrap_ddp
from envkit.train.recovery.guards import NanGuard, TrainingStopped, resolve_device
from envkit.train.watching.mfu import mfu as compute_mfu
from envkit.train.run.models import build_model
from envkit.train.run.optim import build_optimizer, lr_at, steps_for_epochs
from envkit.train.data.prefetch import DeviceBatches, want_fetch_ahead
from envkit.train.watching.profiling import StepProfiler
from envkit.train.run.memory import empty_cache as _empty_cache, peak_memory_mb as _memory_mb
from envkit.train.run.step import LossModule, apply_sdpa_backend, compile_kwargs
from envkit.train.watching.telemetry import Telemetry, fmt_duration, write_json
from envkit.train.watching.watch import RunWatch


def train(cfg: Config, run_dir: Path, *, stop_after: int | None = None, resume: str = "auto",
          torch_settings: dict | None = None, handle_signals: bool = True,
          profile_steps: tuple[int, int] | None = None, on_step=None, split_oom: bool = True) -> dict:
    # bench/tune (envkit/bench/child.py) time these very steps: on_step(...) -> True stops; split_oom=False re-raises an OOM
    run_dir = Path(run_dir)
    E, D, M, T = cfg.values["experiment"], cfg.values["dataset"], cfg.values["model"], cfg.values["training"]
    V, C, L, DL = cfg.values["eval"], cfg.values["checkpoint"], cfg.values["logging"], cfg.values["dataloader"]

    # ------------------------------------------------------------ distributed, device, seeds
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    master = rank == 0
    tel = Telemetry(run_dir, total_steps=T["max_steps"], unit="", heartbeat_seconds=L["heartbeat_seconds"],
                    progress=L["progress"], enabled=master)
    log = tel.log
    device_type = resolve_device(cfg.values["device"]["type"], cfg.values["device"]["fallback_to_cpu"], log)
    device = torch.device(f"cuda:{local_rank}" if device_type == "cuda" else device_type)
    if device_type == "cuda":
        torch.cuda.set_device(device)
    if world > 1:
        init_distributed(device)
    seed = E["seed"]
    random.seed(seed)
    torch.manual_seed(seed)  # seeds CPU, CUDA and MPS generators
    for message in _apply_torch_settings(torch_settings, device_type) + apply_sdpa_backend(T["sdpa_backend"], device_type):
        log(message)

    # ------------------------------------------------------------ data
    data = build_data(cfg, seed=seed)
    for note in data.notes:
        log(note)
    bs, accum = T["batch_size"], T["grad_accum"]
    pin = DL["pin_memory"] if DL["pin_memory"] != "auto" else device_type == "cuda"
    sampler = ResumableBatchSampler(len(data.train), bs, seed, rank=rank, world=world)
    if T["epochs"]:  # max_steps follows the data: the schedule, log, ETA and summary count to it
        T["max_steps"] = steps_for_epochs(T["epochs"], sampler.per_epoch, accum)
        tel.set_epochs(T["epochs"], T["max_steps"])
    val_batches = _val_batches(data.val, bs, V["batches"])

    # ------------------------------------------------------------ model
    model = build_model(cfg, data.info, device_type).to(device)
    raw_model = model
    n_params = sum(p.numel() for p in model.parameters())
    flops_per_token = model.flops_per_token() if hasattr(model, "flops_per_token") else None
    log(f"model {M['type']}: {n_params / 1e6:.2f}M parameters on {device_type}"
        + (f" ({torch.cuda.get_device_name(device)})" if device_type == "cuda" else ""))
    device_name = torch.cuda.get_device_name(device) if device_type == "cuda" else device_type

    # ------------------------------------------------------------ precision
    precision = T["precision"]
    if precision == "auto":
        precision = "bf16" if device_type == "cuda" and torch.cuda.is_bf16_supported() else "fp32"
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    autocast = torch.autocast(device_type=device_type, dtype=dtype) if dtype else contextlib.nullcontext()
    # GradScaler only where fp16 needs it and works: CUDA (MPS's casts to float64, pytorch#142397)
    scaler = torch.amp.GradScaler("cuda", enabled=(precision == "fp16" and device_type == "cuda"))
    if precision == "fp16" and device_type != "cuda":
        log(f"note: fp16 on {device_type} runs without a GradScaler (it does not work there); watch for NaN")

    # ------------------------------------------------------------ optimizer and schedule
    optimizer = build_optimizer(model, T, device_type, cfg.origin)
    get_lr = functools.partial(lr_at, T=T)  # warm-up, then cosine to min_lr (or constant): train/run/optim.py

    # ------------------------------------------------------------ resume
    state = {"step": 0, "batches": 0, "best_val_loss": None, "lr_scale": 1.0, "rollbacks": 0, "elapsed": 0.0,
             "micro_batch": bs, "grad_accum": accum}
    ckpt_dir = run_dir / "checkpoints"
    config_hash = cfg.config_hash()
    resumed_from = None

    def restore(found) -> None:
        nonlocal bs, accum, sampler
        path, saved = found
        if saved["config_hash"] != config_hash:
            raise TrainingStopped(f"checkpoint {path.name} was written by a different config (hash {saved['config_hash']} != {config_hash}); "
                                  "start a new run (--resume never) or restore the old config")
        raw_model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        if saved.get("scaler"):
            scaler.load_state_dict(saved["scaler"])
        loop = saved.get("loop", {})
        state.update(step=saved["step"], batches=saved["data"]["batches"], best_val_loss=loop.get("best_val_loss"),
                     lr_scale=loop.get("lr_scale", 1.0), rollbacks=loop.get("rollbacks", 0), elapsed=loop.get("elapsed", 0.0))
        # a micro-batch split after an out-of-memory stays split; the data position follows it
        saved_bs = loop.get("micro_batch") or T["batch_size"]
        if saved_bs < bs:
            bs, accum = saved_bs, T["batch_size"] * T["grad_accum"] // saved_bs
            sampler = ResumableBatchSampler(len(data.train), bs, seed, rank=rank, world=world)
        state.update(batches=state["batches"] * saved_bs // bs, micro_batch=bs, grad_accum=accum)
        ckpt.set_rng_state(saved["rng"])

    if resume != "never":
        found = ckpt.newest_valid(ckpt_dir, log=log) if resume == "auto" else (Path(resume), ckpt.load(Path(resume)))
        if found:
            restore(found)
            resumed_from = found[0].name
            log(f"resumed from {found[0].name}: step {state['step']}, data position {state['batches']} batches")
    guard = NanGuard(T["nan_policy"], T["nan_lr_factor"], T["max_rollbacks"], state["rollbacks"])

    # ------------------------------------------------------------ compile, DDP
    # `model` from here on is the training module: forward + loss, one compiled graph (train/step.py)
    compile_note = _want_compile(T["compile"], device_type)
    loss_module = LossModule(model, accum)  # kept: an out-of-memory split changes its accum
    model, compile_note = _maybe_compile(loss_module, compile_note, log, T["compile_mode"])
    if world > 1:
        model = wrap_ddp(model, device, local_rank, T["ddp_bucket_mb"], T["ddp_comm_dtype"], log)

    def make_loader(start: int):
        sampler.start = start
        kw = {}
        if DL["num_workers"] > 0:
            kw = {"persistent_workers": DL["persistent_workers"], **({"prefetch_factor": DL["prefetch_factor"]} if DL["prefetch_factor"] else {})}
        loader = torch.utils.data.DataLoader(data.train, batch_sampler=sampler, num_workers=DL["num_workers"], pin_memory=pin,
                                             generator=torch.Generator().manual_seed(seed), **kw)
        return iter(loader) if data.check_batch is None else map(data.check_batch, loader)

    # ------------------------------------------------------------ training loop
    stop_reason = {"signal": None}
    if handle_signals and master:
        def on_signal(signum, frame):
            if stop_reason["signal"]:
                raise KeyboardInterrupt
            stop_reason["signal"] = signal.Signals(signum).name
            log(f"{stop_reason['signal']}: stopping after this step with a checkpoint (again to abort)")
        old_handlers = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}

    unit = "tokens" if data.kind == "lm" else "samples"
    per_step = bs * accum * world * (data.tokens_per_sample if data.kind == "lm" else 1)
    step, start_step = state["step"], state["step"]
    last_loss, last_val, last_acc, rates, status = None, None, None, [], "running"
    nonfinite = torch.zeros((), dtype=torch.bool, device=device)
    t_last, steps_since, paused = time.perf_counter(), 0, 0.0
    t_start = time.perf_counter()
    watch = RunWatch(run_dir, cfg.values, device_type, device, log, enabled=master, telemetry=tel, local_devices=world)
    batches = DeviceBatches(make_loader(state["batches"]), device, pin, watch.next_batch,
                            ahead=want_fetch_ahead(DL["fetch_ahead"], device_type, DL["num_workers"],
                                                   cfg.values["dataset"]["type"] in BUILTIN_DATASETS))
    tel.start(step)
    if cfg.declared.get("training.batch_size") == "auto":  # decided by envkit run's probe (train/run/auto_batch.py)
        log(f"training.batch_size {T['batch_size']} ({cfg.origin.get('training.batch_size', 'auto')})")
    log(f"training {M['type']} for {T['max_steps']} steps ({bs} x {accum} accum x {world} proc, {precision}, "
        f"compile {compile_note}) from step {step}; run folder {run_dir}")
    tel.heartbeat(step=step, loss=None, eta=None, force=True)

    profiler = StepProfiler(run_dir, profile_steps, device_type, rank, world, log)
    try:
        while step < T["max_steps"]:
            # -- one optimizer step
            profiler.before_step(step)
            lr = get_lr(step) * state["lr_scale"]
            for g in optimizer.param_groups:
                g["lr"] = lr
            loss_accum = torch.zeros((), device=device)
            batches_at_step = state["batches"]
            try:
                faults.inject_before_step(run_dir, step + 1, raw_model, micro_batch=bs)
                for micro in range(accum):
                    x, y = batches.take()
                    state["batches"] += 1  # counted when used: a checkpoint's data position
                    if world > 1:  # gradient sync only on the last micro-step
                        model.require_backward_grad_sync = micro == accum - 1
                    with autocast:
                        loss = model(x, y)  # cross-entropy / accum
                    batches.prefetch()  # the next batch is read and copied while the GPU runs this one
                    nonfinite |= ~torch.isfinite(loss.detach())
                    scaler.scale(loss).backward()
                    loss_accum += loss.detach()
            except Exception as exc:  # noqa: BLE001 - out of memory: split the micro-batch, redo this step
                bs, accum, factor = faults.shrink_after_oom(exc, run_dir=run_dir, step=step, bs=bs, accum=accum,
                                                           device_type=device_type, world=world, log=log, metrics=tel.metrics, split=split_oom)
                optimizer.zero_grad(set_to_none=True)
                sampler = ResumableBatchSampler(len(data.train), bs, seed, rank=rank, world=world)
                state.update(batches=batches_at_step * factor, micro_batch=bs, grad_accum=accum)
                loss_module.accum = accum
                batches.reset(make_loader(state["batches"]))
                continue
            grad_norm = None
            if T["grad_clip"] > 0:
                scaler.unscale_(optimizer)
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), T["grad_clip"])
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            steps_since += 1
            profiler.after_step(step)
            if T["empty_cache_every"] and step % T["empty_cache_every"] == 0:
                _empty_cache(device_type)
            if on_step is not None and on_step(step=step, loss=loss_accum, micro_batch=bs, per_step=per_step, unit=unit):
                status = "stopped"
                break

            # -- log (syncs with the device: only every logging.every_steps)
            at_end = step == T["max_steps"] or step == stop_after or stop_reason["signal"] is not None
            if step % L["every_steps"] == 0 or at_end:
                last_loss = float(loss_accum) * 1.0
                if bool(nonfinite) or not math.isfinite(last_loss):
                    step = _rollback(step, guard, ckpt_dir, restore, state, log)
                    nonfinite.zero_()
                    batches.reset(make_loader(state["batches"]))
                    t_last, steps_since = time.perf_counter(), 0
                    continue
                now = time.perf_counter()
                dt = (now - t_last - paused) / max(1, steps_since)  # eval/checkpoint time excluded
                paused = 0.0
                rate = per_step / dt if dt > 0 else None
                if step - start_step > steps_since or step - start_step > 2 * L["every_steps"]:
                    rates.append(rate)  # the first interval holds warm-up and compilation
                t_last, steps_since = now, 0
                row = {"step": step, "loss": round(last_loss, 6), "lr": lr, "dt_ms": round(1000 * dt, 3),
                       f"{unit}_per_second": rate, "epoch": round(sampler.epoch_of(state["batches"]), 4)}
                if grad_norm is not None:
                    row["grad_norm"] = float(grad_norm)
                m = compute_mfu(flops_per_token, rate if unit == "tokens" else None, device_name, world) if unit == "tokens" else None
                if m is not None:
                    row["mfu"] = m
                mem = _memory_mb(device_type, device)
                if mem:
                    row["memory_mb"] = mem
                watch.on_log(row)
                tel.metrics(row)
                eta = dt * (T["max_steps"] - step)
                tel.progress(step, row, eta)
                tel.heartbeat(step=step, loss=last_loss, eta=eta)

            # -- eval
            t_pause = time.perf_counter()
            if (V["every_steps"] and step % V["every_steps"] == 0) or step == T["max_steps"]:
                last_val, last_acc = _evaluate(raw_model, val_batches, data, device, autocast)
                if bool(nonfinite) or not math.isfinite(last_val):
                    step = _rollback(step, guard, ckpt_dir, restore, state, log)
                    nonfinite.zero_()
                    batches.reset(make_loader(state["batches"]))
                    continue
                if state["best_val_loss"] is None or last_val < state["best_val_loss"]:
                    state["best_val_loss"] = last_val
                row = {"step": step, "val_loss": last_val, **({"accuracy": last_acc} if last_acc is not None else {})}
                tel.metrics(row)
                log(f"eval step {step}: val loss {last_val:.4f}" + (f", accuracy {last_acc:.3f}" if last_acc is not None else "")
                    + (f" (baseline {data.baseline_loss:.4f})" if data.baseline_loss else ""))

            # -- checkpoint (never a non-finite state)
            if (C["every_steps"] and step % C["every_steps"] == 0) or at_end:
                if bool(nonfinite):
                    step = _rollback(step, guard, ckpt_dir, restore, state, log)
                    nonfinite.zero_()
                    batches.reset(make_loader(state["batches"]))
                    continue
                if master:
                    state["elapsed"] += time.perf_counter() - t_start
                    t_start = time.perf_counter()
                    path = ckpt.save(ckpt_dir, {
                        "step": step, "model": raw_model.state_dict(), "optimizer": optimizer.state_dict(),
                        "scaler": scaler.state_dict() if scaler.is_enabled() else None, "rng": ckpt.rng_state(),
                        "data": {"batches": state["batches"]}, "config_hash": config_hash,
                        "loop": {k: state[k] for k in ("best_val_loss", "lr_scale", "rollbacks", "elapsed", "micro_batch", "grad_accum")},
                    }, C["keep_last"])
                    tel.heartbeat(step=step, loss=last_loss, eta=None, force=True, checkpoint=path.name)
                if world > 1:
                    torch.distributed.barrier()

            paused += time.perf_counter() - t_pause
            if step == stop_after:
                status = "stopped"
                log(f"stopped after step {step} (--stop-after); `envkit run` again resumes")
                break
            if stop_reason["signal"]:
                status = "interrupted"
                log(f"interrupted at step {step} ({stop_reason['signal']}); checkpoint written; `envkit run` again resumes")
                break
        else:
            status = "completed"
    except TrainingStopped as exc:
        status = exc.status
        log(f"error: {exc}")
        _finish(tel, run_dir, status, step, locals(), error=str(exc))
        raise
    except BaseException as exc:
        status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
        _finish(tel, run_dir, status, step, locals(), error=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        profiler.close()
        if handle_signals and master:
            for s, h in old_handlers.items():
                signal.signal(s, h)
        if world > 1 and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    return _finish(tel, run_dir, status, step, locals())


# ---------------------------------------------------------------- helpers


def _finish(tel: Telemetry, run_dir: Path, status: str, step: int, ns: dict, error: str | None = None) -> dict:
    """summary.json and the last heartbeat (rank 0)."""
    T, data = ns["T"], ns.get("data")
    rates = [r for r in ns.get("rates", []) if r]
    unit = ns.get("unit", "samples")
    rate = statistics.median(rates) if rates else None
    state = ns.get("state", {})
    summary = {
        "status": status, "steps": step, "max_steps": T["max_steps"], "epochs": T["epochs"], "final_loss": ns.get("last_loss"),
        "best_val_loss": state.get("best_val_loss"), "final_val_loss": ns.get("last_val"),
        "device": ns.get("device_type"), "device_name": ns.get("device_name"), "precision": ns.get("precision"),
        "compile": ns.get("compile_note"), "world_size": ns.get("world", 1), "parameters": ns.get("n_params"),
        f"{unit}_per_second": rate, "resumed_from": ns.get("resumed_from"), "rollbacks": state.get("rollbacks", 0),
        "config_hash": ns.get("config_hash"), "elapsed_seconds": round(state.get("elapsed", 0.0), 2),
        "updated_at": time.time(),
    }
    if ns.get("last_acc") is not None:
        summary["accuracy"] = ns["last_acc"]
    if data is not None:
        summary["baseline_loss"] = data.baseline_loss
        if data.chance_accuracy is not None:
            summary["chance_accuracy"] = data.chance_accuracy
    if unit == "tokens":
        summary["flops_per_token"] = ns.get("flops_per_token")
        summary["mfu"] = compute_mfu(ns.get("flops_per_token"), rate, ns.get("device_name"), ns.get("world", 1))
    summary.update(micro_batch=state.get("micro_batch"), grad_accum=state.get("grad_accum"), faults=faults.events(run_dir))
    if error:
        summary["error"] = error
    if ns.get("watch") is not None:
        summary.update(ns["watch"].finish())
    if tel.enabled:
        write_json(run_dir / "summary.json", summary)
        tel.heartbeat(step=step, loss=ns.get("last_loss"), eta=None, status=status, force=True)
        rate_s = f"{rate:,.0f} {unit}/s" if rate else "n/a"
        tel.log(f"{status}: {step}/{T['max_steps']} steps, final loss {_f(ns.get('last_loss'))}, best val loss "
                f"{_f(state.get('best_val_loss'))}" + (f", accuracy {ns['last_acc']:.3f}" if ns.get("last_acc") is not None else "")
                + f", {rate_s}" + (f", mfu {100 * summary['mfu']:.1f}%" if summary.get("mfu") else "")
                + f", {fmt_duration(state.get('elapsed'))} of training")
    tel.close()
    return summary


def _f(x) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def _rollback(step, guard: NanGuard, ckpt_dir, restore, state, log) -> int:
    found = ckpt.newest_valid(ckpt_dir, log=log)
    factor = guard.on_nonfinite(step, found is not None)
    restore(found)
    state["lr_scale"] *= factor
    state["rollbacks"] = guard.rollbacks
    log(f"warning: non-finite loss by step {step}: rolled back to {found[0].name} (step {state['step']}), "
        f"learning rate x{state['lr_scale']:g} (rollback {guard.rollbacks}/{guard.max_rollbacks})")
    return state["step"]


def _val_batches(val, bs: int, n_batches: int) -> list[list[int]]:
    """Fixed validation batches, evenly spread over the set: every eval sees the same examples."""
    n = min(len(val), bs * n_batches)
    idx = torch.linspace(0, len(val) - 1, steps=n).long().tolist() if n else []
    return [idx[i:i + bs] for i in range(0, len(idx), bs)]


@torch.no_grad()
def _evaluate(model, val_batches, data, device, autocast) -> tuple[float, float | None]:
    from torch.utils.data import default_collate

    was_training = model.training
    model.eval()
    total, count, correct, seen = 0.0, 0, 0, 0
    for idx in val_batches:
        x, y = default_collate([data.val[i] for i in idx])
        x, y = x.to(device), y.to(device)
        with autocast:
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1), reduction="sum")
        total += float(loss)
        count += y.numel()
        if data.kind == "classify":
            correct += int((logits.argmax(-1) == y).sum())
            seen += y.numel()
    acc = correct / seen if seen else None
    if data.scorer is not None:
        acc = data.scorer(model, device, autocast).get("accuracy", acc)
    if was_training:
        model.train()
    return total / max(1, count), acc


def _want_compile(setting, device_type: str) -> str:
    if setting is True:
        return "on"
    if setting is False:
        return "off"
    return "on" if device_type == "cuda" else "off (auto: CUDA only)"


def _maybe_compile(model, note: str, log, mode: str = "default"):
    if note != "on":
        return model, note
    try:
        compiled = torch.compile(model, **compile_kwargs(mode))
    except Exception as exc:  # noqa: BLE001 - compile is an optimisation: fall back, say so
        log(f"warning: torch.compile failed ({type(exc).__name__}: {exc}); training eager")
        return model, f"failed, eager ({type(exc).__name__})"
    return _FallbackOnFirstCall(compiled, model, log), "on" if mode in (None, "default") else f"on ({mode})"


class _FallbackOnFirstCall(torch.nn.Module):
    """torch.compile compiles lazily: if the first forward fails, run eager from then on (reported)."""

    def __init__(self, compiled, eager, log):
        super().__init__()
        self.compiled, self._eager, self._log, self._checked = compiled, [eager], log, False

    def forward(self, *args, **kwargs):
        if self._checked:
            return self.compiled(*args, **kwargs)
        try:
            out = self.compiled(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001
            self._log(f"warning: torch.compile failed at the first step ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); "
                      "training eager (set training.compile: false to skip the attempt)")
            self.compiled = self._eager[0]
            out = self.compiled(*args, **kwargs)
        self._checked = True
        return out


def _apply_torch_settings(settings: dict | None, device_type: str) -> list[str]:
    if settings:
        try:
            from envkit.profiles.torch_settings import apply_torch_settings

            return list(apply_torch_settings(settings, device_type) or [])
        except ImportError:
            pass
    if device_type == "cuda":  # the defaults fast trainers use: TF32 matmuls and convolutions
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.set_float32_matmul_precision("high")
    return []
