"""`envkit plot`: a run's curves as a PNG."""

from __future__ import annotations

from pathlib import Path

import click

from envkit.train.watching.curves import draw_curves
from envkit.runfolder.find import resolve_run


@click.command()
@click.argument("run_dir", type=click.Path(), required=False)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="PNG path (default RUN_DIR/curves.png).")
def plot(run_dir, output):
    """Write loss and throughput curves of a run as a PNG (needs matplotlib: pip install 'envkit[plot]')."""

    d = resolve_run(run_dir)
    out = draw_curves(d, Path(output) if output else d / "curves.png")
    click.echo(f"wrote {out}")
