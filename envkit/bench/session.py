"""`envkit bench` end to end: the ladder for this machine, each rung measured in its own child
process, judged against the CPU fp32 baseline, saved as a JSON file."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from envkit.bench.context import BenchContext
from envkit.bench.ladder import LOSS_TOLERANCE, Rung, build_ladder, carry_forward, judge
from envkit.bench.runner import Interrupted, run_spec
from envkit.bench.spec import RunResult, RunSpec


@dataclass
class BenchReport:
    device: str
    model: str
    rungs: list[RunResult]
    unit: str = "samples"
    profile: str | None = None
    torch: str | None = None
    batch_size: int = 0
    notes: list[str] = field(default_factory=list)
    saved: str | None = None
    interrupted: bool = False

    def to_dict(self) -> dict:
        keys = ("name", "status", "per_second", "speedup", "peak_memory_mb", "loss", "reason")
        return {"device": self.device, "model": self.model,
                "rungs": [{**{k: getattr(r, k) for k in keys}, "check": r.check} for r in self.rungs],
                "unit": self.unit, "profile": self.profile, "torch": self.torch, "batch_size": self.batch_size,
                "loss_tolerance": LOSS_TOLERANCE, "notes": self.notes, "saved": self.saved, "interrupted": self.interrupted}


def spec_for(ctx: BenchContext, rung: Rung, *, window_steps: int | None = None, windows: int = 5) -> RunSpec:
    """A rung as a RunSpec: the config's batch size for every rung (so the losses compare)."""
    s = rung.settings
    T = ctx.config.values["training"]
    spec = RunSpec(rung.name, rung.device, ctx.config.resolved(), precision=s.get("precision") or "fp32",
                   compile=bool(s.get("compile")), fused=bool(s.get("fused")), channels_last=bool(s.get("channels_last")),
                   batch_size=int(T["batch_size"]), windows=windows,
                   window_steps=window_steps or (5 if rung.device == "cpu" else 10), seed=int(ctx.config.values["experiment"]["seed"]))
    if s.get("profile") and ctx.profile is not None:
        p = ctx.profile
        dl = p.dataloader
        spec.num_workers, spec.pin_memory = int(dl["num_workers"]), bool(dl["pin_memory"])
        spec.persistent_workers, spec.prefetch_factor = bool(dl["persistent_workers"]), dl["prefetch_factor"]
        spec.empty_cache_every = int(p.train.get("empty_cache_every") or 0)
        spec.torch_settings = dict(p.torch)
        spec.env = ctx.profile_env()
    return spec


def run_bench(ctx: BenchContext, *, no_compile: bool = False, window_steps: int | None = None, timeout: float = 600,
              on_rung=None, debug: bool = False) -> BenchReport:
    rungs = build_ladder(ctx.facts, ctx.checks, ctx.target, ctx.model, no_compile=no_compile)
    report = BenchReport(ctx.target, ctx.model, [], profile=getattr(ctx.profile, "name", None),
                         torch=getattr(ctx.facts.torch, "version", None),
                         batch_size=int(ctx.config.values["training"]["batch_size"]))
    baseline = None
    base_env = ctx.plain_env()
    for i, rung in enumerate(rungs):
        if rung.skip:
            result = RunResult(rung.name, "skip", reason=rung.skip, check=rung.check)
        else:
            try:
                result = run_spec(spec_for(ctx, rung, window_steps=window_steps), ctx.python, base_env, timeout, debug)
            except Interrupted:
                report.interrupted = True
                report.notes.append(f"interrupted during {rung.name}: the rungs after it were not run")
                break
            if rung.baseline:
                baseline = result
            judge(result, baseline)
            report.unit = result.unit if result.status in ("ok", "flagged") else report.unit
        report.notes.extend(carry_forward(rungs, i, result.status in ("ok", "skip")))  # skips were left out when built
        report.rungs.append(result)
        if on_rung:
            on_rung(result)
    return report


def save_report(report: BenchReport, path: Path | None = None) -> Path:
    from envkit.fsutil import atomic_write_text

    if path is None:
        path = Path("runs") / "bench" / f"{report.model.replace(':', '_')}-{report.device}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    report.saved = str(path)
    atomic_write_text(Path(path), json.dumps(report.to_dict(), indent=2) + "\n")
    return Path(path)
