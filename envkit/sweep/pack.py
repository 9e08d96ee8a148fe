"""`envkit sweep --pack auto`: how many runs to train at once on one device, decided by measurement.

The first combination still to run is trained alone for a few timed steps, then 2, 4, ... copies of
it at once, each through the trainer's own step in a child process (envkit/bench/child.py, the
same measurement `envkit bench` makes). The copies are started once and timed in stages
(envkit/bench/stages.py): starting a run (torch, data, compile) costs ten times its timed windows,
and probing 1, 2, 4 and 8 as fresh processes made the probe the larger part of a short sweep
(benchmarks/RESULTS.md). Probing stops where the summed throughput no longer rises by GAIN (where
the runs are started already: where it falls), where the next count would not fit in memory (the
alone run's memory x N within MEMORY_FRACTION of what the device has free; on the CPU of the RAM
available), or at the number of runs there are to run. The count is then the one that ends the sweep
soonest (by_time): the probe also times how long a run takes to start, alone and many at once, and
the run's length is its epochs or steps, so a sweep of short runs, which spend more time starting than
training, packs more runs than throughput alone would. Probes train in temporary folders and are
thrown away: no run folder is created or touched, so packing changes no run's results.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from envkit.config.batch_auto import is_auto
from envkit.errors import EnvkitError
from envkit.launch.launcher import omp_threads_per_process

if TYPE_CHECKING:
    from envkit.train.run.state import RateUnit
    from envkit.facts.model import TrainDevice

GAIN = 0.10  # the next count must give 10% more in all: less is noise, or the device already full
MEMORY_FRACTION = 0.80  # of the free device memory (CPU: available RAM) that N runs may take together
PROBE_SECONDS = 2.0  # timed per probe, after its warm-up, in two windows
PROBE_TIMEOUT_S = 300.0
HOLD = 0.05  # a larger count whose total is within 5% of the chosen one's trains as fast (fewest_rounds)


@dataclass
class Probe:
    n: int  # runs at once
    per_second: float | None  # all of them together (None: a run failed)
    unit: RateUnit = "samples"
    reason: str = ""  # why it failed
    threads: int | None = None  # CPU threads each run trained with (the CPU: the cores shared out)


def parse_pack(text: str | None) -> int | Literal["auto"] | None:
    """--pack: "auto" or a count (what --parallel N does); anything else is one line, exit 2."""
    if text is None:
        return None
    t = str(text).strip().lower()
    if t == "auto":
        return "auto"
    if t.isdigit() and int(t) >= 1:
        return int(t)
    raise EnvkitError(f"--pack {text!r}: expected auto or a number of runs at once (1 or more)", where="--pack",
                      fix="--pack auto measures how many fit; --pack 3 runs three at a time")


def decide(probes: list[Probe], limit: int, per_run_mb: float | None, free_mb: float | None,
           where: str = "free", keep_going: bool = False) -> tuple[int | None, int, str]:
    """(the next count to probe or None when done, the count chosen so far by throughput, why in one
    line with the figures). keep_going (the runs are started already, so timing another count costs
    seconds): counts past the last +GAIN are timed too while the total holds (within HOLD of the best),
    for the start-aware choice (by_time). Pure: tested with made-up measurements."""
    first = probes[0]
    if first.per_second is None:
        return None, 1, _line(1, [f"the probe run failed: {first.reason}"])
    said = [f"1 alone {first.per_second:,.0f} {first.unit}/s{_on(first)}"]
    chosen, rising, best, prev_rate = first, True, first.per_second, first.per_second
    for p in probes[1:]:
        if p.per_second is None:
            return None, chosen.n, _line(chosen.n, said + [f"{p.n} at once failed ({p.reason})"])
        gain = p.per_second / prev_rate - 1
        prev_rate = p.per_second
        said.append(f"{p.n} at once {p.per_second:,.0f} ({gain:+.0%}){_on(p)}")
        rising = rising and gain >= GAIN
        if rising:
            chosen = p
        elif not keep_going:
            return None, chosen.n, _line(chosen.n, said + [f"under +{GAIN:.0%}: not worth it"])
        elif p.per_second < best * (1 - HOLD):
            return None, chosen.n, _line(chosen.n, said + [f"{p.n} at once lost throughput"])
        best = max(best, p.per_second)
    last = probes[-1]
    nxt = min(last.n * 2, limit)
    if nxt <= last.n:
        return None, chosen.n, _line(chosen.n, said + [f"{limit} run{'s' if limit != 1 else ''} to run"])
    if per_run_mb and free_mb and nxt * per_run_mb > MEMORY_FRACTION * free_mb:
        return None, chosen.n, _line(chosen.n, said + [f"{nxt} would take {nxt} x {per_run_mb:,.0f} MB, over "
                                                       f"{MEMORY_FRACTION:.0%} of the {free_mb:,.0f} MB {where}"])
    return nxt, chosen.n, ""


def fewest_rounds(probes: list[Probe], chosen: int, runs: int, why: str) -> tuple[int, str]:
    """(how many at a time, why): the chosen count, or more where that ends the sweep in fewer
    rounds without losing throughput. Runs of one sweep take about as long each, so N at a time
    trains them in ceil(runs / N) rounds, and each round pays one start (torch, data, compile: the
    larger part of a short run). Where a larger count was timed and held the chosen count's total
    (it was only not worth its own +GAIN), any count up to it trains as fast, and the smallest
    one with the fewest rounds is taken: 9 runs at 4 a time are 3 rounds, at 5 they are 2."""
    best = next((p for p in probes if p.n == chosen), None)
    held = [p.n for p in probes if p.n > chosen and p.per_second is not None and best is not None
            and best.per_second is not None and p.per_second >= best.per_second * (1 - HOLD)]
    if not held:
        return chosen, why
    top = min(max(held), runs)
    rounds = -(-runs // chosen)
    fewest = min(range(chosen, top + 1), key=lambda n: (-(-runs // n), n))
    if -(-runs // fewest) >= rounds:
        return chosen, why
    inner = why[why.index("(") + 1:-1]
    n_rounds = -(-runs // fewest)
    return fewest, _line(fewest, [inner, f"{fewest} rather than {chosen}: {runs} runs in {n_rounds} round{'s' if n_rounds != 1 else ''} instead of "
                                         f"{rounds}, as fast ({max(held)} at once held the total)"])


@dataclass
class Starts:
    """How long a run takes from its launch to its first timed step (the interpreter, torch, data, model,
    compile, warm-up), measured in the probe: alone, and the slowest of `together` runs launched at once."""
    alone_s: float
    together: int = 1
    together_s: float | None = None

    def seconds(self, n: int) -> float:
        """n launched at once: linear between alone and the measured count (starts share the CPU)."""
        if self.together_s is None or self.together <= 1:
            return max(self.alone_s, self.together_s or 0.0) if n > 1 else self.alone_s
        slope = max(0.0, (self.together_s - self.alone_s) / (self.together - 1))
        return self.alone_s + slope * (n - 1)


def sweep_seconds(n: int, runs: int, probes: list[Probe], starts: Starts, run_samples: float) -> float:
    """The sweep's time at n at a time: runs // n rounds of n and one of the rest, each round one start
    of its runs at once and then their samples at the total measured for that count (a count not timed:
    the largest timed below it, never more). probes: timed counts, none failed."""
    def round_s(m: int) -> float:
        total = max((p for p in probes if p.n <= m), key=lambda p: p.n).per_second
        assert total is not None  # timed counts only
        return starts.seconds(m) + m * run_samples / total

    full, rest = divmod(runs, n)
    return full * round_s(n) + (round_s(rest) if rest else 0.0)


def by_time(probes: list[Probe], chosen: int, runs: int, why: str, starts: Starts | None,
            run_samples: float | None) -> tuple[int, str]:
    """(how many at a time, why): the count that ends the sweep soonest, where the probe measured how
    long a run takes to start and the run's length is known; otherwise fewest_rounds. A short run is
    mostly its start (torch, compile: 25 s for ResNet-18 against 2 s of training an epoch on an H100),
    so packing more than throughput alone would pay overlaps starts: that is what this weighs. Among
    counts within HOLD of the soonest the smallest is taken (less memory, the same time)."""
    if not starts or not run_samples or not probes or probes[0].per_second is None:
        return fewest_rounds(probes, chosen, runs, why)
    timed = [p for p in probes if p.per_second is not None]
    if len(timed) < len(probes):  # decide() stops at the first failed count: the counts below it
        timed = [p for p in timed if p.n < min(p.n for p in probes if p.per_second is None)]
    times = {k: sweep_seconds(k, runs, timed, starts, run_samples) for k in range(1, min(max(p.n for p in timed), runs) + 1)}
    soonest = min(times.values())
    n = min(k for k, t in times.items() if t <= soonest * (1 + HOLD))
    inner = why[why.index("(") + 1:-1]
    shown = sorted({n, chosen, 1, max(times)} & times.keys(), reverse=True)  # the pick, throughput's, alone, the most timed
    told = ", ".join(f"{times[k]:,.0f} s " + ("one at a time" if k == 1 else f"{k} at a time") for k in shown)
    start = f"a run starts in {starts.alone_s:.0f} s alone" + (f", {starts.seconds(n):.0f} s {n} at once" if n > 1 else "")
    return n, _line(n, [inner, f"{start}, and trains {run_samples:,.0f} {probes[0].unit}: {runs} runs take about {told}"])


def _line(n: int, parts: list[str]) -> str:
    return f"pack: {n} at a time ({'; '.join(parts)})"


def probe_spec(run, seconds: float = PROBE_SECONDS):
    """A sweep run's own config (batch, precision, compile, loader, seed) as a bench RunSpec."""
    from envkit.bench.spec import RunSpec
    from envkit.checks import trainer_device

    cfg = run.plan.cfg
    T, DL = cfg.training, cfg.dataloader
    if is_auto(cfg):
        raise EnvkitError("--pack auto: training.batch_size auto sizes each run to the device's free memory, so runs "
                          "packed together would each count on all of it", where="--pack",
                          fix="set training.batch_size, or use --pack N / --parallel N")
    device = cfg.device.type
    if device == "auto":
        device = trainer_device(run.plan.facts)
    workers = int(DL.num_workers or 0)
    return RunSpec(f"pack {run.combo.run_id}", device, cfg.resolved(), precision=T.precision, compile=T.compile,
                   channels_last=bool(cfg.model.channels_last), batch_size=int(T.batch_size),
                   grad_accum=int(T.grad_accum or 1), num_workers=workers, pin_memory=bool(DL.pin_memory),
                   persistent_workers=bool(DL.persistent_workers), prefetch_factor=DL.prefetch_factor,
                   empty_cache_every=int(T.empty_cache_every or 0),
                   torch_settings=dict(getattr(run.plan.profile, "torch", None) or {}) or None,
                   warmup_steps=3 if T.compile else 2, seconds=seconds, windows=2,
                   seed=int(cfg.experiment.seed))


