"""`envkit sweep --pack auto`: how many runs to train at once on one device, decided by measurement.

The first combination still to run is trained alone for a few timed steps, then 2, 4, ... copies of
it at once, each through the trainer's own step in a child process (envkit/bench/child.py, the
same measurement `envkit bench` makes), their timed windows started together. Packing stops where
the summed throughput no longer rises by GAIN, where the next count would not fit in memory (the
alone run's memory x N within MEMORY_FRACTION of what the device has free; on the CPU of the RAM
available), or at the number of runs there are to run. Probes train in temporary folders and are
thrown away: no run folder is created or touched, so packing changes no run's results.
"""

from __future__ import annotations

import tempfile
import threading
from dataclasses import dataclass

from envkit.errors import EnvkitError

GAIN = 0.10  # the next count must give 10% more in all: less is noise, or the device already full
MEMORY_FRACTION = 0.80  # of the free device memory (CPU: available RAM) that N runs may take together
PROBE_SECONDS = 2.0  # timed per probe, after its warm-up, in two windows
PROBE_TIMEOUT_S = 300.0


@dataclass
class Probe:
    n: int  # runs at once
    per_second: float | None  # all of them together (None: a run failed)
    unit: str = "samples"
    reason: str = ""  # why it failed


def parse_pack(text: str | None) -> int | str | None:
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
           where: str = "free") -> tuple[int | None, int, str]:
    """(the next count to probe or None when done, the count chosen so far, why in one line with
    the figures). Pure: tested with made-up measurements."""
    first = probes[0]
    if first.per_second is None:
        return None, 1, f"1 at a time: the probe run failed ({first.reason})"
    said = [f"1 alone {first.per_second:,.0f} {first.unit}/s"]
    chosen = first
    for prev, p in zip(probes, probes[1:]):
        if p.per_second is None:
            return None, chosen.n, _line(chosen.n, said + [f"{p.n} at once failed ({p.reason})"])
        gain = p.per_second / prev.per_second - 1
        said.append(f"{p.n} at once {p.per_second:,.0f} ({gain:+.0%})")
        if gain < GAIN:
            return None, chosen.n, _line(chosen.n, said + [f"under +{GAIN:.0%}: not worth it"])
        chosen = p
    nxt = min(chosen.n * 2, limit)
    if nxt <= chosen.n:
        return None, chosen.n, _line(chosen.n, said + [f"{limit} run{'s' if limit != 1 else ''} to run"])
    if per_run_mb and free_mb and nxt * per_run_mb > MEMORY_FRACTION * free_mb:
        return None, chosen.n, _line(chosen.n, said + [f"{nxt} would take {nxt} x {per_run_mb:,.0f} MB, over "
                                                       f"{MEMORY_FRACTION:.0%} of the {free_mb:,.0f} MB {where}"])
    return nxt, chosen.n, ""


def _line(n: int, parts: list[str]) -> str:
    return f"pack: {n} at a time ({'; '.join(parts)})"


def probe_spec(run, seconds: float = PROBE_SECONDS):
    """A sweep run's own config (batch, precision, compile, loader, seed) as a bench RunSpec."""
    from envkit.bench.spec import RunSpec
    from envkit.checks import trainer_device

    cfg = run.plan.cfg
    v = cfg.values
    T, DL = v["training"], v["dataloader"]
    if T["batch_size"] == "auto":
        raise EnvkitError("--pack auto: training.batch_size auto sizes each run to the device's free memory, so runs "
                          "packed together would each count on all of it", where="--pack",
                          fix="set training.batch_size, or use --pack N / --parallel N")
    device = v["device"]["type"]
    if device == "auto":
        device = trainer_device(run.plan.facts)
    workers = int(DL.get("num_workers") or 0)
    return RunSpec(f"pack {run.combo.run_id}", device, cfg.resolved(), precision=T["precision"], compile=T["compile"],
                   channels_last=bool(v["model"].get("channels_last")), batch_size=int(T["batch_size"]),
                   grad_accum=int(T.get("grad_accum") or 1), num_workers=workers, pin_memory=bool(DL.get("pin_memory")),
                   persistent_workers=bool(DL.get("persistent_workers")), prefetch_factor=DL.get("prefetch_factor"),
                   empty_cache_every=int(T.get("empty_cache_every") or 0),
                   torch_settings=dict(getattr(run.plan.profile, "torch", None) or {}) or None,
                   warmup_steps=3 if T["compile"] else 2, seconds=seconds, windows=2,
                   seed=int(v["experiment"]["seed"]))


def measure_together(spec, n: int, python: str, env: dict) -> tuple[Probe, list]:
    """n copies of `spec` at once, each in its own child (and its own temporary run folder)."""
    from dataclasses import replace

    from envkit.bench.runner import run_spec

    results: list = [None] * n
    with tempfile.TemporaryDirectory(prefix="envkit-pack-") as barrier:
        one = replace(spec, barrier=barrier if n > 1 else None, barrier_n=n)

        def go(i: int) -> None:
            results[i] = run_spec(one, python, env, PROBE_TIMEOUT_S)

        threads = [threading.Thread(target=go, args=(i,), daemon=True) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    bad = next((r for r in results if r is None or r.status != "ok"), None)
    if bad is not None:
        return Probe(n, None, reason=(bad.reason if bad is not None else "no result")[:200]), results
    return Probe(n, sum(r.per_second for r in results), results[0].unit), results


def memory_of(result, device: str) -> tuple[float | None, float | None, str]:
    """(one run's memory in MB, what is free in MB, where) from the alone probe."""
    if device == "cuda":
        used = max(x for x in (result.device_used_mb, result.peak_memory_mb, 0.0) if x is not None)
        return used or None, result.device_free_mb, "free on the GPU"
    if device == "cpu":
        return result.rss_peak_mb, result.device_free_mb, "of RAM available"
    return None, None, ""  # MPS: no per-process figure to multiply; the gain alone decides


def choose(todo: list, python: str, env: dict, say) -> int:
    """Probe 1, 2, 4, ... at once with the first run still to do, and return how many to run at a time."""
    if len(todo) <= 1:
        say(f"pack: 1 at a time ({len(todo)} run to run: nothing to pack)")
        return 1
    spec = probe_spec(todo[0])
    say(f"pack: probing {todo[0].combo.run_id} alone, then 2, 4, ... at once ({spec.seconds:g} s each, "
        "in temporary folders)")
    probe, results = measure_together(spec, 1, python, env)
    per_run, free, where = memory_of(results[0], spec.device) if probe.per_second else (None, None, "")
    probes = [probe]
    while True:
        nxt, chosen, why = decide(probes, len(todo), per_run, free, where)
        if nxt is None:
            say(why)
            return chosen
        probes.append(measure_together(spec, nxt, python, env)[0])
