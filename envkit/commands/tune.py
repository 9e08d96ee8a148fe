"""`envkit tune`: measure settings within a budget and write the winner as this machine's profile."""

from __future__ import annotations

import sys

import click

from envkit.bench import load_context
from envkit.bench.progress import Progress
from envkit.console import is_tty, print_json
from envkit.tune import run_tune
from envkit.tune.session import parse_budget
from envkit.checks.recommend import shipped_recommendation
from envkit.facts import gather


@click.command()
@click.option("--budget", default="5m", show_default=True, help="Time to spend measuring: 5m, 90s, 1h.")
@click.option("--model", "model", type=click.Choice(["gpt", "cnn", "mlp"]), default=None,
              help="Built-in model at its quick-test size to measure with (default gpt).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Measure with this train.yaml's model and data instead.")
@click.option("--python", "python", default=None, help="Interpreter to measure (default: the managed env's, else this one).")
@click.option("--seconds", "seconds", type=click.FloatRange(0.5, 600), default=None,
              help="Seconds each candidate is timed after its warm-up (3 windows; default 3 on the CPU, 5 on a GPU).")
@click.option("--no-compile", is_flag=True,
              help="Leave torch.compile and its modes out of the search (compiling takes a minute on a CPU); the profile's setting is kept.")
@click.option("--dry-run", is_flag=True, help="Measure and show the decisions; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print {profile, path, settings, runs, ...} as JSON.")
@click.pass_context
def tune(ctx, budget, model, config_path, python, seconds, no_compile, dry_run, as_json) -> None:
    """Search batch size, gradient accumulation, workers, threads, precision, compile (and on a Mac
    the empty_cache cadence) within --budget, each candidate trained by the trainer's own step in its
    own process; a batch that does not fit is an answer (the largest that fits is bisected for); write
    the winner as a user profile that extends this machine's shipped one. Ctrl-C keeps what was decided."""

    seconds_total = parse_budget(budget)
    # The shipped profile is the starting point: a tuned profile is never tuned on top of itself.

    bctx = load_context(model, config_path, shipped_recommendation(gather(runtime=False, gpu_detail=False))[0], python)

    if not as_json:
        click.echo(f"envkit tune  {bctx.model} on {bctx.target}, from profile {bctx.shipped_profile}, budget {seconds_total:.0f} s", err=not is_tty())
    with Progress(tty=is_tty(sys.stderr) and not as_json, quiet=as_json) as shown:
        def on_run(row):
            shown.done(row["run"], row["status"], row["per_second"], row["unit"], row["seconds"], row["reason"])

        out = run_tune(bctx, seconds_total, on_run=on_run, on_start=shown.start, on_progress=shown.update, dry_run=dry_run,
                       seconds=seconds, no_compile=no_compile, debug=bool(ctx.obj and ctx.obj.get("debug")))
    if as_json:
        print_json(out.to_dict())
    else:
        _render(out)
    if out.result.stopped == "interrupted":
        sys.exit(130)
    if out.profile is None and not dry_run:
        sys.exit(1)


def _render(out) -> None:
    r = out.result
    for d in r.decisions:
        mark = "*" if d.changed else "="
        click.echo(f"{mark} {d.section}.{d.key} = {d.value}: {d.reason}")
    for n in r.notes + out.notes:
        click.echo(f"note: {n}")
    how = {"done": "search complete", "budget": "budget reached", "interrupted": "interrupted",
           "baseline failed": "the shipped settings failed"}.get(r.stopped, r.stopped)
    if out.path:
        click.echo(f"wrote profile {out.profile} ({how}, {r.elapsed_s:.0f} s): {out.path}")
        click.echo("envkit doctor now names it; envkit run, env and selftest use it (--profile chooses another)")
    elif out.profile:
        click.echo(f"would write profile {out.profile} ({how}, {r.elapsed_s:.0f} s)")
    else:
        click.echo(f"no profile written ({how}, {r.elapsed_s:.0f} s)")