def start_run(spec, index: int, folder: str, python: str, env: dict):
    """Run `index` of the probe, in a thread: its bench child (and its own temporary run folder)."""
    from dataclasses import replace

    from envkit.bench.runner import run_spec

    box: dict = {}
    one = replace(spec, stages=folder, stage_index=index)
    # a run lives through the others' start and every stage: each wait below has PROBE_TIMEOUT_S
    thread = threading.Thread(target=lambda: box.update(result=run_spec(one, python, env, 4 * PROBE_TIMEOUT_S)), daemon=True)
    thread.start()
    return thread, box


def most_at_once(limit: int, per_run_mb: float | None, free_mb: float | None) -> int:
    """The largest count decide() could reach by doubling from 1: the runs to start."""
    n = 1
    while True:
        nxt = min(n * 2, limit)
        if nxt <= n or (per_run_mb and free_mb and nxt * per_run_mb > MEMORY_FRACTION * free_mb):
            return n
        n = nxt


def _probe(n: int, got: dict) -> Probe:
    from envkit.bench.spec import rate_unit

    bad = next((why for why in got.values() if isinstance(why, str)), None)
    if bad is not None:
        return Probe(n, None, reason=bad[:200])
    threads = {r.get("threads") for r in got.values()}
    return Probe(n, sum(r["per_second"] for r in got.values()), rate_unit(next(iter(got.values())).get("unit")),
                 threads=threads.pop() if len(threads) == 1 and None not in threads else None)


