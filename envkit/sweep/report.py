"""What a sweep's runs achieved: one row per run (from its summary.json and metrics.jsonl) and one
per group (the runs that differ only by seed): mean and standard deviation of the best validation
accuracy, the best validation loss and the training throughput."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import TYPE_CHECKING

from envkit.train.watching.curves import draw_runs
from envkit.runfolder.progress import Summary
from envkit.runfolder.folder import RunFolder

if TYPE_CHECKING:
    from envkit.sweep.runner import SweepRun


def results_of(runs: list[SweepRun]) -> list[dict]:
    """One row per run, in the sweep's order."""
    return [run_result(r.run_dir, r.combo.overrides, r.combo.group, r.shown) for r in runs]


def unfinished(results: list[dict]) -> list[dict]:
    return [r for r in results if r["status"] != "completed"]


def plot(results: list[dict], path: Path, config: str) -> Path:
    """One curve per run, coloured by its group, into the PNG at `path`."""
    return draw_runs([(Path(r["run_dir"]), r["group"]) for r in results], path, title=Path(config).name)


def run_result(run_dir: Path, overrides: dict, group: str, state: str) -> dict:
    folder = RunFolder(run_dir)
    summary = folder.summary() or Summary()
    evals = [r for r in folder.metrics() if "val_loss" in r] if run_dir.is_dir() else []
    accs = [r["accuracy"] for r in evals if r.get("accuracy") is not None]
    rate_key = "tokens_per_second" if summary.get("tokens_per_second") is not None else "samples_per_second"
    return {
        "overrides": overrides, "group": group, "run_dir": str(run_dir),
        "status": summary.status or state,
        "best_val_loss": summary.best_val_loss,
        "accuracy": max(accs) if accs else summary.get("accuracy"),  # the best validation accuracy of the run
        "final_accuracy": summary.get("accuracy"),
        "steps": summary.steps, "epochs": summary.get("epochs"),
        "rate": summary.get(rate_key), "rate_unit": rate_key.split("_")[0],
    }


def mean_std(values: list) -> tuple[float | None, float | None]:
    xs = [v for v in values if v is not None]
    if not xs:
        return None, None
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def grouped(results: list[dict], metrics: tuple[str, ...]) -> list[dict]:
    """One entry per group in the order groups first appear: its runs, how many completed, and each
    metric's mean and sample standard deviation over the completed ones (`<metric>_mean`, `_std`)."""
    order: dict[str, list[dict]] = {}
    for r in results:
        order.setdefault(r["group"], []).append(r)
    out = []
    for name, rs in order.items():
        done = [r for r in rs if r["status"] == "completed"]
        entry = {"group": name, "runs": len(rs), "completed": len(done)}
        for m in metrics:
            entry[f"{m}_mean"], entry[f"{m}_std"] = mean_std([r[m] for r in done])
        out.append(entry)
    return out


def groups(results: list[dict]) -> list[dict]:
    """A train.yaml sweep's groups: best validation accuracy, best validation loss, throughput."""
    out = grouped(results, ("accuracy", "best_val_loss", "rate"))
    for g in out:
        g["rate_unit"] = next(r["rate_unit"] for r in results if r["group"] == g["group"])
    return out


def pm(mean, sd, fmt: str) -> str:
    return "-" if mean is None else f"{mean:{fmt}} ± {sd:{fmt}}"


def table_rows(gs: list[dict]) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    unit = gs[0]["rate_unit"] if gs else "samples"
    header = ("group", "runs", "best val accuracy", "best val loss", f"{unit}/s")
    rows = [(g["group"], f"{g['completed']}/{g['runs']}", pm(g["accuracy_mean"], g["accuracy_std"], ".3f"),
             pm(g["best_val_loss_mean"], g["best_val_loss_std"], ".4f"), pm(g["rate_mean"], g["rate_std"], ",.0f")) for g in gs]
    return header, rows
