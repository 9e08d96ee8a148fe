"""Render a self-test report: a rich table on a terminal, plain aligned lines otherwise.

Columns: probe, status, error vs reference (with the tolerance), time, what was measured. The fix
for every warn/fail sits right under it (flutter doctor style).
"""

from __future__ import annotations

import math

import click

from envkit.console import MARKS, PLAIN, console, is_tty


def fmt_error(error, tolerance) -> str:
    if error is None:
        return ""
    if isinstance(error, float) and not math.isfinite(error):
        text = "NaN/inf"
    else:
        text = f"{error:.1e}"
    if tolerance:
        text += f" / {tolerance:.0e}"
    return text


def header(report) -> str:
    bits = [f"device {report.device}" + (f" ({report.device_name})" if report.device_name and report.device_name != report.device else "")]
    if report.torch:
        bits.append(f"torch {report.torch}")
    bits.append(f"profile {report.profile or 'defaults'}")
    if report.precision:
        bits.append(f"precision {report.precision}")
    if report.quick:
        bits.append("quick")
    return "envkit selftest  " + ", ".join(bits)


def summary(report) -> str:
    c = report.counts()
    parts = [f"{c['pass']} passed"]
    for k, label in (("warn", "warned"), ("fail", "failed"), ("skip", "skipped")):
        if c.get(k):
            parts.append(f"{c[k]} {label}")
    verdict = "the device works" if report.ok else "the device is NOT ready to train"
    return f"{len(report.probes)} probes: {', '.join(parts)} in {report.seconds:.1f} s: {verdict}"


def render(report, echo=None) -> None:
    if echo is None and is_tty():
        render_rich(report)
    else:
        render_plain(report, echo or click.echo)


def render_plain(report, echo) -> None:
    echo(header(report))
    for note in report.notes:
        echo(f"  note: {note}")
    width = max([len(p.name) for p in report.probes] + [6])
    for p in report.probes:
        err = fmt_error(p.error, p.tolerance)
        echo(f"{PLAIN.get(p.status, p.status)} {p.name:<{width}}  {err:<16} {p.seconds:6.2f}s  {p.message}")
        if p.fix and p.status in ("warn", "fail"):
            echo(f"{'':6} {'':<{width}}  -> {p.fix}")
    echo(summary(report))


def render_rich(report, con=None) -> None:
    from rich.table import Table
    from rich.text import Text

    con = con or console()
    con.print(Text(header(report), style="bold"))
    for note in report.notes:
        con.print(Text(f"  note: {note}", style="dim"))
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("", no_wrap=True)
    table.add_column("probe", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("error / tol", no_wrap=True, justify="right")
    table.add_column("time", no_wrap=True, justify="right")
    table.add_column("detail")
    for p in report.probes:
        mark, color = MARKS.get(p.status, ("?", "white"))
        detail = Text(p.message)
        if p.fix and p.status in ("warn", "fail"):
            detail.append("\n→ " + p.fix, style=color)
        table.add_row(Text(mark, style=color), p.name, Text(p.status, style=color), fmt_error(p.error, p.tolerance),
                      f"{p.seconds:.2f}s", detail)
    con.print(table)
    con.print(Text(summary(report), style="green" if report.ok else "red bold"))


def render_report(report, echo=None) -> None:
    """A rich table on a terminal, plain lines otherwise (or through `echo`)."""
    render(report, echo=echo)
