"""`envkit run`, `envkit validate`: the reference trainer's commands.

Nothing here imports torch: the options become a plan (envkit/plan/: the config against the
profile and the machine, every refusal), and training happens in a child process
(envkit/launch/launcher.py)."""

from __future__ import annotations

import sys

import click

from envkit.console import print_json
from envkit.errors import EnvkitError
from envkit.runfolder import names
from envkit.slurm.options import slurm_options


def _print_config(cfg, as_json: bool) -> None:
    from envkit.config.config import render_rows

    for note in cfg.notes:  # a value the config makes moot: said even when only the config is shown
        click.echo(f"warning: {note}", err=True)
    if as_json:
        print_json({"config": cfg.to_dict(), "origin": {k: o for k, _, o in cfg.rows()},
                    "profile": cfg.profile, "config_hash": cfg.config_hash()})
        return
    click.echo(f"# resolved config from {cfg.source} (profile: {cfg.profile or 'none'}); origin after '#'")
    for line in render_rows(cfg):
        click.echo(line)


_common = [
    click.argument("config", type=click.Path(dir_okay=False), required=False, default="train.yaml"),
    click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a value, e.g. --set training.lr=1e-4 (repeatable)."),
    click.option("--profile", "profile", help="Take defaults from this profile (default: the managed env's, else recommended)."),
]


def common(fn):
    for deco in reversed(_common):
        fn = deco(fn)
    return fn


@click.command()
@common
@click.option("--replay", type=click.Path(dir_okay=False), help="Hold the config against a recorded machine (doctor snapshot).")
@click.option("--json", "as_json", is_flag=True, help="Print the resolved config as JSON.")
def validate(config, overrides, profile, replay, as_json):
    """Check a train.yaml without running it: schema, types, ranges, paths, and the device and
    precision against this machine (or --replay SNAPSHOT). Exit 0 valid, 2 invalid."""
    from envkit.plan import RunRequest, make_plan

    p = make_plan(RunRequest(config, tuple(overrides), profile, replay=replay, purpose="validate"))
    if as_json:
        _print_config(p.cfg, True)
        return
    _warn(p.warnings)
    c = p.cfg
    assert c is not None  # validate's request names a train.yaml
    click.echo(f"{config}: valid ({c.model.type} on {c.dataset.type}"
               + (f"/{c.dataset.task}" if c.dataset.type == 'synthetic' else "")
               + (f", {c.training.epochs} epochs" if c.training.epochs else f", {c.training.max_steps} steps")
               + f", device {c.device.type}, precision {c.training.precision}, "
               f"profile {c.profile or 'none'})")


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
@click.option("--nnodes", type=click.IntRange(min=1), default=1, show_default=True, help="Machines taking part (torchrun rendezvous).")
@click.option("--node-rank", type=click.IntRange(min=0), default=0, show_default=True, help="This machine's rank; node 0 writes the run folder.")
@click.option("--rdzv-endpoint", metavar="HOST:PORT", help="Rendezvous address, on node 0 (needed with --nnodes > 1).")
@click.option("--rdzv-backend", default="static", show_default=True,
              help="torchrun's rendezvous backend (static keeps global rank 0 on node 0; c10d).")
@click.option("--rdzv-id", help="Rendezvous id shared by all nodes (default: the run id).")
@click.option("--profile-steps", "profile_steps", metavar="A:B",
              help="Record optimizer steps A to B with torch.profiler: a Chrome trace (profile_steps_A-B.json) in the run folder.")
