"""The ladder on screen (a rich table on a terminal, plain lines otherwise) and as a PNG bar chart."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from envkit.bench.ladder import LOSS_TOLERANCE
from envkit.errors import EnvkitError

if TYPE_CHECKING:
    from rich.console import JustifyMethod

STATUS_STYLE = {"ok": "green", "flagged": "yellow", "fail": "red", "skip": "dim"}


def _num(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _why(r) -> str:
    text = r.reason or ""
    if r.check:
        text += f" (doctor check '{r.check}')"
    return text


def _short(r) -> str:
    """A skipped rung's reason in a few words, with the doctor check it comes from: one line. The
    full reason is in --json and the saved report."""
    text = r.short or r.reason or "skipped"
    return text + (f" (doctor check '{r.check}')" if r.check else "")


def width() -> int:
    """The terminal's columns ($COLUMNS where set, 80 where nothing says)."""
    import shutil

    return max(40, shutil.get_terminal_size((80, 24)).columns)


def _crop(line: str, cols: int) -> str:
    return line if len(line) <= cols else line[: cols - 1] + "\u2026"


def _wrap(text: str, cols: int, indent: str = "") -> list[str]:
    import textwrap

    return textwrap.wrap(text, cols, initial_indent=indent, subsequent_indent=indent or "  ",
                         break_on_hyphens=False, break_long_words=True) or [indent]


def header(report) -> str:
    return (f"envkit bench  model {report.model}, device {report.device}, batch {report.batch_size}, "
            f"profile {report.profile or 'none'}, torch {report.torch or '?'}")


def scaling_text(r) -> str:
    """A data-parallel rung against the best single-GPU rung: `x1.87 of cuda + profile on 2 GPUs, 94% per GPU`."""
    if r.world < 2:
        return ""
    if r.scaling is None:
        return f"{r.world} processes, no single-GPU rung to compare with"
    return f"x{r.scaling:.2f} of {r.scaling_over} on {r.world} GPUs, {100 * r.efficiency:.0f}% per GPU"


def render_plain(report, echo) -> None:
    cols = width()
    for line in _wrap(header(report), cols):
        echo(line)
    for r in report.rungs:
        if r.status == "skip":
            echo(_crop(f"[skip] {r.name}: {_short(r)}", cols))
            continue
        if r.per_second is None:
            for line in _wrap(f"[{r.status}] {r.name}: {_why(r)}", cols):
                echo(line)
            continue
        echo(_crop(f"[{r.status}] {r.name}: {r.per_second:,.0f} {report.unit}/s, x{_num(r.speedup, '.2f')}, "
                   f"peak {_num(r.peak_memory_mb, ',.0f')} MB, loss {_num(r.loss, '.4f')}", cols))
        if scaling_text(r):
            echo(_crop(f"       {scaling_text(r)}", cols))
        if r.changed:
            echo(_crop(f"       changed {r.changed}", cols))
        if r.reason:
            for line in _wrap(_why(r), cols, indent="       "):
                echo(line)
    _footer(report, lambda text: [echo(line) for line in _wrap(text, cols)])


def footer_text(report) -> str:
    ref = next((r.name for r in report.rungs if r.speedup == 1.0), "cpu fp32")
    timed = (f"each {report.device} rung timed for {report.seconds_per_rung:g} s after its warm-up, "
             f"the median of {report.windows} windows")
    if report.baseline_steps:
        timed += f" (the CPU baseline: {report.baseline_steps} steps at most)"
    return (f"speed-up over {ref}; loss of step 2 from the same seed (flagged beyond {100 * LOSS_TOLERANCE:.0f}% apart); "
            f"{timed}; {report.elapsed_s:.0f} s in all")


def _footer(report, say) -> None:
    say(footer_text(report))
    if any(r.status == "skip" for r in report.rungs):
        say("skipped rungs in short: their full reasons are in --json" + (" and the saved report" if report.saved else ""))
    for n in report.notes:
        say(f"note: {n}")
    if report.saved:
        say(f"saved {report.saved}")


def render_rich(report, console) -> None:
    """The measured rungs as a table that fits the terminal, a line under it for each reason they
    carry, then one cropped line per skipped rung."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    console.print(Text(header(report), style="bold"))
    ran = [r for r in report.rungs if r.status != "skip"]
    if ran:
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        columns: tuple[tuple[str, JustifyMethod], ...] = (("rung", "left"), ("status", "left"), (f"{report.unit}/s", "right"), ("speed-up", "right"),
                          ("peak MB", "right"), ("loss", "right"))
        for col, just in columns:
            table.add_column(col, justify=just, no_wrap=col == "rung")
        for r in ran:
            table.add_row(r.name, Text(r.status, style=STATUS_STYLE.get(r.status, "")),
                          _num(r.per_second, ",.0f"), "-" if r.speedup is None else f"x{r.speedup:.2f}",
                          _num(r.peak_memory_mb, ",.0f"), _num(r.loss, ".4f"))
        console.print(table)
        for r in ran:  # the data-parallel rungs: scaling over the best single GPU, and per GPU
            if scaling_text(r):
                line = Text(f"{r.name}: ", style="bold")
                line.append(scaling_text(r))
                console.print(line, no_wrap=True, overflow="ellipsis")
        for r in ran:  # what each measured rung changed: the figure's cause, in the keys a user would set
            if r.changed:
                line = Text(f"{r.name} changed ", style="bold")
                line.append(r.changed, style="dim")
                console.print(line, no_wrap=True, overflow="ellipsis")
        for r in ran:
            if r.reason:
                line = Text(f"{r.name}: ", style="bold")
                line.append(_why(r))
                console.print(line)
    for r in report.rungs:
        if r.status == "skip":
            line = Text("skip ", style=STATUS_STYLE["skip"])
            line.append(f"{r.name}: ", style="bold")
            line.append(_short(r), style="dim")
            console.print(line, no_wrap=True, overflow="ellipsis")
    _footer(report, lambda s: console.print(Text(s, style="dim")))


def plot_ladder(report, path: Path) -> Path:
    """A bar per rung (speed-up over the baseline); skipped and failed rungs are named, with no bar."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
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
