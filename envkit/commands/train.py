"""`envkit run`, `envkit validate`: the reference trainer's commands.

Nothing here imports torch: the options become a plan (envkit/plan/: the config against the
profile and the machine, every refusal), and training happens in a child process
(envkit/launch/launcher.py)."""

from __future__ import annotations

import sys

import click

from envkit.config.config import render_rows, summary_line
from envkit.console import print_json
from envkit.errors import EnvkitError
from envkit.install.setup.managed import missing_line
from envkit.plan import RunRequest, make_plan
from envkit.plan.options import RunOptions, node_options
from envkit.selftest import render_report, run_selftest
from envkit.slurm.jobs import announce, run_job
from envkit.slurm.options import check as check_slurm
from envkit.slurm.options import pop_request, slurm_options
from envkit.launch import launcher
from envkit.train.watching.profiling import parse_profile_steps
from envkit.train.watching.run_end import run_end
from envkit.runfolder.folder import RunFolder


def _print_config(cfg, as_json: bool) -> None:
    for note in cfg.notes:  # a value the config makes moot: said even when only the config is shown
        click.echo(f"warning: {note}", err=True)
    if as_json:
        print_json({"config": cfg.to_dict(), "origin": {k: o for k, _, o in cfg.rows()},
                    "profile": cfg.profile, "config_hash": cfg.config_hash()})
        return
    click.echo(f"# resolved config from {cfg.source} (profile: {cfg.profile or 'none'}); origin after '#'")
    for line in render_rows(cfg):
        click.echo(line)


def common(fn):
    """The options `run` and `validate` share: the config, --set and --profile."""
    fn = click.option("--profile", "profile", help="Take defaults from this profile (default: the managed env's, else recommended).")(fn)
    fn = click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                      help="Override a value, e.g. --set training.lr=1e-4 (repeatable).")(fn)
    return click.argument("config", type=click.Path(dir_okay=False), required=False, default="train.yaml")(fn)


@click.command()
@common
@click.option("--replay", type=click.Path(dir_okay=False), help="Hold the config against a recorded machine (doctor snapshot).")
@click.option("--json", "as_json", is_flag=True, help="Print the resolved config as JSON.")
def validate(config, overrides, profile, replay, as_json):
    """Check a train.yaml without running it: schema, types, ranges, paths, and the device and
    precision against this machine (or --replay SNAPSHOT). Exit 0 valid, 2 invalid."""
    p = make_plan(RunRequest(config, tuple(overrides), profile, replay=replay, purpose="validate"))
    if as_json:
        _print_config(p.cfg, True)
        return
    _warn(p.warnings)
    assert p.cfg is not None  # validate's request names a train.yaml
    click.echo(f"{config}: valid ({summary_line(p.cfg)})")


def _warn(warnings) -> None:
    for w in warnings:
        click.echo(f"warning: {w}", err=True)


@click.command()
@common
@click.option("--run-id", help="Name of the run folder runs/<experiment>/<run-id>/ (resumed if it exists).")
@click.option("--resume", default="auto", show_default=True, metavar="auto|never|CHECKPOINT",
              help="auto: continue the newest unfinished run with the same config (refused, one line naming its PID, "
                   "while another process still trains it); never: always a new run.")
@click.option("--stop-after", type=click.IntRange(min=1), help="Stop cleanly after this step (checkpoint written); run again to resume.")
@click.option("--print-config", is_flag=True, help="Show the resolved config with each value's origin, then exit.")
@click.option("--json", "as_json", is_flag=True, help="With --print-config: JSON. Otherwise print summary.json at the end.")
@click.option("--selftest", is_flag=True, help="Run the quick self-test on the device first.")
@click.option("--nproc-per-node", type=click.IntRange(min=1), default=1, show_default=True, help="Processes (GPUs) via torchrun, DDP.")
@click.option("--python", "python", help="Train with this interpreter (default: the managed env's, else this one).")
@node_options
@click.option("--profile-steps", "profile_steps", metavar="A:B",
              help="Record optimizer steps A to B with torch.profiler: a Chrome trace (profile_steps_A-B.json) in the run folder.")
@slurm_options
@click.pass_context
def run(ctx, **options):
    """Train from a train.yaml with the embedded reference trainer.

    Writes runs/<experiment>/<run-id>/ (config, environment.json, metrics.jsonl, heartbeat.json,
    train.log, checkpoints/, summary.json). Exit 0 done, 1 training failed, 2 bad config; a run
    stopped by a signal checkpoints and exits 128 + its number: 130 Ctrl-C or `envkit stop`, 143 SIGTERM.

    One process trains in a run folder: while one does, a second `envkit run` that would resume it
    (--resume auto or its --run-id) refuses, naming the PID and how to watch or stop it, rather than
    starting a new run; the trainer dies with `envkit run`, even on SIGKILL.

    With --slurm the run is submitted to a Slurm cluster instead (sbatch), into the same run
    folder: it checkpoints before the time limit or a preemption and requeues itself."""
    slurm = pop_request(options)
    opts = RunOptions(**options, debug=bool((ctx.obj or {}).get("debug")))  # every other option is a field, by its name
    window = parse_profile_steps(opts.profile_steps)
    if slurm is not None and not opts.print_config:
        check_slurm(slurm)
    p = make_plan(opts.request(slurm.nodes if slurm is not None else None))
    if opts.print_config:
        _print_config(p.cfg, opts.as_json)
        return
    if slurm is not None:  # the login node is not the machine that trains: the nodes hold the config against themselves
        announce(run_job(p, stop_after=opts.stop_after, req=slurm), opts.as_json)
        return
    _warn(p.warnings)
    if p.managed is None and not opts.python:
        click.echo(missing_line(sys.executable), err=True)
    if opts.selftest:
        _selftest(p)
    rc = launcher.start(p, stop_after=opts.stop_after, debug=opts.debug, profile_steps=window, say=lambda m: click.echo(m, err=True),
                        stdout=sys.stderr if opts.as_json else None)  # --json: stdout holds the JSON alone
    _finish(p, rc, opts.as_json)


def _finish(p, rc: int, as_json: bool) -> None:
    """The run's end as the user sees it: summary.json (--json), and the exit code (0 done, 1 failed,
    2 bad input, 128 + the signal's number for a run a signal stopped)."""
    run_dir, node_rank = p.run.run_dir, p.nodes.node_rank
    summary = RunFolder(run_dir).summary() if node_rank == 0 else None  # node 0 holds the run folder
    if as_json and summary:
        print_json(summary.to_json())
    end = run_end(rc, summary, stopped=launcher.interrupted_exit_code(rc, summary), run_dir=run_dir, node_rank=node_rank)
    if end.line:
        click.echo(end.line, err=True)
    if end.code:
        raise SystemExit(end.code)


def _selftest(p) -> None:
    dev = p.cfg.device.type
    report = run_selftest(python=p.python, device=dev if dev in ("mps", "cuda", "cpu") else "auto", profile=p.cfg.profile, quick=True)
    render_report(report, echo=lambda line: click.echo(line, err=True))  # stdout is --json's, or the trainer's
    if not getattr(report, "ok", False):
        raise EnvkitError("the self-test failed on this device; not training", where="--selftest",
                          fix="see the report above; `envkit doctor` and `envkit selftest` explain each failure")
