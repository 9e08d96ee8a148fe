"""`training.batch_size: auto`, decided in envkit's process before the run starts (no torch here;
whether a config asks for it, and a resumed run's number, are config/batch_auto.py's): probe one
training step at two small batches, each in its own trainer process (train/run/batch_probe.py), read the
peak memory of each, and take the largest power of two whose extrapolated memory fits in
`training.memory_fraction` of the device (and in what is free now), at most
`training.batch_size_max` and at most the training set.

Two probes, not one: the difference between them is the memory per sample (activations, their
gradients, the batch itself); what is left is the fixed part (weights, gradients, optimizer state,
the CUDA context), which does not grow with the batch. The extrapolated batch is then probed
itself (and the line refitted from the two largest probes) until a probe at the chosen batch fits:
at tiny batches the peak can be the optimizer's step rather than the activations (ResNet-18 on an
H100: 0.23 GB at batch 2 and at 8), so extrapolating from 2 and 8 alone can be far off. A probe
that runs out of memory is an answer too: the batch is below it.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from envkit.config.config import Config
from envkit.config.origin import Origin
from envkit.errors import EnvkitError
from envkit.config.batch_auto import KEY
from envkit.runfolder.folder import RunFolder

if TYPE_CHECKING:
    from envkit.config.schema import DeviceType

PROBES = (2, 8)  # then 1 when 2 does not fit, 4 when 8 does not
MAX_CHECKS = 3  # probes of the extrapolated choice: it is taken once a probe at it fits


@dataclass
class Choice:
    batch: int
    note: str  # one line: what was measured and why this batch
    probes: list[dict]


def _gb(mb: float) -> str:
    return f"{mb / 1024:.2f} GB"


def choose(probes: list[dict], *, fraction: float, cap: int, world: int = 1, measured_only: bool = False) -> Choice:
    """The batch from the probes' measurements (pure: unit-tested with recorded figures). The slope
    comes from the two largest probes that ran: at tiny batches the peak may be the optimizer's
    step (batch-independent), not the activations, so the largest probes are the most linear.
    measured_only: only a batch that was itself probed and fitted (the end of the search)."""
    ok = sorted((p for p in probes if p.get("status") == "ok"), key=lambda p: p["batch"])
    too_big = min((p["batch"] for p in probes if p.get("status") == "oom"), default=None)
    if not ok:
        asked = next((p.get("asked") for p in probes if p.get("asked")), None)
        raise EnvkitError(f"one training step at batch 1 runs out of {probes[0].get('device', 'device')} memory"
                          + (f" (asked for {asked})" if asked else ""), where=KEY,
                          fix="a smaller model (or model.block_size), training.precision bf16, or a device with more memory")
    last = ok[-1]
    total, free = last.get("total_mb"), last.get("free_mb")
    budget = fraction * total if total else None
    if budget is not None and free is not None:
        budget = min(budget, free)
    examples = min((p["train_examples"] for p in probes if p.get("train_examples")), default=None)
    per_sample: float | None = None
    fixed = 0.0  # MB, beside per_sample: read only where per_sample is set
    if len(ok) >= 2 and not measured_only:
        lo, hi = ok[-2], ok[-1]
        per_sample = max((hi["peak_mb"] - lo["peak_mb"]) / (hi["batch"] - lo["batch"]), 0.0)
        fixed = hi["peak_mb"] - hi["batch"] * per_sample

    def predicted(b: int) -> float | None:
        seen = next((p["peak_mb"] for p in ok if p["batch"] == b), None)
        if seen is not None or per_sample is None:
            return seen
        return fixed + b * per_sample

    limits = []
    batch, b = None, 1
    while b <= cap:
        need = predicted(b)
        if too_big is not None and b >= too_big:
            limits.append(f"{b} ran out of memory")
            break
        if examples is not None and b * world > examples:
            limits.append(f"{b}{f' x {world} processes' if world > 1 else ''} is more than the {examples:,} training examples")
            break
        if need is None:  # not probed and nothing to extrapolate from: below a probe that fitted, it fits
            if not any(p["batch"] > b and (budget is None or p["peak_mb"] <= budget) for p in ok):
                break
        elif budget is not None and need > budget:
            limits.append(f"{b} {'needed' if b in {p['batch'] for p in ok} else 'would need'} {_gb(need)}")
            break
        batch = b
        b *= 2
    if batch is None:  # even the smallest probe is over the budget: it ran, so it is the answer
        batch = ok[0]["batch"]
        limits.append(f"over {fraction:.0%} of the memory already at batch {batch}")
    if b > cap and batch == cap:
        limits.append(f"training.batch_size_max is {cap}")
    measured = ", ".join(f"{_gb(p['peak_mb'])} at batch {p['batch']}" for p in ok)
    note = f"training.batch_size auto -> {batch}: one eager step on {last.get('device')} took {measured}"
    if per_sample is not None:
        note += f" ({per_sample:,.1f} MB per sample + {_gb(fixed)})"
    if budget is not None and total:  # (a budget is set only where the total is)
        within = ", within what is free" if free is not None and free < fraction * total else ""
        note += f"; budget {_gb(budget)} ({fraction:.0%} of {_gb(total)}{within})"
    if limits:
        note += "; " + "; ".join(limits)
    return Choice(batch, note, probes)


def probe_batches(run_probe) -> list[dict]:
    """Run the probes: 2 and 8; 1 when 2 does not fit; 4 when 8 does not."""
    lo = run_probe(PROBES[0])
    if lo["status"] != "ok":
        return [lo, run_probe(1)]
    hi = run_probe(PROBES[1])
    if hi["status"] != "ok":  # out of memory, or fewer training examples than 8
        return [lo, run_probe(4), hi]
    return [lo, hi]


def search(run_probe, **rule) -> Choice:
    """Probe 2 and 8, extrapolate, then probe the extrapolated batch itself until a probe at the
    chosen batch has fitted (at most MAX_CHECKS more; then the largest probe that fitted)."""
    probes = probe_batches(run_probe)
    for _ in range(MAX_CHECKS):
        choice = choose(probes, **rule)
        if any(p["batch"] == choice.batch and p["status"] == "ok" for p in probes):
            return choice
        probes.append(run_probe(choice.batch))
    return choose(probes, **rule, measured_only=True)


def resolve(cfg: Config, *, python: str, env: dict, child_entry: Path, torch_settings: dict | None, world: int = 1,
            device: DeviceType | None = None, echo=print) -> tuple[Config, Choice]:
    """Probe (on `device`, else the config's device) and choose: (cfg with the batch derived, the choice).
    The declared batch stays auto, and so does the config hash."""
    T = cfg.training

    def run_probe(batch: int) -> dict:
        echo(f"training.batch_size auto: probing one step at batch {batch} ...")
        with tempfile.TemporaryDirectory(prefix="envkit-batch-probe-") as tmp:
            stage = Path(tmp)
            staged = cfg.derive(KEY, batch)
            resolved = (staged.derive("device.type", device) if device else staged).resolved()
            resolved["torch_settings"] = torch_settings
            RunFolder(stage).write_config(resolved, redacted=False)
            out = stage / "probe.json"
            res = subprocess.run([python, "-u", str(child_entry), str(stage), "--probe", str(out)], env=env,
                                 capture_output=True, text=True)
            if res.returncode != 0 or not out.is_file():
                tail = [ln for ln in (res.stderr or res.stdout).strip().splitlines() if ln.strip()][-1:] or ["no output"]
                raise EnvkitError(f"the probing step at batch {batch} failed (exit code {res.returncode}): {tail[0][:300]}",
                                  where=KEY, fix="set training.batch_size to a number, or run `envkit run` with --debug")
            return json.loads(out.read_text())

    choice = search(run_probe, fraction=float(T.memory_fraction), cap=int(T.batch_size_max), world=world)
    return cfg.derive(KEY, choice.batch, origin=Origin.derived("auto: " + choice.note.split(": ", 1)[1])), choice