@slurm_options
@click.pass_context
def run(ctx, config, overrides, profile, run_id, resume, stop_after, print_config, as_json, selftest, nproc_per_node, python,
        nnodes, node_rank, rdzv_endpoint, rdzv_backend, rdzv_id, profile_steps, **slurm_kw):
    """Train from a train.yaml with the embedded reference trainer.

    Writes runs/<experiment>/<run-id>/ (config, environment.json, metrics.jsonl, heartbeat.json,
    train.log, checkpoints/, summary.json). Exit 0 done, 1 training failed, 2 bad config; a run
    stopped by a signal checkpoints and exits 128 + its number: 130 Ctrl-C or `envkit stop`, 143 SIGTERM.

    One process trains in a run folder: while one does, a second `envkit run` that would resume it
    (--resume auto or its --run-id) refuses, naming the PID and how to watch or stop it, rather than
    starting a new run; the trainer dies with `envkit run`, even on SIGKILL.

    With --slurm the run is submitted to a Slurm cluster instead (sbatch), into the same run
    folder: it checkpoints before the time limit or a preemption and requeues itself."""
    from envkit.plan import RunRequest, make_plan
    from envkit.slurm.options import check as check_slurm
    from envkit.slurm.options import pop_request
    from envkit.launch import launcher
    from envkit.train.watching.profiling import parse_profile_steps

    slurm = pop_request(slurm_kw)
    window = parse_profile_steps(profile_steps)
    if slurm is not None and not print_config:
        check_slurm(slurm)
    p = make_plan(RunRequest(config, tuple(overrides), profile, python, nproc=nproc_per_node, nnodes=nnodes, node_rank=node_rank,
                             rdzv_endpoint=rdzv_endpoint, rdzv_backend=rdzv_backend, rdzv_id=rdzv_id,
                             slurm_nodes=slurm.nodes if slurm is not None else None, run_id=run_id, resume=resume,
                             purpose="print-config" if print_config else "train"))
    if print_config:
        _print_config(p.cfg, as_json)
        return
    if slurm is not None:  # the login node is not the machine that trains: the nodes hold the config against themselves
        from envkit.slurm.jobs import announce, run_job

        announce(run_job(p, stop_after=stop_after, req=slurm), as_json)
        return
    _warn(p.warnings)
    if p.managed is None and not python:
        from envkit.install.setup.managed import missing_line

        click.echo(missing_line(sys.executable), err=True)
    if selftest:
        _selftest(p)
    rc = launcher.start(p, stop_after=stop_after, debug=bool((ctx.obj or {}).get("debug")), profile_steps=window,
                        say=lambda m: click.echo(m, err=True), stdout=sys.stderr if as_json else None)  # --json: stdout holds the JSON alone
    _finish(p, rc, as_json)


def _finish(p, rc: int, as_json: bool) -> None:
    """The run's end as the user sees it: summary.json (--json), and the exit code (0 done, 1 failed,
    2 bad input, 128 + the signal's number for a run a signal stopped)."""
    from envkit.plan.rundirs import read_json
    from envkit.launch.launcher import interrupted_exit_code

    run_dir, node_rank = p.run.run_dir, p.nodes.node_rank
    if node_rank > 0:
        click.echo(f"node {node_rank}: training process exited with code {rc}; node 0 holds the run folder", err=True)
        raise SystemExit(0 if rc == 0 else 1)
    summary = read_json(run_dir / names.SUMMARY)
    if as_json and summary:
        print_json(summary)
    if rc == 2:
        sys.exit(2)
    stopped = interrupted_exit_code(rc, summary)
    if stopped is not None:
        raise SystemExit(stopped)  # checkpointed and said so; not finished: 130 Ctrl-C, 143 SIGTERM
    if rc not in (0, 3) and (not summary or summary.get("status") in (None, "running")):  # 3: it said why itself
        # The child died without its own last word (a segfault, "Abort trap: 6", an OOM kill).
        click.echo(f"envkit: error: the training process {_ended(rc)} before finishing; its log is {run_dir / 'train.log'} "
                   f"(fix: run `envkit selftest` for the device, and `envkit run` again to resume from the last checkpoint)", err=True)
    if rc != 0:
        raise SystemExit(1)


def _ended(rc: int) -> str:
    import signal

    if rc >= 0:
        return f"exited with code {rc}"
    try:
        return f"was killed by {signal.Signals(-rc).name}"
    except ValueError:
        return f"was killed by signal {-rc}"


def _selftest(p) -> None:
    from envkit.selftest import render_report, run_selftest

    dev = p.cfg.device.type
    report = run_selftest(python=p.python, device=dev if dev in ("mps", "cuda", "cpu") else "auto", profile=p.cfg.profile, quick=True)
    render_report(report, echo=lambda line: click.echo(line, err=True))  # stdout is --json's, or the trainer's
    if not getattr(report, "ok", False):
        raise EnvkitError("the self-test failed on this device; not training", where="--selftest",
                          fix="see the report above; `envkit doctor` and `envkit selftest` explain each failure")
