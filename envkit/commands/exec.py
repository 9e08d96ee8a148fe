"""`envkit exec -- COMMAND...`: your own training script inside the managed environment, with a run
folder, a heartbeat, restarts and a stall watchdog; `envkit stop RUN` ends a (detached) one."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import click

from envkit.console import print_json
from envkit.exec import environment, start_files, detach
from envkit.exec import start as steps
from envkit.exec.request import ExecRequest, metrics_pattern, project_metrics_pattern
from envkit.plan import RunRequest, make_plan
from envkit.plan.options import node_options
from envkit.runfolder.seal import seal_results
from envkit.slurm.options import check as check_slurm
from envkit.slurm.options import pop_request, slurm_options
from envkit.exec.supervise import Supervisor
from envkit.runfolder.find import resolve_run
from envkit.runfolder.create import folder_name
from envkit.runfolder.progress import Summary
from envkit.runfolder.folder import RunFolder


@click.command("exec", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--profile", "profile_name", help="Profile (default: as `envkit env`: the managed env's, else the recommended or tuned one).")
@click.option("--name", help="Run name: runs/NAME/<run-id>/ (default: the script's name).")
@click.option("--runs-dir", default="runs", show_default=True, type=click.Path(file_okay=False), help="Where run folders go.")
@click.option("--detach", is_flag=True, help="Start in the background, print the run folder and PID, return at once.")
@click.option("--restart-on-failure", "restarts", type=click.IntRange(min=0), default=0, show_default=True,
              help="Run a command that died again, up to N times (not one that exited 0 or that you stopped).")
@click.option("--restart-delay", type=click.FloatRange(min=0), default=10.0, show_default=True,
              help="Seconds before the first restart; doubles each time (at most 5 minutes).")
@click.option("--stall-timeout", metavar="DURATION",
              help="No output and no envkit.track metric for this long (15m, 90s): record as stalled, stop (and restart if allowed).")
@click.option("--grace", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="Seconds between SIGINT and SIGTERM when envkit stops the command.")
@click.option("--metrics-pattern", metavar="REGEX",
              help="Record printed metrics with this regex (named groups: the metrics; `step`: the step) instead of "
                   "the default reading of `step N: loss X` lines; 'off' records none.")
@click.option("--no-caffeinate", is_flag=True, help="macOS: let the machine sleep during the run (default: caffeinate -i -s).")
@click.option("--no-check", is_flag=True, help="Skip the check that the managed env's torch is still the build setup installed.")
@click.option("--nproc-per-node", type=click.IntRange(min=1), default=1, show_default=True, help="Processes via torchrun (DDP).")
@node_options
@click.option("--json", "as_json", is_flag=True, help="Print the run folder, pids and (in the foreground) summary.json as JSON.")
@click.option("--run-dir", "into", hidden=True, type=click.Path(file_okay=False),
              help="Use this run folder (made by `exec --slurm` at submission) instead of a new one.")
@slurm_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def exec_(**options):
    """Run your own command inside the managed environment: envkit exec [OPTIONS] -- python train.py ARGS.

    The managed venv's bin/ comes first on PATH and the profile's variables are set (one you
    exported yourself wins; environment.json records which). Writes runs/NAME/<run-id>/: the
    command, environment.json, train.log (the output, still shown live), heartbeat.json,
    metrics.jsonl (from envkit.track.log), summary.json. Exits with the command's exit code; one
    that a signal interrupted (Ctrl-C, SIGTERM, `envkit stop`) exits 128 + its number (130 for
    Ctrl-C) even when the command saved and exited 0.

    envkit's process owns the run folder while it runs, and the command's whole process group dies
    with it, even on kill -9 (SIGTERM, then SIGKILL after --grace); `envkit runs` then says
    orphaned while the command lingers, killed once nothing runs.

    With --slurm the command is submitted to a Slurm cluster (sbatch) and runs there under the same
    profile; Slurm's warning before the time limit reaches it as SIGUSR1 (save and exit: the job
    requeues and runs it again, in the same run folder)."""
    slurm = pop_request(options)
    req = ExecRequest(**options)  # every other option is a field of the request, by its parameter name
    if slurm is not None:
        check_slurm(slurm)
    nodes = make_plan(RunRequest(None, nproc=req.nproc_per_node, nodes=req.nodes, slurm_nodes=slurm.nodes if slurm is not None else None,
                                 detach=req.detach)).nodes
    argv = req.argv
    if req.name is not None:
        folder_name(req.name, "--name", "run name")  # before anything is resolved or made
    req.stall_seconds()  # a bad --stall-timeout is refused before anything is resolved or made
    metrics_pattern(req.metrics_pattern)  # and a bad --metrics-pattern
    if req.metrics_pattern is None:  # the project's own, from its pyproject.toml
        req = dataclasses.replace(req, metrics_pattern=project_metrics_pattern(Path.cwd()))
    managed, profile, xenv, resolved = steps.resolve_environment(req.profile_name, argv)
    versions = steps.interpreter_versions(resolved, managed, req.no_check)
    if req.nproc_per_node > 1 and xenv.won.get("OMP_NUM_THREADS", {}).get("by") != "user":
        from envkit.launch.launcher import omp_threads_per_process

        xenv.environ["OMP_NUM_THREADS"] = omp_threads_per_process(profile.env, xenv.environ, req.nproc_per_node)
    # Every check is done: only now is a run folder made.
    name = req.name if req.name is not None else start_files.run_name(argv)
    if slurm is not None:
        _submit(slurm, req, name, profile)
        return
    run_dir = steps.given_run_dir(req.into, nodes.node_rank) if req.into is not None else RunFolder.create(req.runs_dir, name).path
    launched = argv
    if req.nproc_per_node > 1 or nodes.nnodes > 1:
        launched = steps.torchrun_argv(argv, req.nproc_per_node, nodes, steps.launcher_python(argv, resolved, managed), run_dir)
    # the code state is taken here, before the command starts; exec returns once the record is whole
    recording = start_files.write_start_files(run_dir, command=argv, launched=launched, env=xenv, child_env=xenv.environ,
                                         managed=managed, versions=versions, options=req.recorded(nodes.nnodes, nodes.node_rank))
    env = environment.with_run_dir(xenv.environ, run_dir)
    if req.detach:
        steps.detach_and_report(run_dir, launched, env, req.as_json, recording)
        return
    _supervise(launched, env, run_dir, req, xenv.profile, recording)


def _submit(slurm, req: ExecRequest, name: str, profile) -> None:
    """--slurm: the run folder made here, the job submitted to run `envkit exec` in it."""
    from envkit.slurm.jobs import announce, exec_job, made_folders

    made = made_folders(req.runs_dir / name)  # before the run folder is made: which folders this submission creates
    run_dir = RunFolder.create(req.runs_dir, name).path
    # the profile's train.device: one of DeviceType (profiles/schema.py checks it as the profile loads); "" without one
    device = (getattr(profile, "train", None) or {}).get("device", "") if profile is not None else ""
    announce(exec_job(run_dir.resolve(), command=req.argv, options=req.slurm_options(), nproc=req.nproc_per_node, device=device,
                      req=slurm, made=made or [run_dir]), req.as_json)


def _supervise(launched: list[str], env: dict, run_dir: Path, req: ExecRequest, profile_name: str, recording=None) -> None:
    """The command in the foreground, to its end: summary.json (--json) and its exit code."""
    click.echo(f"envkit: run {run_dir} (profile {profile_name})", err=True)
    rc = Supervisor(launched, env, run_dir, req.supervise(), console=sys.stderr if req.as_json else None).run()  # --json: stdout holds the JSON alone
    summary = RunFolder(run_dir).summary() or Summary()
    rc = steps.interrupted_exit_code(rc, summary)
    steps.recorded(recording)
    seal_results(run_dir)  # the results under the record's seal, while the folder is still this process's
    if req.as_json:
        print_json({"run_dir": str(run_dir), **summary.to_json()})
    else:
        click.echo(f"envkit: run {run_dir}: {summary.status} (exit code {rc})", err=True)
    sys.exit(rc)


@click.command()
@click.argument("run", type=click.Path(), required=False)
@click.option("--grace", type=click.FloatRange(min=0), default=30.0, show_default=True, help="Seconds after SIGINT before SIGTERM.")
def stop(run, grace):
    """Stop a running run (default: the newest under ./runs): SIGINT, SIGTERM after --grace seconds.

    A run that a Slurm job trains is asked to checkpoint (SIGUSR1 through the job), not requeued,
    and cancelled with scancel after --grace seconds if it has not ended by then.

    Signals only the run's own process: the PID heartbeat.json records, with its start time, in a
    folder whose owner lock is not free. A heartbeat without a start time (an older run, another
    tool): the owner lock's holder, when the lock file names it with its start time. Otherwise
    nothing is sent, one line says why (the PID may now be another program), exit 1."""
    run_dir = Path(run) if run and (Path(run) / "slurm" / "job.json").is_file() else resolve_run(run)
    from envkit.slurm.cancel import stop_job

    how = stop_job(run_dir, grace, say=lambda m: click.echo(m, err=True))  # a run a Slurm job trains: through Slurm
    if how is not None:
        click.echo(f"{run_dir}: {how}")
        return
    how = detach.stop(run_dir, grace, say=lambda m: click.echo(m, err=True))
    click.echo(f"{run_dir}: {how}")
