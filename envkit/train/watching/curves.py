"""`envkit plot`'s figure: loss and throughput, and under them device utilization, memory, data
wait and power where the run recorded them (matplotlib, drawn off-screen)."""

from __future__ import annotations

from pathlib import Path

from envkit.errors import EnvkitError
from envkit.fsutil import atomic_writer
from envkit.runfolder.find import read_metrics
from envkit.runfolder.folder import RunFolder


def draw_curves(d: Path, out: Path) -> Path:
    """Write the run's curves to `out` (a PNG) and return it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise EnvkitError("plotting needs matplotlib, which is not installed", where="envkit plot",
                          fix="pip install 'envkit[plot]' (or pip install matplotlib)")
    rows = read_metrics(d)
    train = [r for r in rows if "loss" in r]
    val = [r for r in rows if "val_loss" in r]
    if not train:
        raise EnvkitError("no metrics yet: nothing logged a step with a loss", where=str(RunFolder(d).metrics_file),
                          fix="an `envkit run` run logs every logging.every_steps steps; a script under `envkit exec` "
                              "logs with `from envkit import track; track.log(step, loss=...)`")
    dev = [r for r in train if "device_util_pct" in r or "device_mem_used_mb" in r or "torch_allocated_mb" in r
           or "data_wait_fraction" in r]
    # throughput as logged: a script run by `envkit exec` that never logged one gets no panel of zeros
    key = next((k for k in ("tokens_per_second", "samples_per_second") if any(r.get(k) is not None for r in train)), None)
    if dev:
        fig, axes = plt.subplots(3, 2, figsize=(11, 10), sharex="col")
        (ax1, ax2), (ax3, ax4), (ax5, ax6) = axes
        _plot_device(dev, ax3, ax4, ax5, ax6)
    elif key:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    else:
        fig, ax1 = plt.subplots(1, 1, figsize=(6, 4))
        ax2 = None
    ax1.plot([r["step"] for r in train], [r["loss"] for r in train], label="train")
    if val:
        ax1.plot([r["step"] for r in val], [r["val_loss"] for r in val], "o-", label="val")
    ax1.set_xlabel("step"), ax1.set_ylabel("loss"), ax1.legend(), ax1.set_title(f"{d.parent.name}/{d.name}")
    ax1.set_xlabel("step" if not dev else "")
    if key and ax2 is not None:  # ax2 is None only where no key was logged (and no device rows)
        rated = [r for r in train if r.get(key) is not None]
        ax2.plot([r["step"] for r in rated], [r[key] for r in rated])
        ax2.set_ylabel(key.replace("_", " "))
    elif ax2 is not None:
        ax2.text(0.5, 0.5, "throughput: not logged", ha="center", va="center", transform=ax2.transAxes)
    if ax2 is not None:
        ax2.set_xlabel("step" if not dev else "")
    fig.tight_layout()
    _save(fig, out)
    plt.close(fig)
    return out


def _plot_device(rows: list[dict], ax_util, ax_mem, ax_wait, ax_power) -> None:
    """Utilization and memory under the loss curve; data wait and power beside them."""
    steps = [r["step"] for r in rows]

    def series(key):
        return [r.get(key) for r in rows]

    if any(v is not None for v in series("device_util_pct")):
        ax_util.plot(steps, series("device_util_pct"), label="device")
    if any(v is not None for v in series("cpu_pct")):
        ax_util.plot(steps, series("cpu_pct"), label="process CPU")
    ax_util.set_ylabel("utilization %"), ax_util.set_ylim(bottom=0), ax_util.legend(loc="best")
    for key, label in (("device_mem_used_mb", "device in use"), ("torch_allocated_mb", "torch allocated"),
                       ("torch_reserved_mb", "torch reserved"), ("rss_mb", "process RSS")):
        if any(v is not None for v in series(key)):
            ax_mem.plot(steps, [None if v is None else v / 1024 for v in series(key)], label=label)
    totals = [v for v in series("device_mem_total_mb") if v]
    if totals:
        ax_mem.axhline(max(totals) / 1024, color="red", linestyle="--", label="limit")
    ax_mem.set_ylabel("memory GiB"), ax_mem.legend(loc="best")
    ax_wait.plot(steps, [None if v is None else 100 * v for v in series("data_wait_fraction")])
    ax_wait.set_ylabel("data wait % of step"), ax_wait.set_xlabel("step"), ax_wait.set_ylim(0, 100)
    if any(v is not None for v in series("power_w")):
        ax_power.plot(steps, series("power_w"))
        ax_power.set_ylabel("power W")
    else:
        ax_power.text(0.5, 0.5, "power: not reported here", ha="center", va="center", transform=ax_power.transAxes)
    ax_power.set_xlabel("step")


def draw_runs(runs: list[tuple[Path, str]], out: Path, title: str = "sweep") -> Path:
    """`envkit sweep --plot`: train loss and validation accuracy (or loss) of several runs, one line
    per run, one colour per group (runs of a group differ by seed only)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise EnvkitError("plotting needs matplotlib, which is not installed", where="envkit sweep --plot",
                          fix="pip install 'envkit[plot]' (or pip install matplotlib)")
    fig, (ax_loss, ax_val) = plt.subplots(1, 2, figsize=(12, 4.5))
    colours: dict[str, str] = {}
    val_key = "val_loss"
    for d, _group in runs:
        rows = read_metrics(d) if d.is_dir() else []
        if any(r.get("accuracy") is not None for r in rows):
            val_key = "accuracy"
    for d, group in runs:
        rows = read_metrics(d) if d.is_dir() else []
        label = group if group not in colours else None  # one legend entry per group
        colour = colours.setdefault(group, f"C{len(colours) % 10}")
        train = [r for r in rows if "loss" in r]
        val = [r for r in rows if r.get(val_key) is not None and "val_loss" in r]
        ax_loss.plot([r["step"] for r in train], [r["loss"] for r in train], color=colour, alpha=0.8, label=label)
        ax_val.plot([r["step"] for r in val], [r[val_key] for r in val], "o-", color=colour, alpha=0.8, markersize=3)
    ax_loss.set_xlabel("step"), ax_loss.set_ylabel("train loss"), ax_loss.set_title(title)
    if colours:
        ax_loss.legend(loc="best")
    ax_val.set_xlabel("step"), ax_val.set_ylabel("validation " + ("accuracy" if val_key == "accuracy" else "loss"))
    fig.tight_layout()
    _save(fig, out)
    plt.close(fig)
    return out


def _save(fig, out: Path) -> None:
    """The PNG written whole and renamed into place: a link planted at its name (a run folder from
    someone else) is replaced, never written through."""
    with atomic_writer(Path(out)) as fh:
        fig.savefig(fh, dpi=100, format="png")
