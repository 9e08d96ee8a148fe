"""`envkit tune`: measure candidate settings within a time budget, one dimension at a time, each
candidate in its own child process (envkit/bench/runner.py), and decide with envkit/tune/decide.py.

Only measured values are kept: the shipped profile's own values are measured first (the
incumbent), a candidate replaces one only when decide.py says so, and a dimension whose
candidates were not all measured in time is left out. Ctrl-C or the end of the budget stops the
search; what was decided so far is returned (the caller writes it, or nothing).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from envkit.bench.context import BenchContext
from envkit.bench.ladder import low_precision
from envkit.bench.runner import Interrupted, run_spec
from envkit.bench.spec import RunSpec
from envkit.config.schema import CompileMode, TrainPrecision
from envkit.tune import decide
from envkit.tune.decide import Decision, Measurement

Stopped = Literal["done", "budget", "interrupted", "baseline failed"]  # why the search ended

if TYPE_CHECKING:
    from envkit.profiles.resolve import Profile
    from envkit.facts.model import TrainDevice

# The order dimensions are searched in, per device: the likeliest wins first, compile (slow to
# measure) last where it is costly. On CUDA the batch comes first: it is what depends on the model
# (GPT-2 small's logits alone are 26 GB at batch 128), and a short budget should spend itself there.
ORDER = {"cpu": ("threads", "workers", "batch", "compile"),
         "cuda": ("batch", "precision", "compile", "compile_mode", "workers"),
         "mps": ("precision", "batch", "workers", "empty_cache", "compile")}


@dataclass
class Settings:
    """The values a measured run uses; starts as the shipped profile's, resolved for this device."""

    precision: TrainPrecision
    compile: bool
    batch_size: int
    grad_accum: int
    num_workers: int
    persistent_workers: bool
    prefetch_factor: int | None
    pin_memory: bool
    threads: int | None
    empty_cache_every: int
    compile_mode: CompileMode = "default"


@dataclass
class TuneResult:
    base: str  # the profile the tuned one extends
    device: TrainDevice
    model: str
    decisions: list[Decision] = field(default_factory=list)
    runs: list[dict] = field(default_factory=list)  # every measurement, for --json and the report
    stopped: Stopped = "done"
    budget_s: float = 0.0
    elapsed_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    oom_batches: dict[int, str | None] = field(default_factory=dict)  # micro-batch -> what it asked for: does not fit


def _profile(ctx: BenchContext) -> Profile:
    """The profile tune starts from (bench.context.make_context always loads one; a bench may run without)."""
    if ctx.profile is None:
        raise ValueError("tune needs the profile it starts from")
    return ctx.profile


def shipped_settings(ctx: BenchContext) -> Settings:
    p = _profile(ctx)
    train, dl, env = p.train, p.dataloader, p.env
    precision = train["precision"]
    if precision == "auto":  # as the trainer decides it
        bf16 = ctx.checks.get("bf16")
        precision = "bf16" if ctx.target == "cuda" and (bf16 is None or bf16.status == "pass") else "fp32"
    comp = train["compile"]
    threads = env.get("OMP_NUM_THREADS")
    batch = train["batch_size"]
    if batch == "auto":  # the profile leaves it to the probe: the batch load_context decided (bench/context.py)
        batch = ctx.config.training.batch_size
    # precision and compile_mode: one of the schema's values each (profiles/schema.py checks them as the profile loads)
    return Settings(precision, (ctx.target == "cuda") if comp == "auto" else bool(comp), int(batch),
                    int(train["grad_accum"]), int(dl["num_workers"]), bool(dl["persistent_workers"]), dl["prefetch_factor"],
                    bool(dl["pin_memory"]), int(threads) if threads and str(threads).isdigit() else None,
                    int(train["empty_cache_every"]), train.get("compile_mode") or "default")


