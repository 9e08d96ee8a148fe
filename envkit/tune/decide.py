"""The tuner's decisions: pure functions of measurements and facts, so each one (the Mac-only ones
included) is tested with recorded measurements on any machine.

A candidate replaces the incumbent only when it is measurably faster (by more than MARGIN: a
shared machine's noise must not rewrite a profile) and, where the numbers can be compared, its
loss stays within the ladder's tolerance. A failed or out-of-memory run is never chosen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, cast

from envkit.bench.ladder import LOSS_TOLERANCE
from envkit.config.schema import CompileMode, TrainPrecision

if TYPE_CHECKING:
    from envkit.bench.spec import RanStatus
    from envkit.facts.model import TrainDevice
    from envkit.train.run.state import RateUnit

MARGIN = 0.05  # a candidate must be 5% faster than the incumbent to replace it
HEADROOM = 0.80  # a batch "fits" when its peak device memory stays under 80% of the device's memory

# What docs/knowledge/mps.md documents for the MPS allocator: the defaults, and 0.0 (no cap) which
# "may cause system failure". No other value has a source, so the tuner proposes none.
MPS_WATERMARK_DEFAULTS = {"PYTORCH_MPS_HIGH_WATERMARK_RATIO": 1.7, "PYTORCH_MPS_LOW_WATERMARK_RATIO": 1.4}

# the profile sections a decision goes into (writer.py)
TunedSection = Literal["env", "train", "dataloader"]


@dataclass
class Measurement:
    value: object  # the candidate value of the setting under test
    status: RanStatus
    per_second: float | None = None
    unit: RateUnit = "samples"
    peak_memory_mb: float | None = None
    loss: float | None = None
    oom: bool = False
    batch_size: int | None = None
    reason: str = ""
    asked: str | None = None  # what an out-of-memory error said it tried to allocate

    @property
    def usable(self) -> bool:
        return self.status == "ok" and not self.oom and self.per_second is not None and self.per_second > 0

    @property
    def speed(self) -> float:
        """per_second, for comparing: only usable measurements are compared (0.0 for one that did not run)."""
        return self.per_second or 0.0


def as_count(m: Measurement) -> int:
    """The value of a batch size's or a cadence's measurement: a count (value is `object` for the other settings)."""
    return cast(int, m.value)


@dataclass
class Decision:
    section: TunedSection
    key: str
    value: object
    reason: str  # "measured: 1,840 samples/s vs 1,310 at batch 32"
    changed: bool  # differs from the shipped value
    measurements: list[Measurement] = field(default_factory=list)


def rate(m: Measurement) -> str:
    return f"{m.per_second:,.0f} {m.unit}/s"


def show(v) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    return str(v)


def pick(incumbent: Measurement, candidates: list[Measurement], *, compare_loss: bool = True,
         margin: float = MARGIN, fmt=show) -> tuple[Measurement, str]:
    """The winner among the incumbent and the candidates, and why, in words with the figures."""
    if not incumbent.usable:
        raise ValueError("the incumbent was not measured")
    best, why_not = incumbent, []
    for c in candidates:
        if not c.usable:
            why_not.append(f"{fmt(c.value)} {'ran out of memory' if c.oom else 'failed'}")
            continue
        if compare_loss and not _same_loss(c, incumbent):
            why_not.append(f"{fmt(c.value)} changed the loss ({c.loss:.4f} vs {incumbent.loss:.4f})")
            continue
        if c.speed > best.speed * (1 + margin):
            best = c
    others = [c for c in candidates + [incumbent] if c is not best and c.usable]
    vs = ", ".join(f"{rate(c)} with {fmt(c.value)}" for c in others)
    reason = f"measured: {rate(best)} with {fmt(best.value)}" + (f" vs {vs}" if vs else "")
    if why_not:
        reason += "; " + "; ".join(why_not)
    return best, reason


def _same_loss(a: Measurement, b: Measurement) -> bool:
    if a.loss is None or b.loss is None:
        return True
    if not math.isfinite(a.loss):
        return False
    return abs(a.loss - b.loss) / max(abs(b.loss), 1e-8) <= LOSS_TOLERANCE


def fits(m: Measurement, device_memory_mb: float | None, headroom: float = HEADROOM) -> bool:
    """Ran, did not run out of memory, and (where the device's memory is known) left headroom."""
    if not m.usable:
        return False
    if device_memory_mb and m.peak_memory_mb is not None:
        return m.peak_memory_mb <= headroom * device_memory_mb
    return True


def choose_batch(measured: list[Measurement], shipped_batch: int, shipped_accum: int, device_memory_mb: float | None,
                 margin: float = MARGIN) -> tuple[int, int, str]:
    """(batch, grad_accum, reason): the fastest per sample among the batches that fit with headroom
    (the shipped batch wins ties within `margin`); grad_accum keeps the shipped effective batch
    where the chosen batch is smaller. Rates compare per sample (or token) across batch sizes."""
    fitting = [m for m in measured if fits(m, device_memory_mb)]
    if not fitting:
        raise ValueError("no batch size fits")
    incumbent = next((m for m in fitting if m.value == shipped_batch), None)
    best = incumbent or max(fitting, key=lambda m: m.speed)
    for m in fitting:
        if m.speed > best.speed * (1 + margin):
            best = m
    largest = max(fitting, key=as_count)
    effective = shipped_batch * shipped_accum
    accum = max(1, math.ceil(effective / as_count(best))) if as_count(best) < effective else 1
    others = ", ".join(f"{rate(m)} at {m.value}" for m in sorted(fitting, key=as_count) if m is not best)
    reason = f"measured: {rate(best)} at batch {best.value}" + (f" vs {others}" if others else "")
    reason += f"; largest that fits: {largest.value}"
    if device_memory_mb and largest.peak_memory_mb is not None:
        reason += f" ({largest.peak_memory_mb:,.0f} of {device_memory_mb:,.0f} MB)"
    failed = [m for m in measured if not fits(m, device_memory_mb)]
    if failed:
        reason += "; too big: " + ", ".join(f"{m.value} ({_why_not(m)})" for m in sorted(failed, key=as_count))
    if accum > 1:
        reason += f"; grad_accum {accum} keeps the effective batch of {effective}"
    return int(as_count(best)), accum, reason


def _why_not(m: Measurement) -> str:
    if m.oom:
        return f"does not fit: asked for {m.asked}" if m.asked else "out of memory"
    return "over the headroom" if m.usable else "failed"


def next_batch(fits: list[int], too_big: list[int], start: int, largest: int = 1024, growth: int = 4) -> int | None:
    """The next micro-batch to measure in the search for the largest that fits, or None when done.
    From what fits: double while nothing measured is too big (up to `growth` x the start, within
    `largest`); then bisect between the largest fit and the smallest that did not fit, until
    they are within a quarter of the fit apart. Below the smallest fit is not searched (an out of
    memory there was split by the trainer, and halving is what it did)."""
    if not fits:
        return None
    lo = max(fits)
    over = [b for b in too_big if b > lo]
    if not over:
        nxt = lo * 2
        return nxt if nxt <= min(largest, start * growth) else None
    hi = min(over)
    if hi - lo <= max(1, lo // 4):
        return None
    return (lo + hi) // 2


def thread_candidates(shipped: int | None, cores: int | None, logical: int | None) -> list[int]:
    """Thread counts worth measuring: the physical cores, all logical cores, half the cores."""
    options = {n for n in (cores, logical, (cores or 0) // 2) if n and n >= 1}
    return sorted(options - {shipped})


def worker_candidates(shipped: int, cores: int | None, device: TrainDevice) -> list[int]:
    """DataLoader workers: 0 (the main process; docs/knowledge/mps.md: fastest on many Macs) and 2, 4
    where the machine has the cores; macOS spawns workers, so each is measured, never assumed."""
    limit = max(0, (cores or 2) - 1)
    return sorted({w for w in (0, 2, 4) if w <= limit} - {shipped})


def choose_empty_cache(measured: list[Measurement], shipped: int, device_memory_mb: float | None,
                       margin: float = MARGIN) -> tuple[int, str]:
    """MPS: the empty_cache cadence (steps; 0 = never). Flushing the cache costs re-allocation, so
    never (0) wins unless it fails to fit: then the fastest cadence that fits (docs/knowledge/mps.md
    problem 1 lists empty_cache among the out-of-memory fixes)."""
    fitting = [m for m in measured if fits(m, device_memory_mb)]
    if not fitting:
        raise ValueError("no cadence fits")
    incumbent = next((m for m in fitting if m.value == shipped), None)
    never = next((m for m in fitting if m.value == 0), None)
    best = never or incumbent or max(fitting, key=lambda m: m.speed)
    for m in fitting:
        if m.speed > best.speed * (1 + margin):
            best = m
    others = ", ".join(f"{rate(m)} every {m.value}" if m.value else f"{rate(m)} never" for m in fitting if m is not best)
    what = f"every {best.value} steps" if best.value else "never"
    reason = f"measured: {rate(best)} emptying the cache {what}" + (f" vs {others}" if others else "")
    out = [m for m in measured if m not in fitting]
    if out:
        reason += "; " + ", ".join(f"every {m.value}: {'out of memory' if m.oom else 'no headroom'}" for m in out)
    return int(as_count(best)), reason


def watermark_settings(proposed: dict[str, float] | None = None) -> tuple[dict[str, str], str]:
    """MPS watermark ratios the tuner may write: none. The documented defaults are what PyTorch
    already uses (writing them changes nothing); 0.0 removes the cap and "may cause system
    failure"; any other value has no public source (docs/knowledge/mps.md). Returns ({}, why)."""
    refused = sorted(k for k, v in (proposed or {}).items() if v is not None and MPS_WATERMARK_DEFAULTS.get(k) != v)
    why = ("PyTorch's defaults kept (high 1.7, low 1.4): docs/knowledge/mps.md documents no other safe value, "
           "and 0.0 removes the cap, which may cause system failure")
    return {}, why + (f"; not written: {', '.join(refused)}" if refused else "")


def precision_candidates(device: TrainDevice, low: TrainPrecision | None, shipped: TrainPrecision) -> list[TrainPrecision]:
    """fp32 and the device's low precision (bf16, or fp16 where bf16 is not native), minus the shipped one."""
    if device == "cpu":
        return []
    return [p for p in ("fp32", low) if p and p != shipped]


# torch.compile modes the tuner measures on CUDA: max-autotune (CUDA graphs plus minutes of kernel
# tuning) is left out: its graphs are reduce-overhead's, and its tuning time would take the budget.
COMPILE_MODES: tuple[CompileMode, ...] = ("default", "reduce-overhead", "max-autotune-no-cudagraphs")


def compile_mode_candidates(device: TrainDevice, compile_on: bool, shipped: CompileMode) -> tuple[list[CompileMode], str]:
    """(modes to measure besides the shipped one, why none are, in one line). Only on CUDA with
    compile on: reduce-overhead captures CUDA graphs, max-autotune-no-cudagraphs tunes Triton GPU
    kernels; a mode is an option of torch.compile, so without compile there is nothing to choose."""
    if device != "cuda":
        return [], (f"compile_mode not searched on {device}: its modes are CUDA's (reduce-overhead captures CUDA graphs, "
                    "max-autotune-no-cudagraphs tunes GPU kernels); the default mode is kept")
    if not compile_on:
        return [], "compile_mode not searched: compile is off, and a mode is a torch.compile option"
    return [m for m in COMPILE_MODES if m != shipped], ""


def choose_compile_mode(incumbent: Measurement, candidates: list[Measurement], device_memory_mb: float | None,
                        margin: float = MARGIN) -> tuple[Measurement, str]:
    """The fastest mode by more than `margin` whose loss agrees and whose peak memory leaves the
    batch its headroom (CUDA graphs hold a memory pool of their own: a mode that is faster but
    leaves the batch no room is not chosen). Reason in words with the figures."""
    roomy = [c for c in candidates if not c.usable or fits(c, device_memory_mb)]
    tight = [c for c in candidates if c not in roomy]
    best, why = pick(incumbent, roomy, margin=margin, fmt=lambda v: f"mode {v}")
    if tight:
        why += "; " + "; ".join(f"mode {c.value} over the headroom ({c.peak_memory_mb:,.0f} of {device_memory_mb:,.0f} MB, "
                                f"{rate(c)})" for c in tight)
    return best, why
