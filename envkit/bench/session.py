"""`envkit bench` end to end: the ladder for this machine, each rung measured in its own child
process, judged against the CPU fp32 baseline, saved as a JSON file."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from envkit.bench.context import BenchContext
from envkit.bench.ladder import LOSS_TOLERANCE, Rung, build_ladder, carry_forward, data_can_live_on_device, judge
from envkit.bench.runner import Interrupted, run_spec
from envkit.bench.spec import RunResult, RunSpec
from envkit.fsutil import atomic_write_text
from envkit.train.run.sharding import config_problem

if TYPE_CHECKING:
    from envkit.facts.model import TrainDevice
    from envkit.train.run.state import RateUnit


@dataclass
class BenchReport:
    device: TrainDevice
    model: str
    rungs: list[RunResult]
    unit: RateUnit = "samples"
    profile: str | None = None
    torch: str | None = None
    batch_size: int = 0
    notes: list[str] = field(default_factory=list)
    saved: str | None = None
    interrupted: bool = False
    elapsed_s: float = 0.0
    seconds_per_rung: float = 0.0  # what each rung on the training device is timed for, after its warm-up
    windows: int = 3  # ... in this many windows, the median counting
    baseline_steps: int | None = None  # the CPU baseline of a GPU ladder: at most this many timed steps

    def to_dict(self) -> dict:
        keys = ("name", "status", "per_second", "speedup", "peak_memory_mb", "loss", "reason", "micro_batch", "grad_accum",
                "did_not_fit", "steps", "seconds", "changed", "world", "scaling", "scaling_over", "efficiency")
        return {"device": self.device, "model": self.model,
                "rungs": [{**{k: getattr(r, k) for k in keys}, "check": r.check} for r in self.rungs],
                "unit": self.unit, "profile": self.profile, "torch": self.torch, "batch_size": self.batch_size,
                "loss_tolerance": LOSS_TOLERANCE, "notes": self.notes, "saved": self.saved, "interrupted": self.interrupted,
                "elapsed_s": self.elapsed_s, "seconds_per_rung": self.seconds_per_rung, "windows": self.windows,
                "baseline_steps": self.baseline_steps}


# How long a rung is measured (seconds after its warm-up) unless --seconds says otherwise, and the
# cap on the CPU baseline when the machine trains on a GPU: a CPU step of a real model can take
# tens of seconds (GPT-2 small: 28 steps ran past 10 minutes), so it times a few steps only.
SECONDS = {"cpu": 4.0, "device": 6.0}
BASELINE_CAP = {"max_steps": 2, "seconds": 10.0}
MIN_LEFT_S = 3.0  # a rung started with less budget than this could not even start torch
Baseline = Literal["cpu", "device"]  # --baseline: the reference rung, the CPU fp32 one or the first on the device


def measurement_for(rung: Rung, target: TrainDevice, seconds: float | None) -> dict:
    """Warm-up steps, seconds and windows (and a step cap) for one rung."""
    compiled = bool(rung.settings.get("compile"))
    if rung.device == "cpu" and target != "cpu":  # the baseline of a GPU or Mac ladder: capped, said so
        return {"warmup_steps": 1, "seconds": min(seconds or BASELINE_CAP["seconds"], BASELINE_CAP["seconds"]),
                "windows": 1, "max_steps": BASELINE_CAP["max_steps"]}
    if rung.device == "cpu":
        return {"warmup_steps": 2 if compiled else 1, "seconds": seconds or SECONDS["cpu"], "windows": 3}
    return {"warmup_steps": 3, "seconds": seconds or SECONDS["device"], "windows": 3}


def spec_for(ctx: BenchContext, rung: Rung, *, seconds: float | None = None) -> RunSpec:
    """A rung as a RunSpec: the config's batch and accumulation for every rung (so the losses compare)."""
    s = rung.settings
    T = ctx.config.training
    spec = RunSpec(rung.name, rung.device, ctx.config.resolved(), precision=s.get("precision") or "fp32",
                   compile=bool(s.get("compile")), channels_last=bool(s.get("channels_last")),
                   compile_mode=s.get("compile_mode"), on_device=s.get("on_device"),
                   batch_size=int(T.batch_size), grad_accum=int(T.grad_accum), nproc=rung.nproc, parallel=s.get("parallel"),
                   seed=int(ctx.config.experiment.seed), **measurement_for(rung, ctx.target, seconds))
    if s.get("profile") and ctx.profile is not None:
        p = ctx.profile
        dl = p.dataloader
        spec.num_workers, spec.pin_memory = int(dl["num_workers"]), bool(dl["pin_memory"])
        spec.persistent_workers, spec.prefetch_factor = bool(dl["persistent_workers"]), dl["prefetch_factor"]
        spec.empty_cache_every = int(p.train.get("empty_cache_every") or 0)
        spec.torch_settings = dict(p.torch)
        spec.env = ctx.profile_env()
    return spec