def spec_of(ctx: BenchContext, s: Settings, name: str, seconds: float | None, split_oom: bool = True) -> RunSpec:
    """A candidate as a RunSpec: the trainer's own step (envkit/bench/child.py) with these settings,
    timed for `seconds` after its warm-up. split_oom=False: an out of memory is the answer."""
    env = ctx.profile_env()
    if s.threads:
        env["OMP_NUM_THREADS"] = str(s.threads)
    on_cpu = ctx.target == "cpu"
    return RunSpec(name, ctx.target, ctx.config.resolved(), precision=s.precision, compile=s.compile, compile_mode=s.compile_mode,
                   channels_last=ctx.model == "cnn" and ctx.target in ("cuda", "mps"),
                   batch_size=s.batch_size, grad_accum=s.grad_accum, num_workers=s.num_workers, pin_memory=s.pin_memory,
                   persistent_workers=s.persistent_workers and s.num_workers > 0,
                   prefetch_factor=s.prefetch_factor if s.num_workers > 0 else None,
                   empty_cache_every=s.empty_cache_every, threads=s.threads, torch_settings=dict(_profile(ctx).torch),
                   env=env, warmup_steps=(2 if s.compile else 1) if on_cpu else 3,
                   seconds=seconds or (3.0 if on_cpu else 5.0), windows=3, split_oom=split_oom,
                   seed=int(ctx.config.experiment.seed))


def device_memory_mb(ctx: BenchContext) -> float | None:
    f = ctx.facts
    if ctx.target == "cuda" and f.gpus and f.gpus[0].memory_bytes:
        return f.gpus[0].memory_bytes / 2**20
    if ctx.target == "mps" and f.memory_bytes:
        return f.memory_bytes / 2**20  # unified memory; the allocator's own cap is the watermark
    return None


class _Budget(Exception):
    pass


def tune(ctx: BenchContext, budget_s: float, *, seconds: float | None = None, on_start=None, on_progress=None, on_run=None,
         no_compile: bool = False, debug: bool = False) -> TuneResult:
    t0 = time.monotonic()
    result = TuneResult(_profile(ctx).name, ctx.target, ctx.model, budget_s=budget_s)
    shipped = shipped_settings(ctx)
    base_env = ctx.plain_env()
    costs: list[float] = []

    def measure(label: str, s: Settings, value, *, expensive: bool = False, split_oom: bool = False) -> Measurement:
        left = budget_s - (time.monotonic() - t0)
        est = (max(costs) if costs else 0.0) * (3.0 if expensive else 1.2)
        if left <= 0 or (costs and est > left):
            raise _Budget(label)
        if on_start:
            on_start(label)
        r = run_spec(spec_of(ctx, s, label, seconds, split_oom), ctx.python, base_env, timeout=left, debug=debug,
                     on_progress=on_progress)
        if r.note == "timeout":  # killed when the budget's time was up: the budget's end, not a failed setting
            row = {"run": label, "status": "skip", "per_second": None, "unit": r.unit, "peak_memory_mb": None, "loss": None,
                   "seconds": round(r.seconds, 2), "reason": f"the budget of {budget_s:.0f} s (--budget) ran out during this run",
                   "micro_batch": None, "grad_accum": None, "did_not_fit": []}
            result.runs.append(row)
            if on_run:
                on_run(row)
            raise _Budget(f"{label} finished")
        costs.append(r.seconds)
        oom = r.note == "oom"
        asked = next((d.get("asked") for d in r.did_not_fit if d.get("micro_batch") == s.batch_size), None)
        m = Measurement(value, "ok" if r.status == "ok" else "fail", r.per_second, r.unit, r.peak_memory_mb, r.loss,
                        oom=oom, batch_size=r.micro_batch or s.batch_size, reason=r.reason, asked=asked)
        row = {"run": label, "status": "does not fit" if oom else m.status, "per_second": r.per_second, "unit": r.unit,
               "peak_memory_mb": r.peak_memory_mb, "loss": r.loss, "seconds": round(r.seconds, 2), "reason": r.reason,
               "micro_batch": r.micro_batch, "grad_accum": r.grad_accum, "did_not_fit": r.did_not_fit}
        result.runs.append(row)
        if on_run:
            on_run(row)
        return m

    current = shipped
    if ctx.target != "cuda":  # said first, whatever the budget reaches: this machine has no modes to choose from
        result.notes.append(decide.compile_mode_candidates(ctx.target, current.compile, current.compile_mode)[1])
    skipped = ("compile", "compile_mode") if no_compile else ()
    for dim in (d for d in ORDER.get(ctx.target, ORDER["cpu"]) if d in skipped):
        # said first too: --no-compile holds whether or not the budget reaches these dimensions
        result.notes.append(f"{dim} not measured (--no-compile): the profile's value ({decide.show(getattr(current, dim))}) is kept")
    try:
        # the shipped settings, as `envkit run` would train with them: a batch that does not fit is split
        base, first = _incumbent(ctx, current, measure, result)
        if not base.usable:
            result.stopped = "baseline failed"
            result.notes.append(f"the shipped settings did not run: {base.reason}")
            return _done(result, t0)
        current = first
        for dim in ORDER.get(ctx.target, ORDER["cpu"]):
            if dim in skipped:
                continue
            current, base = _search(dim, ctx, current, base, shipped, measure, result)
    except _Budget as exc:
        result.stopped = "budget"
        if result.runs and not any(r["status"] != "skip" for r in result.runs):
            result.notes.append(f"budget of {budget_s:.0f} s reached before {exc}: nothing was measured (one measurement "
                                f"takes more than {result.runs[0]['seconds']:.0f} s here); give a --budget several times that")
        else:
            result.notes.append(f"budget of {budget_s:.0f} s reached before {exc}: the dimensions measured so far are kept")
    except (Interrupted, KeyboardInterrupt):
        result.stopped = "interrupted"
        result.notes.append("interrupted: the dimensions measured so far are kept")
    return _done(result, t0)


