"""`envkit sweep train.yaml`: every combination of the config's `sweep.grid` as its own run folder,
then a table per group (mean ± std across seeds). Run it again: completed runs are skipped,
unfinished ones resumed."""

from __future__ import annotations

from pathlib import Path

import click

from envkit.console import print_json, print_table
from envkit.slurm.jobs import announce, sweep_job
from envkit.slurm.options import check as check_slurm
from envkit.slurm.options import pop_request, slurm_options
from envkit.errors import EnvkitError
from envkit.sweep import report, runner
from envkit.sweep import script as command_sweep
from envkit.sweep.request import SweepRequest


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar="[CONFIG | -- COMMAND...]")
@click.option("--grid", "grids", multiple=True, metavar="KEY=V1,V2",
              help="Sweep your own command: each {KEY} in it takes these values (repeatable; see below).")
@click.option("--grid-file", type=click.Path(dir_okay=False), help="The grid of a command sweep as YAML: {key: [values]}.")
@click.option("--name", help="A command sweep's folder: runs/NAME/<combination>/ (default: the script's name).")
@click.option("--runs-dir", default="runs", show_default=True, type=click.Path(file_okay=False),
              help="Where a command sweep's run folders go.")
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
def sweep(ctx, **options):
    """Train every combination of CONFIG's sweep.grid (or of your command's --grid) and compare them.

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

    \b
    Your own script, over its arguments (each combination an `envkit exec` run):
      envkit sweep --grid lr=1e-3,3e-3 --grid seed=1,2 -- python train.py --lr {lr} --seed {seed}

    With --slurm the combinations not yet completed are submitted as one Slurm array job (one task
    each, --parallel N at a time); `envkit sweep CONFIG --report-only` then shows the same table
    (without --report-only it would train the unfinished ones here)."""
    slurm = pop_request(options)
    args, grids, grid_file, name, runs_dir = (options.pop(k) for k in ("args", "grids", "grid_file", "name", "runs_dir"))
    if grids or grid_file:
        if slurm is not None:
            raise EnvkitError("--slurm is for train.yaml sweeps", where="--slurm",
                              fix="submit a command sweep's runs one by one: envkit exec --slurm ... -- COMMAND")
        command_sweep.sweep_command(list(args), grids, grid_file, name=name, runs_dir=runs_dir, **options)
        return
    if len(args) > 1:
        raise EnvkitError(f"one config file, not {len(args)} arguments ({' '.join(args[:3])} ...)", where="envkit sweep",
                          fix="to sweep your own command: envkit sweep --grid KEY=V1,V2 -- python train.py --key {KEY}")
    options["config"] = args[0] if args else "train.yaml"
    req = SweepRequest(**options, parallel_given=ctx.get_parameter_source("parallel").name != "DEFAULT",
                       debug=bool((ctx.obj or {}).get("debug")))  # every other option is a field of the request, by its name
    pack = req.packing(on_slurm=slurm is not None)
    say = (lambda m: click.echo(m, err=True)) if req.as_json else click.echo
    if slurm is not None and not req.report_only:
        check_slurm(slurm)
    runs = runner.prepare(req, slurm_nodes=slurm.nodes if slurm is not None else None)  # the login node is not the machine that trains
    if slurm is not None and not req.report_only:
        _submit(runs, req, slurm, say)
        return
    interrupted = False if req.report_only else runner.train_here(runs, req, pack, say)
    _report(runs, req, say, interrupted)


def _submit(runs, req: SweepRequest, slurm, say) -> None:
    record = sweep_job(runs, req.config, overrides=req.overrides, profile=req.profile, python=req.python,
                       parallel=req.parallel if req.parallel_given else None, stop_after=req.stop_after, req=slurm)
    if record is None:
        say(f"sweep: all {len(runs)} runs completed: nothing to submit")
    else:
        announce(record, req.as_json)


def _report(runs, req: SweepRequest, say, interrupted: bool) -> None:
    """The table (or --json) of what the runs have, the plot, and the exit code."""
    results = report.results_of(runs)
    groups = report.groups(results)
    if req.plot:
        say(f"wrote {report.plot(results, Path(req.plot), req.config)}")
    if req.as_json:
        print_json({"runs": results, "groups": groups})
    else:
        _table(results, groups)
    if req.report_only:
        return
    left = report.unfinished(results)
    if interrupted:  # Ctrl-C: not finished, as a shell expects of an interrupted command (`envkit sweep && next` stops)
        say(f"sweep interrupted: {len(left)} of {len(results)} runs left ({', '.join(Path(r['run_dir']).name for r in left)}); "
            "`envkit sweep` again resumes them")
        raise SystemExit(130)
    if left:
        raise SystemExit(1)


def _table(results: list[dict], groups: list[dict]) -> None:
    print_table("sweep: mean ± std across seeds (completed runs)", *report.table_rows(groups))
    for r in report.unfinished(results):
        click.echo(f"not completed: {Path(r['run_dir']).name} ({r['status']})")
