"""`envkit tune`: measure settings within a budget and write the winner as this machine's profile."""

from __future__ import annotations

import sys

import click


@click.command()
@click.option("--budget", default="5m", show_default=True, help="Time to spend measuring: 5m, 90s, 1h.")
@click.option("--model", "model", type=click.Choice(["gpt", "cnn", "mlp"]), default=None,
              help="Built-in model at its quick-test size to measure with (default gpt).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Measure with this train.yaml's model and data instead.")
@click.option("--python", "python", default=None, help="Interpreter to measure (default: the managed env's, else this one).")
@click.option("--steps", "window_steps", type=click.IntRange(1, 10000), default=None,
              help="Steps per timed window (5 windows after 3 warm-up steps).")
@click.option("--dry-run", is_flag=True, help="Measure and show the decisions; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print {profile, path, settings, runs, ...} as JSON.")
@click.pass_context
def tune(ctx, budget, model, config_path, python, window_steps, dry_run, as_json) -> None:
    """Search batch size, gradient accumulation, workers, threads, precision, compile (and on a Mac
    the empty_cache cadence) within --budget, each candidate measured in its own process; write the
    winner as a user profile that extends this machine's shipped one. Ctrl-C keeps what was decided."""
    from envkit.bench import load_context
    from envkit.console import is_tty, print_json
    from envkit.tune import run_tune
    from envkit.tune.session import parse_budget

    seconds = parse_budget(budget)
    # The shipped profile is the starting point: a tuned profile is never tuned on top of itself.
    from envkit.checks.recommend import shipped_recommendation
    from envkit.facts import gather

    bctx = load_context(model, config_path, shipped_recommendation(gather(runtime=False, gpu_detail=False))[0], python)

    def on_run(row):
        if not as_json:
            rate = f"{row['per_second']:,.0f} {row['unit']}/s" if row["per_second"] else row["reason"]
            click.echo(f"  {row['run']:<24} {row['status']:<5} {rate}  ({row['seconds']:.1f} s)", err=not is_tty())

    if not as_json:
        click.echo(f"envkit tune  {bctx.model} on {bctx.target}, from profile {bctx.shipped_profile}, budget {seconds:.0f} s", err=not is_tty())
    out = run_tune(bctx, seconds, on_run=on_run, dry_run=dry_run, window_steps=window_steps,
                   debug=bool(ctx.obj and ctx.obj.get("debug")))
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