def _incumbent(ctx: BenchContext, current: Settings, measure, result: TuneResult) -> tuple[Measurement, Settings]:
    """Measure the shipped settings. Where its batch does not fit, the trainer halves the micro-batch
    (accumulation keeps the effective batch): that is decided at once, so a profile written when the
    budget ends early never keeps a batch that does not fit."""
    base = measure(f"shipped {ctx.shipped_profile}", current, None, split_oom=True)
    if not base.usable or base.batch_size == current.batch_size:
        return base, current
    row = result.runs[-1]
    accum = int(row["grad_accum"] or 1)
    # worded as the batch search words it (decide.choose_batch), so a budget that ends here reads the same
    too_big = ", ".join(f"{d['micro_batch']} (" + (f"does not fit: asked for {d['asked']}" if d.get("asked") else "out of memory") + ")"
                        for d in row["did_not_fit"])
    why = (f"measured: {decide.rate(base)} at micro-batch {base.batch_size} x {accum} accumulation; too big: {too_big}; "
           f"the effective batch of {current.batch_size * current.grad_accum} is kept")
    _decide(result, Decision("train", "batch_size", base.batch_size, why, True, [base]))
    _decide(result, Decision("train", "grad_accum", accum, f"keeps the effective batch of {current.batch_size * current.grad_accum} "
                                                           f"at micro-batch {base.batch_size}", accum != current.grad_accum))
    result.oom_batches = {int(d["micro_batch"]): d.get("asked") for d in row["did_not_fit"]}
    return base, replace(current, batch_size=base.batch_size, grad_accum=accum)


def _decide(result: TuneResult, d: Decision) -> None:
    """Record a decision; a later one for the same setting replaces the earlier."""
    result.decisions[:] = [x for x in result.decisions if (x.section, x.key) != (d.section, d.key)] + [d]


def _done(result: TuneResult, t0: float) -> TuneResult:
    result.elapsed_s = round(time.monotonic() - t0, 1)
    return result


def _search(dim: str, ctx: BenchContext, current: Settings, base: Measurement, shipped: Settings, measure, result: TuneResult):
    """One dimension: measure its candidates against the incumbent, record the decision; returns
    the new incumbent settings and its measurement."""
    return SEARCHES[dim](ctx, current, replace(base), shipped, measure, result)


def _search_threads(ctx: BenchContext, current: Settings, base: Measurement, shipped: Settings, measure,
                    result: TuneResult) -> tuple[Settings, Measurement]:
    """Threads (CPU): torch's intra-op threads, written as OMP_NUM_THREADS."""
    cores = ctx.facts.chip.perf_cores or ctx.facts.chip.cores
    logical = _logical_cores()
    base.value = current.threads or "torch's default"
    cands, stopped = _measure_each(decide.thread_candidates(current.threads, cores, logical),
                                   lambda n: measure(f"threads {n}", replace(current, threads=n), n))
    if not cands:
        _raise(stopped)
        return current, base
    win, why = decide.pick(base, cands, fmt=lambda v: f"{v} thread{'s' if v != 1 else ''}" if isinstance(v, int) else str(v))
    if win is not base:
        current = replace(current, threads=int(decide.as_count(win)))
    if current.threads:
        result.decisions.append(Decision("env", "OMP_NUM_THREADS", str(current.threads), why,
                                         current.threads != shipped.threads, [base, *cands]))
    _raise(stopped)
    return current, win


