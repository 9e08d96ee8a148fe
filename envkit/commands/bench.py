"""`envkit bench`: the optimization ladder (CPU fp32 baseline, the device, bf16/fp16, compile, the
profile's settings, channels_last for the cnn, then ddp and fsdp over the GPUs), each rung a fresh child process that trains with the trainer's own
step (envkit/bench/child.py), timed for a few seconds after warm-up, the whole ladder within --budget."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from envkit.bench import load_context, run_bench, save_report
from envkit.bench.progress import Progress
from envkit.bench.render import plot_ladder, render_plain, render_rich
from envkit.console import console, is_tty, print_json
from envkit.tune.session import parse_budget
from envkit.fsutil import check_writable


@click.command()
@click.option("--model", "model", type=click.Choice(["gpt", "cnn", "mlp"]), default=None,
              help="Built-in model at its quick-test size (default gpt).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Use this train.yaml's model, data and batch size instead.")
@click.option("--profile", "profile_name", default=None, help="Profile for the profile rung (default: this machine's).")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda", "mps"]), default="auto", show_default=True,
              help="The device whose ladder to climb (auto: the one training uses here).")
@click.option("--python", "python", default=None, help="Interpreter to measure (default: the managed env's, else this one).")
@click.option("--seconds", "seconds", type=click.FloatRange(0.5, 600), default=None,
              help="Seconds each rung is timed after its warm-up (3 windows, the median counts; default 4 on the CPU, 6 on a GPU).")
@click.option("--budget", default="4m", show_default=True, help="Time for the whole ladder: 4m, 90s. Rungs left when it ends are skipped.")
@click.option("--baseline", type=click.Choice(["cpu", "device"]), default="cpu", show_default=True,
              help="cpu: the CPU fp32 rung (capped to a few steps on a GPU machine) is the reference; device: skip it, "
                   "the first device rung is.")
@click.option("--no-compile", is_flag=True, help="Skip the torch.compile rungs (compiling takes a minute on a CPU).")
@click.option("--nproc", "nproc", type=click.IntRange(1, 1024), default=None,
              help="Processes for the ddp and fsdp rungs, one GPU each (default: every CUDA GPU here; they need 2 or more).")
@click.option("--output", "output", type=click.Path(dir_okay=False), default=None,
              help="Where to save the results (default runs/bench/MODEL-DEVICE-TIME.json).")
@click.option("--plot", "plot", type=click.Path(dir_okay=False), default=None, help="Also draw the ladder as a PNG bar chart.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.pass_context
def bench(ctx, model, config_path, profile_name, device, python, seconds, budget, baseline, no_compile, nproc, output, plot,
          as_json) -> None:
    """Measure the optimization ladder on this machine through the trainer's own step: samples or
    tokens per second, speed-up over the baseline, peak memory, and the loss after the same steps
    (flagged when it departs). A micro-batch that does not fit is split (the effective batch kept) and said."""

    budget_s = parse_budget(budget, where="--budget")
    for value, where in ((output, "--output"), (plot, "--plot")):
        if value:
            check_writable(Path(value), f"{where} {value}")  # before the ladder, not after it
    bctx = load_context(model, config_path, profile_name, python, device)
    with Progress(tty=is_tty(sys.stderr) and not as_json, quiet=as_json) as shown:
        report = run_bench(bctx, no_compile=no_compile, seconds=seconds, budget_s=budget_s, baseline=baseline,
                           on_start=shown.start, on_progress=shown.update,
                           on_rung=lambda r: shown.done(r.name, r.status, r.per_second, r.unit, r.seconds, r.reason),
                           debug=bool(ctx.obj and ctx.obj.get("debug")), nproc=nproc)
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