def fsdp_problem(config, nproc: int):
    """The fsdp rung's check: the trainer's own (sharding.config_problem: a model with no sharding
    plan, fp16 without a sharded GradScaler), for the rung's precision. (why, in short) or None."""
    def problem(settings: dict):
        cfg = config.replace_many({"training.parallel": "fsdp", "training.precision": settings.get("precision") or "fp32"})
        found = config_problem(cfg, max(2, nproc))
        if found is None:
            return None
        why = found[0]
        return why, ("no sharding plan for this model" if "sharding plan" in why else why.split(" needs ")[0][:40])
    return problem


def scale(result: RunResult, results: list[RunResult], device: TrainDevice) -> None:
    """A data-parallel rung against the best single-process rung on its device: x1.87 of cuda + profile
    on 2 GPUs is 94% per GPU. The rate is the global one (all processes' samples or tokens)."""
    if result.world < 2 or result.status not in ("ok", "flagged") or not result.per_second:
        return
    single = [r for r in results if r.world == 1 and r.status == "ok" and r.per_second and r.name.startswith(device)]
    best = max(single, key=lambda r: r.per_second or 0.0, default=None)  # each has a rate (above)
    if best is None or not best.per_second:
        return
    result.scaling, result.scaling_over = result.per_second / best.per_second, best.name
    result.efficiency = result.scaling / result.world


def fit_note(r: RunResult) -> str:
    """What a rung that split its micro-batch ran at, and what did not fit (with what it asked for)."""
    if not r.did_not_fit:
        return ""
    tried = ", ".join(f"{d['micro_batch']}" + (f" (asked {d['asked']})" if d.get("asked") else "") for d in r.did_not_fit)
    ran = f"micro-batch {r.micro_batch} x {r.grad_accum} accumulation" if r.micro_batch else "nothing fit"
    return f"{ran}: micro-batch {tried} does not fit"


def measuring_order(rungs: list, target: TrainDevice, baseline: Baseline = "cpu") -> list[int]:
    """The order rungs are measured in: the reference first (the CPU baseline, or with --baseline
    device the first device rung), then the profile rung on the training device (all the profile
    turns on: what `envkit run` does, the figure a user came for), then the rest in ladder order.
    Under a --budget that cannot hold the whole ladder, the rungs in between are the ones skipped."""
    order: list[int] = []
    if baseline == "device" and target != "cpu":
        order += [i for i, r in enumerate(rungs) if r.device == target and not r.skip][:1]
    else:
        order += [i for i, r in enumerate(rungs) if r.baseline][:1]
    order += [i for i, r in enumerate(rungs) if r.device == target and r.settings.get("profile") and "profile" in r.adds
              and not r.skip and i not in order][:1]
    return order + [i for i in range(len(rungs)) if i not in order]