def _search_workers(ctx: BenchContext, current: Settings, base: Measurement, shipped: Settings, measure,
                    result: TuneResult) -> tuple[Settings, Measurement]:
    """DataLoader workers, kept between epochs when there are any."""
    base.value = current.num_workers
    cands, stopped = _measure_each(decide.worker_candidates(current.num_workers, ctx.facts.chip.cores, ctx.target),
                                   lambda w: measure(f"workers {w}", replace(current, num_workers=w, persistent_workers=w > 0), w))
    if not cands:
        _raise(stopped)
        return current, base
    win, why = decide.pick(base, cands, compare_loss=False, fmt=lambda v: f"{v} workers")
    current = replace(current, num_workers=int(decide.as_count(win)), persistent_workers=int(decide.as_count(win)) > 0)
    result.decisions.append(Decision("dataloader", "num_workers", current.num_workers, why,
                                     current.num_workers != shipped.num_workers, [base, *cands]))
    if current.num_workers > 0:
        result.decisions.append(Decision("dataloader", "persistent_workers", True,
                                         f"measured with num_workers {current.num_workers}: workers are kept between epochs",
                                         not shipped.persistent_workers))
    _raise(stopped)
    return current, win


def _search_precision(ctx: BenchContext, current: Settings, base: Measurement, shipped: Settings, measure,
                      result: TuneResult) -> tuple[Settings, Measurement]:
    """The precision: fp32 and the device's low precision (bf16, or fp16 where bf16 is not native)."""
    low, _ = low_precision(ctx.target, ctx.facts, ctx.checks)
    base.value = current.precision
    options = decide.precision_candidates(ctx.target, low, current.precision)
    cands, stopped = _measure_each(options, lambda p: measure(f"precision {p}", replace(current, precision=p), p))
    if not cands:
        _raise(stopped)
        return current, base
    win, why = decide.pick(base, cands)
    # the winner's value is one of the precisions measured: taken from them, typed, rather than cast
    current = replace(current, precision=next(p for p in (current.precision, *options) if p == win.value))
    result.decisions.append(Decision("train", "precision", current.precision, why,
                                     current.precision != shipped.precision, [base, *cands]))
    _raise(stopped)
    return current, win


def _search_compile(ctx: BenchContext, current: Settings, base: Measurement, shipped: Settings, measure,
                    result: TuneResult) -> tuple[Settings, Measurement]:
    """torch.compile on or off, where doctor's compile check passes."""
    c = ctx.checks.get("compile")
    if c is not None and c.status != "pass":
        result.notes.append(f"compile not measured: {c.message} (doctor check 'compile')")
        return current, base
    base.value = current.compile
    cand = measure(f"compile {'off' if current.compile else 'on'}", replace(current, compile=not current.compile),
                   not current.compile, expensive=not current.compile)
    win, why = decide.pick(base, [cand], fmt=lambda v: f"compile {decide.show(v)}")
    current = replace(current, compile=bool(win.value))
    result.decisions.append(Decision("train", "compile", current.compile, why, current.compile != shipped.compile, [base, cand]))
    return current, win


def _search_compile_mode(ctx: BenchContext, current: Settings, base: Measurement, shipped: Settings, measure,
                         result: TuneResult) -> tuple[Settings, Measurement]:
    """The compile mode (CUDA): each one compiles afresh."""
    modes, why_not = decide.compile_mode_candidates(ctx.target, current.compile, current.compile_mode)
    if not modes:
        result.notes.append(why_not)  # one line: why this machine has nothing to choose
        return current, base
    base.value = current.compile_mode
    # every mode compiles afresh (max-autotune-no-cudagraphs tunes kernels): each is as costly as compile was
    cands, stopped = _measure_each(modes, lambda m: measure(f"compile_mode {m}", replace(current, compile_mode=m), m,
                                                          expensive=True))
    if not cands:
        _raise(stopped)
        return current, base
    win, why = decide.choose_compile_mode(base, cands, device_memory_mb(ctx))
    # the winner's value is one of the modes measured: taken from them, typed, rather than cast
    current = replace(current, compile_mode=next(m for m in (current.compile_mode, *modes) if m == win.value))
    result.decisions.append(Decision("train", "compile_mode", current.compile_mode, why,
                                     current.compile_mode != shipped.compile_mode, [base, *cands]))
    _raise(stopped)
    return current, win


