"""What "the same" means for a reproduction, and the verdict.

Identical is required, at every step both runs logged, where nothing but the kernels' order could
make them differ and envkit fixes that order: on the CPU (envkit's runs are bit-identical there,
resume included), and on a GPU when the run was deterministic (training.deterministic) and the
reproduction ran on the same kind of device with the same torch build and process count.

Otherwise the two runs are held against this device's run-to-run spread, which is measured, not
assumed: a second reproduction is trained beside the first, and the largest |difference| per
metric between those two is the spread of two runs of this config here. A figure measured on one
model, length and learning rate says little about another (the issue's ResNet-18 drifts to 0.8
apart in a few hundred steps, GPT-2 small stays within 6e-4 over 60), so none is stored per
device; the measured spread is kept in envkit's cache for this run's kind (device, torch build,
config hash, steps) so later reproductions of the same kind pay for it once. The original is
within tolerance when its largest difference from the first reproduction is at most twice the
spread (each is one draw of the same noise; the largest of a few such draws spreads by about that).
`--tolerance X` states an absolute tolerance instead, for every metric.

A run recorded on another kind of machine (elsewhere.py: a Mac's run reproduced on the CPU box, a
CPU run on a CUDA box) is never held to identical: other hardware runs other kernels (Accelerate or
MPS, oneDNN and MKL, cuBLAS), which round differently at every op, not only in another order.
Its tolerance, per metric, is the larger of
  - twice this machine's run-to-run spread (measured as above; 0 on the CPU, where envkit's runs
    are bit-identical), which is what a chaotic model's curves wander by here anyway, and
  - REL_ACROSS (1e-3) times the metric's largest |value| in the original over the compared steps.
The relative bound comes from the issue's measurement: two default GPT-2 small runs on one H100,
which differ only in their reductions' order, stayed within 6e-4 over 60 steps on a loss of several
units (it starts at ln 50257 = 10.8), about 1e-4 of it; other kernels on other hardware change every
op's rounding, not only the order of a sum, so ten times that.
The same bound holds for a run reproduced on another kind of device of the same machine (the CPU
run of a CUDA box reproduced on its GPU, other_device_kind).
A model that drifts apart on one device (ResNet-18 with CUDA graphs and cudnn benchmark) comes out
different across machines too, as it should: `--tolerance X` states another bound."""

from __future__ import annotations

import json

from envkit.fsutil import atomic_write_text
from envkit.record.envstate import cache_root
from envkit.runfolder.progress import Summary
from envkit.runfolder.records import RunRecord

SPREAD_FACTOR = 2.0
REL_ACROSS = 1e-3  # of a metric's largest |value|: the bound across machine kinds (module docstring)


def facts_of(summary: Summary | None, record: RunRecord | None, env: dict) -> dict:
    """The facts that decide (and explain) whether two runs can be identical."""
    summary = summary or Summary()
    torch = (env.get("versions") or {}).get("torch") or ((env.get("doctor") or {}).get("facts", {}).get("packages") or {}).get("torch")
    return {"device": summary.get("device") or "cpu", "device_name": summary.get("device_name"),
            "torch": torch, "precision": summary.get("precision"), "processes": summary.get("world_size") or 1,
            "compile": summary.get("compile"), "deterministic": bool(record and record.deterministic)}


def identical_required(a: dict, b: dict) -> tuple[bool, str]:
    """(must the runs be identical, why or why not) from the two runs' facts."""
    same_kind = all(a.get(k) == b.get(k) for k in ("device", "device_name", "torch", "processes"))
    if a.get("device") == "cpu" and b.get("device") == "cpu" and same_kind:
        return True, "both on the CPU with the same torch build: envkit's CPU runs are bit-identical"
    if a.get("deterministic") and same_kind:
        return True, f"deterministic, same device ({a.get('device_name')}), torch build and process count"
    diffs = [f"{k} {a.get(k)} -> {b.get(k)}" for k in ("device_name", "torch", "precision", "processes", "compile") if a.get(k) != b.get(k)]
    why = "; ".join(diffs) if diffs else f"not deterministic on {a.get('device_name') or a.get('device')}"
    return False, why


def spread_key(facts: dict, record: RunRecord, steps: int) -> str:
    return "|".join(str(x) for x in (facts.get("device_name"), facts.get("torch"), facts.get("processes"), facts.get("precision"),
                                     record.config.get("config_hash") or " ".join(record.command), steps))


def cached_spread(key: str) -> dict | None:
    try:
        return json.loads((cache_root() / "spreads.json").read_text()).get(key)
    except (OSError, ValueError, AttributeError):
        return None


def keep_spread(key: str, spread: dict) -> None:
    path = cache_root() / "spreads.json"
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    known[key] = spread
    try:
        atomic_write_text(path, json.dumps(known, indent=1))
    except OSError:
        pass


def other_device_kind(a: dict, b: dict) -> str | None:
    """Why two runs on the same kind of machine ran on different kinds of device (a run trained on
    the CPU of a CUDA box, reproduced on its GPU; an A100's run on an H100), or None: other devices
    run other kernels, so such a pair is held to the across-machines bound as well."""
    diffs = [f"{k} {a.get(k)} -> {b.get(k)}" for k in ("device", "device_name") if a.get(k) != b.get(k)]
    return "; ".join(diffs) or None


def across_machines(comparison: dict, original: dict[int, dict[str, float]], spread: dict | None) -> dict[str, float]:
    """{metric: its tolerance} for a run recorded on another kind of machine: the larger of twice
    this machine's spread and REL_ACROSS times the metric's largest |value| in the original
    (`original`: its rows, metrics.read_rows) over the steps compared."""
    import math

    out = {}
    for k in comparison["metrics"]:
        values = [abs(row[k]) for s, row in original.items() if k in row and not math.isnan(row[k])
                  and (comparison.get("upto") is None or s <= comparison["upto"])]
        out[k] = max(SPREAD_FACTOR * ((spread or {}).get(k) or {}).get("max_abs", 0.0), REL_ACROSS * max(values, default=0.0))
    return out


def decide(comparison: dict, required: bool, tolerance: float | None, spread: dict | None,
           bounds: dict[str, float] | None = None) -> tuple[str, dict]:
    """("same" | "within tolerance" | "different", {metric: its tolerance}). `bounds`: the
    tolerance of a run recorded on another machine (across_machines), stated even when identical."""
    metrics = comparison["metrics"]
    if comparison["steps"] == 0:
        return "different", {}
    if all(m["identical"] for m in metrics.values()):
        return "same", dict(bounds) if bounds is not None else {k: 0.0 for k in metrics}
    if required:
        return "different", {k: 0.0 for k in metrics}
    if tolerance is not None:
        tol = {k: tolerance for k in metrics}
    elif bounds is not None:
        tol = dict(bounds)
    elif spread is not None:
        tol = {k: SPREAD_FACTOR * (spread.get(k) or {}).get("max_abs", 0.0) for k in metrics}
    else:
        return "different", {}
    ok = all(m["max_abs"] <= tol[k] for k, m in metrics.items())
    return ("within tolerance" if ok else "different"), tol