def _on(p: Probe) -> str:
    return f" on {p.threads} thread{'s' if p.threads != 1 else ''}{' each' if p.n > 1 else ''}" if p.threads else ""


def _why_failed(box: dict, said: str) -> str:
    r = box.get("result")
    return r.reason[:200] if r is not None and r.status != "ok" and r.reason else said


def memory_of(result, device: TrainDevice) -> tuple[float | None, float | None, str]:
    """(one run's memory in MB, what is free in MB, where) from the alone probe."""
    if device == "cuda":
        used = max(x for x in (result.device_used_mb, result.peak_memory_mb, 0.0) if x is not None)
        return used or None, result.device_free_mb, "free on the GPU"
    if device == "cpu":
        return result.rss_peak_mb, result.device_free_mb, "of RAM available"
    return None, None, ""  # MPS: no per-process figure to multiply; the gain alone decides


def cpu_threads(run, env: dict) -> int | None:
    """The CPU threads one run of the sweep has alone (the profile's OMP_NUM_THREADS), which n runs at
    once share (sweep/runner.py gives each its share). None where the user exported the variable:
    each run keeps that count, probes included."""
    if os.environ.get("OMP_NUM_THREADS"):
        return None
    return int(omp_threads_per_process(run.plan.profile.env if run.plan.profile else {}, env, 1))