def _search_empty_cache(ctx: BenchContext, current: Settings, base: Measurement, shipped: Settings, measure,
                        result: TuneResult) -> tuple[Settings, Measurement]:
    """How often the MPS cache is emptied (every 0, 10 or 50 steps), and the watermark ratios."""
    base.value = current.empty_cache_every
    cands = [measure(f"empty_cache every {n}", replace(current, empty_cache_every=n), n)
             for n in (0, 10, 50) if n != current.empty_cache_every]
    every, why = decide.choose_empty_cache([base, *cands], shipped.empty_cache_every, device_memory_mb(ctx))
    win = next(m for m in [base, *cands] if m.value == every)
    current = replace(current, empty_cache_every=every)
    result.decisions.append(Decision("train", "empty_cache_every", every, why, every != shipped.empty_cache_every, [base, *cands]))
    _, wm_why = decide.watermark_settings()
    result.notes.append(f"watermark ratios: {wm_why}")
    return current, win


def _search_batch(ctx: BenchContext, current: Settings, base: Measurement, shipped: Settings, measure, result: TuneResult):
    """The largest micro-batch that fits, found from what fits (decide.next_batch: doubling, then
    bisection towards the smallest that did not fit), each probe timed; then the fastest that fits."""
    base.value = current.batch_size
    effective = shipped.batch_size * shipped.grad_accum
    known_oom = [Measurement(b, "fail", oom=True, batch_size=b, asked=a) for b, a in sorted(result.oom_batches.items())]
    probes, stopped = [], None
    while True:
        fits = [m.value for m in [base, *probes] if decide.fits(m, device_memory_mb(ctx))]
        too_big = [m.value for m in [*known_oom, *probes] if not decide.fits(m, device_memory_mb(ctx))]
        b = decide.next_batch(fits, too_big, current.batch_size)
        if b is None:
            break
        try:
            probes.append(measure(f"batch {b}", replace(current, batch_size=b, grad_accum=max(1, effective // b)), b))
        except _Budget as exc:  # decide among the batches measured so far
            stopped = exc
            break
    measured = [base, *known_oom, *probes]
    batch, accum, why = decide.choose_batch(measured, shipped.batch_size, shipped.grad_accum, device_memory_mb(ctx))
    win = next(m for m in [base, *probes] if m.value == batch)
    current = replace(current, batch_size=batch, grad_accum=accum)
    _decide(result, Decision("train", "batch_size", batch, why, batch != shipped.batch_size, measured))
    if accum != shipped.grad_accum:
        _decide(result, Decision("train", "grad_accum", accum, f"keeps the effective batch of {effective} at batch {batch}", True))
    if stopped:
        result.notes.append("batch: decided among the sizes measured before the budget ran out "
                            f"({', '.join(str(m.value) for m in measured)})")
    _raise(stopped)
    return current, win


# dimension -> its search; ORDER says which run on which device
SEARCHES = {"threads": _search_threads, "workers": _search_workers, "batch": _search_batch, "precision": _search_precision,
            "compile": _search_compile, "compile_mode": _search_compile_mode, "empty_cache": _search_empty_cache}


def _measure_each(values, run_one) -> tuple[list[Measurement], "_Budget | None"]:
    """Measure candidates in order until the budget runs out: the ones measured are still decided
    on (the best found so far is kept), then the budget stop goes on up."""
    out = []
    for v in values:
        try:
            out.append(run_one(v))
        except _Budget as exc:
            return out, exc
    return out, None


def _raise(stopped) -> None:
    if stopped is not None:
        raise stopped


def _logical_cores() -> int | None:
    import os

    return os.cpu_count()
