"""`envkit sweep train.yaml`: every combination of the config's `sweep.grid` as its own run folder,
then a table per group (mean ± std across seeds). Run it again: completed runs are skipped,
unfinished ones resumed."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from envkit.console import print_json
from envkit.slurm.options import slurm_options


@click.command()
@click.argument("config", type=click.Path(dir_okay=False), required=False, default="train.yaml")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a value in every run (repeatable).")
@click.option("--profile", "profile", help="Take defaults from this profile (default: the managed env's, else recommended).")
@click.option("--parallel", type=click.IntRange(min=1), default=1, show_default=True,
              help="Runs at once (one per GPU on a machine with several CUDA GPUs).")
@click.option("--pack", "pack", metavar="auto|N", default=None,
              help="Runs at once on one device: auto measures it (the first run alone for a few steps, then 2, 4, ... "
                   "at once, while the throughput rises by 10% and memory allows; the probes are thrown away); "
                   "N is --parallel N.")
@click.option("--stop-after", type=click.IntRange(min=1), help="Stop each run cleanly after this step; `envkit sweep` again resumes.")
@click.option("--python", "python", help="Train with this interpreter (default: the managed env's, else this one).")
@click.option("--json", "as_json", is_flag=True, help="Print the runs and groups as JSON at the end.")
@click.option("--plot", "plot", type=click.Path(dir_okay=False), is_flag=False, flag_value="sweep.png", default=None,
              help="Write one curve per run, coloured by group, to this PNG (default sweep.png).")
@click.option("--report-only", is_flag=True, help="Train nothing: show the table of what the runs have so far.")
@click.option("--max-runs", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="Refuse a grid of more runs than this (counted before anything is expanded or run).")
@slurm_options
@click.pass_context
def sweep(ctx, config, overrides, profile, parallel, pack, stop_after, python, as_json, plot, report_only, max_runs, **slurm_kw):
    """Train every combination of CONFIG's sweep.grid and compare them.

    \b
    sweep:
      grid:
        training.optimizer: [adamw, lion]
        experiment.seed: [0, 1, 2]

    Each combination is runs/<experiment>/<key-value_...>/, an ordinary run folder (`envkit runs`,
    `monitor`, `plot` read it). A run another process trains (a second sweep of the same grid, an
    `envkit run`) is skipped with one line naming that process, never trained twice at once. Exit 0
    all completed, 1 a run failed, stopped or was skipped, 2 bad config, 130 interrupted (Ctrl-C:
    the runs checkpoint, and the runs left are named).

    With --slurm the combinations not yet completed are submitted as one Slurm array job (one task
    each, --parallel N at a time); `envkit sweep CONFIG --report-only` then shows the same table
    (without --report-only it would train the unfinished ones here)."""
    from envkit.slurm.options import check as check_slurm
    from envkit.slurm.options import pop_request
    from envkit.sweep import runner

    slurm = pop_request(slurm_kw)
    given = ctx.get_parameter_source("parallel").name != "DEFAULT"
    pack = _pack(pack, given, slurm is not None)
    if isinstance(pack, int):
        parallel = pack
    say = (lambda m: click.echo(m, err=True)) if as_json else click.echo
    if slurm is not None and not report_only:
        check_slurm(slurm)
    runs = runner.prepare(config, overrides=overrides, profile_name=profile, python=python, max_runs=max_runs,
                          slurm_nodes=slurm.nodes if slurm is not None else None)  # the login node is not the machine that trains
    if slurm is not None and not report_only:
        _submit(runs, config, overrides, profile, python, parallel if given else None, stop_after, slurm, as_json, say)
        return
    interrupted = False
    if not report_only:
        interrupted = _train(runs, pack, parallel, python, stop_after, bool((ctx.obj or {}).get("debug")), as_json, say)
    _report(runs, config, plot, as_json, say, report_only, interrupted)


def _pack(text: str | None, parallel_given: bool, on_slurm: bool) -> int | str | None:
    """--pack as given (auto, N or None), refused with --parallel or --slurm: before anything is resolved."""
    from envkit.errors import EnvkitError
    from envkit.sweep.pack import parse_pack

    pack = parse_pack(text)  # a typo is one line, exit 2
    if pack is not None and parallel_given:
        raise EnvkitError("--pack and --parallel both say how many runs at once", where="--pack",
                          fix="--pack auto to measure it, or --parallel N alone")
    if pack is not None and on_slurm:
        raise EnvkitError("--pack measures this machine, not the cluster's nodes", where="--pack",
                          fix="with --slurm, --parallel N sets how many array tasks run at once")
    return pack


def _submit(runs, config, overrides, profile, python, parallel, stop_after, slurm, as_json, say) -> None:
    from envkit.slurm.jobs import announce, sweep_job

    record = sweep_job(runs, config, overrides=overrides, profile=profile, python=python, parallel=parallel,
                       stop_after=stop_after, req=slurm)
    if record is None:
        say(f"sweep: all {len(runs)} runs completed: nothing to submit")
    else:
        announce(record, as_json)


def _train(runs, pack, parallel: int, python, stop_after, debug: bool, as_json: bool, say) -> bool:
    """Train what is not completed here; whether Ctrl-C interrupted it."""
    from envkit.sweep import runner

    if runs and runs[0].plan.managed is None and not python:
        say(f"note: no `envkit setup` environment here: training with {sys.executable}")
    todo = sum(r.state != "completed" for r in runs)
    if pack == "auto" and runs:
        parallel = _packed(runs, say)
    say(f"sweep: {len(runs)} runs ({len(runs) - todo} completed, {todo} to run, {parallel} at a time) "
        f"under {runs[0].run_dir.parent if runs else '?'}")
    return runner.execute(runs, parallel=parallel, gpus=runner.gpu_count(runs[0].plan.facts) if runs else 0,
                          stop_after=stop_after, debug=debug, say=say, quiet_stdout=as_json)  # --json: stdout holds the JSON alone


def _packed(runs, say) -> int:
    """--pack auto: one run per GPU where there are several, else the count measured on the one device."""
    from envkit.sweep import runner
    from envkit.sweep.pack import choose as choose_pack
    from envkit.launch.launcher import child_environ

    gpus = runner.gpu_count(runs[0].plan.facts)
    if gpus > 1:  # the runs already spread one per GPU: packing measures one device
        say(f"pack: {gpus} at a time, one run per GPU ({gpus} GPUs here; --pack auto measures a single device)")
        return gpus
    return choose_pack([r for r in runs if r.state != "completed"], runs[0].plan.python, child_environ(runs[0].plan.profile, 1), say)


def _report(runs, config: str, plot, as_json: bool, say, report_only: bool, interrupted: bool) -> None:
    """The table (or --json) of what the runs have, the plot, and the exit code."""
    from envkit.sweep import report

    results = [report.run_result(r.run_dir, r.combo.overrides, r.combo.group, r.state) for r in runs]
    groups = report.groups(results)
    if plot:
        from envkit.train.watching.curves import draw_runs

        out = draw_runs([(Path(r["run_dir"]), r["group"]) for r in results], Path(plot), title=Path(config).name)
        say(f"wrote {out}")
    if as_json:
        print_json({"runs": results, "groups": groups})
    else:
        _table(results, groups)
    if report_only:
        return
    if interrupted:  # Ctrl-C: not finished, as a shell expects of an interrupted command (`envkit sweep && next` stops)
        left = [Path(r["run_dir"]).name for r in results if r["status"] != "completed"]
        say(f"sweep interrupted: {len(left)} of {len(results)} runs left ({', '.join(left)}); `envkit sweep` again resumes them")
        raise SystemExit(130)
    if any(r["status"] != "completed" for r in results):
        raise SystemExit(1)


def _table(results: list[dict], groups: list[dict]) -> None:
    from envkit.console import console, is_tty
    from envkit.sweep.report import table_rows

    header, rows = table_rows(groups)
    unfinished = [r for r in results if r["status"] != "completed"]
    if is_tty():
        from rich.table import Table

        t = Table(*header, title="sweep: mean ± std across seeds (completed runs)")
        for row in rows:
            t.add_row(*row)
        console().print(t)
    else:
        click.echo("sweep: mean ± std across seeds (completed runs)")
        widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
        for row in (header, *rows):
            click.echo("  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip())
    for r in unfinished:
        click.echo(f"not completed: {Path(r['run_dir']).name} ({r['status']})")