def choose(todo: list, python: str, env: dict, say) -> int:
    """Probe 1, 2, 4, ... at once with the first run still to do, and return how many to run at a time.
    The runs are started once (bench/stages.py): the first alone, which says what one run holds in
    memory, then as many more as memory allows (where it cannot be measured, as each count needs
    them), and the counts are timed in turn."""
    from types import SimpleNamespace

    from envkit.bench.stages import Stages

    if len(todo) <= 1:
        say(f"pack: 1 at a time ({len(todo)} run to run: nothing to pack)")
        return 1
    spec = probe_spec(todo[0])
    runs: list = []
    with tempfile.TemporaryDirectory(prefix="envkit-pack-") as folder:
        stages = Stages(folder, alive=lambda i: runs[i][0].is_alive())
        try:
            t0 = time.monotonic()
            runs.append(start_run(spec, 0, folder, python, env))
            warm = stages.wait_warm([0], PROBE_TIMEOUT_S)[0]
            starts = Starts(time.monotonic() - t0)
            if isinstance(warm, str):
                say(_line(1, [f"the probe run failed: {_why_failed(runs[0][1], warm)}"]))
                return 1
            per_run, free, where = memory_of(SimpleNamespace(**{k: warm.get(k) for k in (
                "device_used_mb", "peak_memory_mb", "device_free_mb", "rss_peak_mb")}), spec.device)
            n_max = most_at_once(len(todo), per_run, free)
            # memory measured (CUDA, the CPU): start every run that fits at once, one start for all the counts;
            # unmeasured (MPS: no per-process figure): only as many as the next count needs, so a count that
            # gains nothing stops the probe before more copies take unified memory
            at_once = per_run is not None and free is not None
            cores = cpu_threads(todo[0], env) if spec.device == "cpu" else None
            say(f"pack: probing {todo[0].combo.run_id}: 1 alone, then up to {n_max} at once, {spec.seconds:g} s each "
                f"({'started once' if at_once else 'started as each count needs them'}, in temporary folders"
                + (f"; n at once share {cores} CPU thread{'s' if cores != 1 else ''}, as the sweep's runs will" if cores else "") + ")")
            not_warm: dict[int, str] = {}

            def ensure(count: int) -> None:
                new = range(len(runs), count)
                if not new:
                    return
                t = time.monotonic()
                runs.extend(start_run(spec, i, folder, python, env) for i in new)
                waited = stages.wait_warm(new, PROBE_TIMEOUT_S)
                not_warm.update({i: w for i, w in waited.items() if isinstance(w, str)})
                if not any(isinstance(w, str) for w in waited.values()) and len(new) >= starts.together:
                    starts.together, starts.together_s = len(new), time.monotonic() - t

            if at_once:
                ensure(n_max)
            probes: list[Probe] = []
            n = 1
            while True:
                ensure(n)
                if any(i < n for i in not_warm):
                    i = min(not_warm)
                    probes.append(Probe(n, None, reason=_why_failed(runs[i][1], not_warm[i])))
                else:
                    got = stages.time(n, PROBE_TIMEOUT_S, threads=max(1, cores // n) if cores else None)
                    probes.append(_probe(n, {i: (g if not isinstance(g, str) else _why_failed(runs[i][1], g))
                                             for i, g in got.items()}))
                nxt, chosen, why = decide(probes, len(todo), per_run, free, where, keep_going=at_once)
                if nxt is None:
                    chosen, why = by_time(probes, chosen, len(todo), why, starts, warm.get("run_samples"))
                    say(why)
                    return chosen
                n = nxt
        finally:
            stages.stop()
            for thread, _ in runs:
                thread.join(timeout=60)