def run_bench(ctx: BenchContext, *, no_compile: bool = False, seconds: float | None = None, budget_s: float = 240.0,
              baseline: Baseline = "cpu", on_start=None, on_progress=None, on_rung=None, debug: bool = False,
              nproc: int | None = None) -> BenchReport:
    """Every rung in its own child, within `budget_s` for the whole ladder. baseline "device": the
    CPU rung is skipped and the first device rung is the reference for speed-ups and losses. nproc:
    the data-parallel rungs' processes (None: one per CUDA GPU)."""
    t0 = time.monotonic()
    rungs = build_ladder(ctx.facts, ctx.checks, ctx.target, ctx.model, no_compile=no_compile,
                         on_device_data=data_can_live_on_device(ctx.config.dataset), nproc=nproc,
                         fsdp_problem=fsdp_problem(ctx.config, nproc or 2))
    timing = measurement_for(Rung("", ctx.target), ctx.target, seconds)  # a rung on the training device
    report = BenchReport(ctx.target, ctx.model, [], profile=getattr(ctx.profile, "name", None),
                         torch=getattr(ctx.facts.torch, "version", None),
                         batch_size=int(ctx.config.training.batch_size),
                         seconds_per_rung=timing["seconds"], windows=timing["windows"],
                         baseline_steps=BASELINE_CAP["max_steps"] if ctx.target != "cpu" and baseline == "cpu" else None)
    if ctx.target == "cuda":
        report.notes.append("fused AdamW is in every CUDA rung (the trainer's own step), no rung of its own")
    ref = None
    base_env = ctx.plain_env()
    results: dict[int, RunResult] = {}
    for i in measuring_order(rungs, ctx.target, baseline):
        rung = rungs[i]
        left = budget_s - (time.monotonic() - t0)
        if rung.skip:
            result = RunResult(rung.name, "skip", reason=rung.skip, check=rung.check, short=rung.short)
        elif rung.baseline and baseline == "device" and ctx.target != "cpu":
            result = RunResult(rung.name, "skip", reason="--baseline device: speed-ups are over the first device rung",
                               short="--baseline device")
        elif rung.adds.get("compile_mode") and not rung.settings.get("compile"):  # CUDA graphs are a compile mode
            result = RunResult(rung.name, "skip", reason="reduce-overhead is a torch.compile mode, and the compile rung did not pass",
                               short="the compile rung did not pass")
        elif left < MIN_LEFT_S:
            result = RunResult(rung.name, "skip", reason=f"the budget of {budget_s:.0f} s (--budget) ran out before this rung",
                               short="the --budget ran out")
        else:
            spec = spec_for(ctx, rung, seconds=seconds)
            if on_start:
                on_start(rung.name)
            try:
                result = run_spec(spec, ctx.python, base_env, left, debug, on_progress=on_progress)
            except Interrupted:
                report.interrupted = True
                report.notes.append(f"interrupted during {rung.name}: the rungs not yet measured were not run")
                break
            if result.note == "timeout":  # killed when the budget's time was up
                result.status, result.reason = "skip", f"the budget of {budget_s:.0f} s (--budget) ran out during this rung"
                result.short = "the --budget ran out"
            result.reason = "; ".join(x for x in (fit_note(result), result.reason if result.status != "ok" else "") if x)
            if result.status == "ok" and spec.max_steps:
                result.reason = "; ".join(x for x in (f"capped: {result.steps} timed step{'s' if result.steps != 1 else ''} "
                                                      f"after {spec.warmup_steps} warm-up (a CPU step of this model is slow)",
                                                      result.reason) if x)
            if ref is None and result.status == "ok" and (rung.baseline or baseline == "device"):
                ref = result
            judge(result, ref)
            scale(result, list(results.values()), ctx.target)
            report.unit = result.unit if result.status in ("ok", "flagged") else report.unit
        result.changed = rung.changes
        results[i] = result
        # a failed addition leaves the rungs not yet measured (the ones already measured ran with it)
        pending = [r if j not in results else replace(r, skip="measured") for j, r in enumerate(rungs)]
        report.notes.extend(carry_forward(pending, i, result.status in ("ok", "skip")))
        if on_rung:
            on_rung(result)
    report.rungs = [results[i] for i in sorted(results)]  # the ladder's order, whatever the measuring order
    report.elapsed_s = round(time.monotonic() - t0, 1)
    return report


def save_report(report: BenchReport, path: Path | None = None) -> Path:
    if path is None:
        path = Path("runs") / "bench" / f"{report.model.replace(':', '_')}-{report.device}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    report.saved = str(path)
    atomic_write_text(Path(path), json.dumps(report.to_dict(), indent=2) + "\n")
    return Path(path)
