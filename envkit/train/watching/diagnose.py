"""Hints a person would otherwise work out by hand from the numbers, as pure functions over the
logged metrics rows: the input pipeline starving the device, a device too lightly loaded to be
busy, memory nearing the limit. Each hint carries its evidence (the measured numbers) and the
setting to try. The trainer logs them once, `envkit monitor` shows them, summary.json keeps them.

"Device idle" is measured the same way on every device: `data_wait_fraction`, the share of the
training time the loop spent waiting in `next(batches)` (the trainer times it). On a GPU the
utilization nvidia-smi or ioreg reports backs it up; on the CPU it is the only honest signal.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import asdict, dataclass
from typing import Literal

# Thresholds (why): at half the step time spent waiting for data the device idles at least half
# the time; a GPU above 85% busy is not starved whatever the wait says; 90% of the memory limit
# leaves one larger batch or activation spike before the out-of-memory error.
INPUT_WAIT_FRACTION = 0.5
BUSY_UTIL_PCT = 85.0
UNDERUSED_UTIL_PCT = 50.0
MEMORY_FRACTION = 0.90
SYSTEM_FREE_PCT = 10.0
WINDOW = 5  # the last logged intervals judged (the warm-up's, with compilation and the first step, are not)

_DEVICE_NOUN = {"cuda": "GPU", "mps": "Apple GPU", "cpu": "CPU"}


HintId = Literal["input-pipeline", "device-underused", "memory-near-limit", "system-memory-pressure"]


@dataclass(frozen=True)
class Hint:
    id: HintId
    message: str
    evidence: str
    fix: str

    def to_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        return f"hint [{self.id}]: {self.message} ({self.evidence}); try: {self.fix}"


@dataclass(frozen=True)
class HintContext:
    """The settings a hint names (from the run's resolved config)."""

    device: str = "cpu"
    num_workers: int = 0
    pin_memory: bool = False
    batch_size: int | None = None
    cpu_count: int = os.cpu_count() or 1
    compile: bool | None = None  # torch.compile on for this run (None: not known): never proposed when on

    @classmethod
    def from_config(cls, values: dict, device: str) -> HintContext:
        dl, t = values.get("dataloader", {}), values.get("training", {})
        pin = dl.get("pin_memory", "auto")
        comp = t.get("compile", "auto")
        return cls(device=device, num_workers=int(dl.get("num_workers") or 0),
                   pin_memory=(device == "cuda") if pin == "auto" else bool(pin), batch_size=t.get("batch_size"),
                   compile=(device == "cuda") if comp == "auto" else bool(comp))


def after_warmup(train: list[dict]) -> list[dict]:
    """The training rows past the warm-up: a row the trainer marked `"warmup": true` is the logged
    window that holds the first step of an attempt (compilation, workers spawning, caches filling);
    rows of an older envkit carry no mark, and their first row is that window."""
    if any("warmup" in r for r in train):
        return [r for r in train if not r.get("warmup")]
    return train[1:]


def _median(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return statistics.median(values) if values else None


def _input_fix(ctx: HintContext) -> str:
    fixes = []
    if ctx.num_workers == 0:
        fixes.append(f"dataloader.num_workers: {max(2, min(8, ctx.cpu_count // 2))} (now 0: batches are made in the training process)")
    else:
        fixes.append(f"more dataloader.num_workers (now {ctx.num_workers}) or a cheaper __getitem__ (pre-process once, cache)")
    if ctx.device == "cuda" and not ctx.pin_memory:
        fixes.append("dataloader.pin_memory: true")
    fixes.append(f"a larger training.batch_size{f' (now {ctx.batch_size})' if ctx.batch_size else ''} if the per-batch cost is fixed")
    return "; ".join(fixes)


def diagnose(rows: list[dict], ctx: HintContext) -> list[Hint]:
    """Hints from the training rows of metrics.jsonl (rows with "loss"), newest last."""
    recent = after_warmup([r for r in rows if "loss" in r])[-WINDOW:]
    if not recent:
        return []
    hints: list[Hint] = []
    wait = _median(recent, "data_wait_fraction")
    util = _median(recent, "device_util_pct")
    dt = _median(recent, "dt_ms")
    n = sum(1 for r in recent if isinstance(r.get("data_wait_fraction"), (int, float)))
    if wait is not None and wait >= INPUT_WAIT_FRACTION and (util is None or util < BUSY_UTIL_PCT):
        evidence = f"median of the last {n} logs: {100 * wait:.0f}% of step time waiting for data, step {dt:.0f} ms"
        if util is not None:
            evidence += f", {ctx.device} utilization {util:.0f}%"
        hints.append(Hint("input-pipeline", "the input pipeline is the bottleneck: the device waits for batches", evidence,
                          _input_fix(ctx)))
    elif util is not None and util < UNDERUSED_UTIL_PCT and ctx.device != "cpu" and (wait is None or wait < INPUT_WAIT_FRACTION):
        noun = _DEVICE_NOUN.get(ctx.device, ctx.device)
        hints.append(Hint("device-underused", f"the {noun} is busy only part of the time although batches arrive on time",
                          f"median of the last {len(recent)} logs: {ctx.device} utilization {util:.0f}%, "
                          f"{100 * (wait or 0):.0f}% of step time waiting for data, step {dt:.0f} ms",
                          f"a larger training.batch_size{f' (now {ctx.batch_size})' if ctx.batch_size else ''}"
                          " (small steps are launch-bound)" + ("" if ctx.compile else ", or training.compile: true")))
    last = recent[-1]
    total = last.get("device_mem_total_mb")
    used = max(last.get("device_mem_used_mb") or 0, last.get("torch_reserved_mb") or 0, last.get("torch_driver_mb") or 0)
    if total and used and used / total >= MEMORY_FRACTION:
        hints.append(Hint("memory-near-limit", "device memory is close to its limit: the next larger batch or sequence may run out",
                          f"{used / 1024:.1f} of {total / 1024:.1f} GiB in use ({100 * used / total:.0f}%) at step {last.get('step')}",
                          "a smaller training.batch_size with a larger training.grad_accum (same effective batch)"))
    free = last.get("system_mem_free_pct")
    if isinstance(free, (int, float)) and free <= SYSTEM_FREE_PCT:
        hints.append(Hint("system-memory-pressure", "the system is short of memory: macOS will swap and training slows or stops",
                          f"memory_pressure reports {free:.0f}% free at step {last.get('step')}",
                          "a smaller training.batch_size, or close other applications"))
    return hints
