"""The ladder on screen (a rich table on a terminal, plain lines otherwise) and as a PNG bar chart."""

from __future__ import annotations

from pathlib import Path

from envkit.bench.ladder import LOSS_TOLERANCE

STATUS_STYLE = {"ok": "green", "flagged": "yellow", "fail": "red", "skip": "dim"}


def _num(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _why(r) -> str:
    text = r.reason or ""
    if r.check:
        text += f" (doctor check '{r.check}')"
    return text


def header(report) -> str:
    return (f"envkit bench  model {report.model}, device {report.device}, batch {report.batch_size}, "
            f"profile {report.profile or 'none'}, torch {report.torch or '?'}")


def render_plain(report, echo) -> None:
    echo(header(report))
    for r in report.rungs:
        if r.status in ("skip",) or r.per_second is None:
            echo(f"[{r.status}] {r.name}: {_why(r)}")
            continue
        echo(f"[{r.status}] {r.name}: {r.per_second:,.0f} {report.unit}/s, x{_num(r.speedup, '.2f')}, "
             f"peak {_num(r.peak_memory_mb, ',.0f')} MB, loss {_num(r.loss, '.4f')}" + (f"; {_why(r)}" if r.reason else ""))
    _footer(report, echo)


def _footer(report, echo) -> None:
    ref = next((r.name for r in report.rungs if r.speedup == 1.0), "cpu fp32")
    echo(f"speed-up over {ref}; loss of step 2 from the same seed (flagged beyond {100 * LOSS_TOLERANCE:.0f}% apart); "
         f"each rung timed for seconds after its warm-up, median of windows; {report.elapsed_s:.0f} s in all")
    for n in report.notes:
        echo(f"note: {n}")
    if report.saved:
        echo(f"saved {report.saved}")


def render_rich(report, console) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=header(report), title_justify="left")
    for col, just in (("rung", "left"), ("status", "left"), (f"{report.unit}/s", "right"), ("speed-up", "right"),
                      ("peak MB", "right"), ("loss", "right"), ("reason", "left")):
        table.add_column(col, justify=just, overflow="fold")
    for r in report.rungs:
        table.add_row(r.name, Text(r.status, style=STATUS_STYLE.get(r.status, "")),
                      _num(r.per_second, ",.0f"), "-" if r.speedup is None else f"x{r.speedup:.2f}",
                      _num(r.peak_memory_mb, ",.0f"), _num(r.loss, ".4f"), _why(r))
    console.print(table)
    _footer(report, lambda s: console.print(Text(s, style="dim")))


def plot_ladder(report, path: Path) -> Path:
    """A bar per rung (speed-up over the baseline); skipped and failed rungs are named, with no bar."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        from envkit.errors import EnvkitError

        raise EnvkitError("--plot needs matplotlib", where="--plot", fix="pip install 'envkit[plot]'")
    names = [r.name for r in report.rungs]
    values = [r.speedup or 0.0 for r in report.rungs]
    colors = {"ok": "#4c9f70", "flagged": "#e0a030", "fail": "#c0392b", "skip": "#bbbbbb"}
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(names)), 4))
    bars = ax.bar(range(len(names)), values, color=[colors.get(r.status, "#888") for r in report.rungs])
    for bar, r in zip(bars, report.rungs):
        label = f"x{r.speedup:.2f}" if r.speedup else r.status
        ax.text(bar.get_x() + bar.get_width() / 2, max(bar.get_height(), 0) + 0.02, label, ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("speed-up over cpu fp32")
    ax.set_title(f"envkit bench: {report.model} on {report.device}")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)
    return path
