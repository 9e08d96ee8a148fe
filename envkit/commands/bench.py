"""`envkit bench`: the optimization ladder (CPU fp32 baseline, the device, bf16/fp16, compile, the
profile's settings, fused/channels_last), each rung measured in a fresh child process."""

from __future__ import annotations

import sys
from pathlib import Path

import click


@click.command()
@click.option("--model", "model", type=click.Choice(["gpt", "cnn", "mlp"]), default=None,
              help="Built-in model at its quick-test size (default gpt).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Use this train.yaml's model, data and batch size instead.")
@click.option("--profile", "profile_name", default=None, help="Profile for the profile rung (default: this machine's).")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda", "mps"]), default="auto", show_default=True,
              help="The device whose ladder to climb (auto: the one training uses here).")
@click.option("--python", "python", default=None, help="Interpreter to measure (default: the managed env's, else this one).")
@click.option("--steps", "window_steps", type=click.IntRange(1, 10000), default=None,
              help="Steps per timed window (5 windows, after 3 warm-up steps; default 5 on CPU, 10 on a GPU).")
@click.option("--no-compile", is_flag=True, help="Skip the torch.compile rungs (compiling takes a minute on a CPU).")
@click.option("--timeout", type=float, default=600, show_default=True, help="Seconds one rung may take.")
@click.option("--output", "output", type=click.Path(dir_okay=False), default=None,
              help="Where to save the results (default runs/bench/MODEL-DEVICE-TIME.json).")
@click.option("--plot", "plot", type=click.Path(dir_okay=False), default=None, help="Also draw the ladder as a PNG bar chart.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.pass_context
def bench(ctx, model, config_path, profile_name, device, python, window_steps, no_compile, timeout, output, plot, as_json) -> None:
    """Measure the optimization ladder on this machine: samples or tokens per second, speed-up over
    the CPU, peak memory, and the loss after the same steps (flagged when it departs)."""
    from envkit.bench import load_context, run_bench, save_report
    from envkit.bench.render import plot_ladder, render_plain, render_rich
    from envkit.console import console, is_tty, print_json

    bctx = load_context(model, config_path, profile_name, python, device)
    live = not as_json and not is_tty()

    def on_rung(r):
        if live:  # plain output: one line per rung as it finishes
            click.echo(f"  ... {r.name}: {r.status}", err=True)

    report = run_bench(bctx, no_compile=no_compile, window_steps=window_steps, timeout=timeout, on_rung=on_rung,
                       debug=bool(ctx.obj and ctx.obj.get("debug")))
    save_report(report, Path(output) if output else None)
    if plot:
        report.notes.append(f"plot: {plot_ladder(report, Path(plot))}")
    if as_json:
        print_json(report.to_dict())
    elif is_tty():
        render_rich(report, console())
    else:
        render_plain(report, click.echo)
    if report.interrupted:
        sys.exit(130)
    if any(r.status == "fail" for r in report.rungs):
        sys.exit(1)
