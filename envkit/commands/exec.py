"""`envkit exec -- COMMAND...`: your own training script inside the managed environment, with a run
folder, a heartbeat, restarts and a stall watchdog; `envkit stop RUN` ends a (detached) one."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import click

from envkit.console import print_json
from envkit.errors import EnvkitError
from envkit.runfolder import names
from envkit.slurm.options import slurm_options

_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600}


def parse_duration(text: str | None, where: str) -> float | None:
    """'15m' -> 900.0, '90s' / '90' -> 90.0, '2h' -> 7200.0."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not m or float(m.group(1)) <= 0:
        raise EnvkitError(f"{text!r} is not a duration", where=where, fix="e.g. 15m, 90s or 2h")
    return float(m.group(1)) * _UNITS[m.group(2)]


def torchrun_argv(argv: list[str], nproc: int, nodes, python: str, run_dir: Path) -> list[str]:
    """`python [-u] train.py ARGS` -> `python -m torch.distributed.run ... train.py ARGS`;
    `python -m pkg ARGS` keeps -m (torchrun's --module); any other program runs with --no-python."""
    from envkit.train.run.torchrun import torchrun_head

    head = torchrun_head(python, nodes, nproc, rank_logs=run_dir / "ranks")
    if re.match(r"^python[\d.]*$", Path(argv[0]).name):
        rest = [a for a in argv[1:] if a not in ("-u",)]  # torchrun's workers run unbuffered under envkit anyway
        return head + rest
    return head + ["--no-python", *argv]


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
@click.option("--no-caffeinate", is_flag=True, help="macOS: let the machine sleep during the run (default: caffeinate -i -s).")
@click.option("--no-check", is_flag=True, help="Skip the check that the managed env's torch is still the build setup installed.")
@click.option("--nproc-per-node", type=click.IntRange(min=1), default=1, show_default=True, help="Processes via torchrun (DDP).")
@click.option("--nnodes", type=click.IntRange(min=1), default=1, show_default=True, help="Machines taking part (torchrun rendezvous).")
@click.option("--node-rank", type=click.IntRange(min=0), default=0, show_default=True, help="This machine's rank.")
@click.option("--rdzv-endpoint", metavar="HOST:PORT", help="Rendezvous address, on node 0 (needed with --nnodes > 1).")
@click.option("--rdzv-backend", default="static", show_default=True, help="torchrun's rendezvous backend.")
@click.option("--rdzv-id", help="Rendezvous id shared by all nodes.")
@click.option("--json", "as_json", is_flag=True, help="Print the run folder, pids and (in the foreground) summary.json as JSON.")
@click.option("--run-dir", "into", hidden=True, type=click.Path(file_okay=False),
              help="Use this run folder (made by `exec --slurm` at submission) instead of a new one.")
@slurm_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def exec_(profile_name, name, runs_dir, detach, restarts, restart_delay, stall_timeout, grace, no_caffeinate, no_check,
          nproc_per_node, nnodes, node_rank, rdzv_endpoint, rdzv_backend, rdzv_id, as_json, into, command, **slurm_kw):
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
    from envkit.exec import environment, rundir
    from envkit.plan import RunRequest, make_plan
    from envkit.slurm.options import check as check_slurm
    from envkit.slurm.options import pop_request

    slurm = pop_request(slurm_kw)
    if slurm is not None:
        check_slurm(slurm)
    nodes = make_plan(RunRequest(None, nproc=nproc_per_node, nnodes=nnodes, node_rank=node_rank, rdzv_endpoint=rdzv_endpoint,
                                 rdzv_backend=rdzv_backend, rdzv_id=rdzv_id, slurm_nodes=slurm.nodes if slurm is not None else None,
                                 detach=detach)).nodes
    argv = list(command)
    if name is not None:
        rundir.check_run_name(name)  # before anything is resolved or made
    stall = parse_duration(stall_timeout, "--stall-timeout")
    managed, profile, xenv, resolved = _environment(profile_name, argv)
    versions = _versions(resolved, managed, no_check)
    if nproc_per_node > 1 and xenv.won.get("OMP_NUM_THREADS", {}).get("by") != "user":
        from envkit.train.run.launcher import omp_threads_per_process

        xenv.environ["OMP_NUM_THREADS"] = omp_threads_per_process(profile, xenv.environ, nproc_per_node)
    options = {"restarts": restarts, "restart_delay": restart_delay, "stall_timeout": stall, "grace": grace,
               "caffeinate": not no_caffeinate, "nproc_per_node": nproc_per_node, "nnodes": nodes.nnodes, "node_rank": nodes.node_rank}
    # Every check is done: only now is a run folder made.
    name = name if name is not None else rundir.run_name(argv)
    if slurm is not None:
        _submit(slurm, argv, profile_name, Path(runs_dir), name, nproc_per_node, profile, restarts, restart_delay, stall_timeout,
                grace, no_check, as_json)
        return
    run_dir = _given_run_dir(Path(into), nodes.node_rank) if into is not None else rundir.new_run_dir(Path(runs_dir), name)
    launched = argv
    if nproc_per_node > 1 or nodes.nnodes > 1:
        python = resolved if re.match(r"^python[\d.]*$", Path(argv[0]).name) else str(managed.python if managed else sys.executable)
        launched = torchrun_argv(argv, nproc_per_node, nodes, python, run_dir)
    # the code state is taken here, before the command starts; exec returns once the record is whole
    recording = rundir.write_start_files(run_dir, command=argv, launched=launched, env=xenv, child_env=xenv.environ,
                                         managed=managed, versions=versions, options=options)
    env = environment.with_run_dir(xenv.environ, run_dir)
    if detach:
        _detach(run_dir, launched, env, as_json, recording)
        return
    _supervise(launched, env, run_dir, options, xenv.profile, as_json, recording)


def _environment(profile_name, argv: list[str]):
    """(managed env, profile, the command's environment, the command's resolved path), the profile's
    warnings said; a command that is not there or a script that cannot run is refused."""
    from envkit.exec import environment
    from envkit.install.setup.managed import find_managed, missing_line
    from envkit.profiles import load_profile

    managed = find_managed()
    pname, warning, facts = environment.resolve_profile_name(profile_name, managed)
    profile = load_profile(pname, facts=facts)
    for w in [warning, *profile.warnings]:
        if w:
            click.echo(f"envkit: warning: {w}", err=True)
    xenv = environment.build_environ(profile, managed.venv if managed else None)
    resolved = environment.find_command(argv, xenv.environ)
    environment.check_script(argv)
    if managed is None:  # said, not silently skipped: the torch-against-lock check has no lock to hold to
        click.echo(missing_line(str(resolved or argv[0])), err=True)
    return managed, profile, xenv, resolved


def _recorded(recording) -> None:
    """The run's record finished (the environment's lock): exec never returns before it is."""
    if recording is not None:
        recording.join()


def _supervise(launched: list[str], env: dict, run_dir: Path, options: dict, profile_name: str, as_json: bool,
               recording=None) -> None:
    """The command in the foreground, to its end: summary.json (--json) and its exit code."""
    from envkit.exec import rundir
    from envkit.exec.supervise import Options, Supervisor

    click.echo(f"envkit: run {run_dir} (profile {profile_name})", err=True)
    opts = Options(**{k: v for k, v in options.items() if k in Options.__dataclass_fields__})
    rc = Supervisor(launched, env, run_dir, opts, console=sys.stderr if as_json else None).run()  # --json: stdout holds the JSON alone
    summary = rundir.read_json(run_dir / names.SUMMARY)
    rc = interrupted_exit_code(rc, summary)
    _recorded(recording)
    if as_json:
        print_json({"run_dir": str(run_dir), **summary})
    else:
        click.echo(f"envkit: run {run_dir}: {summary.get('status')} (exit code {rc})", err=True)
    sys.exit(rc)


def interrupted_exit_code(rc: int, summary: dict) -> int:
    """A command that a signal sent to envkit interrupted (Ctrl-C, SIGTERM, `envkit stop`) and that
    saved and exited 0 anyway is not finished: 128 + the signal's number (130 for Ctrl-C), as a shell
    reports it, so `envkit exec ... && next` stops there. Its own non-zero code is kept."""
    import signal

    name = summary.get("signal")
    if rc == 0 and summary.get("status") == "interrupted" and isinstance(number := getattr(signal, str(name), None), int):
        return 128 + number
    return rc


def _given_run_dir(run_dir: Path, node_rank: int) -> Path:
    """--run-dir (inside a Slurm job): node 0 writes the run folder; another node keeps its own
    records in a private folder, as `envkit run` does for its nodes."""
    import tempfile

    if not run_dir.is_dir():
        raise EnvkitError(f"run folder {run_dir} does not exist", where="--run-dir", fix="made by `envkit exec --slurm` at submission")
    return run_dir if node_rank == 0 else Path(tempfile.mkdtemp(prefix=f"envkit-exec-node{node_rank}-"))


def _submit(slurm, argv, profile_name, runs_dir: Path, name: str, nproc: int, profile, restarts, restart_delay, stall_timeout,
            grace, no_check, as_json) -> None:
    from envkit.exec import rundir
    from envkit.slurm.jobs import announce, exec_job, made_folders

    made = made_folders(runs_dir / name)
    run_dir = rundir.new_run_dir(runs_dir, name)
    made = made or [run_dir]
    options = [*(["--profile", profile_name] if profile_name else []), "--restart-on-failure", str(restarts),
               "--restart-delay", str(restart_delay), *(["--stall-timeout", stall_timeout] if stall_timeout else []),
               "--grace", str(grace), *(["--no-check"] if no_check else [])]
    device = str((getattr(profile, "train", None) or {}).get("device", "")) if profile is not None else ""
    announce(exec_job(run_dir.resolve(), command=argv, options=options, nproc=nproc, device=device, req=slurm, made=made), as_json)


def _versions(resolved: str, managed, no_check: bool) -> dict:
    """envkit, Python and torch of the interpreter that runs the command; the torch-build check."""
    from envkit import __version__
    from envkit.install.act.interp import probe

    out = {"envkit": __version__, "python": None, "torch": None}
    python = resolved if re.match(r"^python[\d.]*$", Path(resolved).name) else (str(managed.python) if managed else None)
    if python:
        try:
            t = probe(python, dists=True, timeout=30)
            out.update(python=t.version, torch=(t.dists.get("torch") or {}).get("version"), interpreter=python)
        except EnvkitError as exc:
            click.echo(f"envkit: warning: {exc.message}", err=True)
    if managed and not no_check:
        from envkit.exec.torch_check import FIX, check_managed_torch

        line = check_managed_torch(managed)
        if line:
            click.echo(f"envkit: warning: {line} (fix: {FIX})", err=True)
    return out


def _detach(run_dir: Path, launched: list[str], env: dict, as_json: bool, recording=None) -> None:
    from envkit.exec import detach

    proc = detach.spawn(run_dir, launched, env)
    child = detach.wait_started(run_dir, proc)
    _recorded(recording)
    if as_json:
        print_json({"run_dir": str(run_dir), "pid": child, "envkit_pid": proc.pid})
        return
    click.echo(f"run folder: {run_dir}")
    click.echo(f"pid: {child} (envkit's supervisor: {proc.pid})")
    click.echo(f"follow: tail -f {run_dir / 'train.log'}  |  envkit monitor {run_dir}  |  envkit stop {run_dir}", err=True)


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
    from envkit.exec import detach
    from envkit.slurm.cancel import stop_job
    from envkit.train.watching.runs_state import resolve_run

    run_dir = Path(run) if run and (Path(run) / "slurm" / "job.json").is_file() else resolve_run(run)
    how = stop_job(run_dir, grace, say=lambda m: click.echo(m, err=True))  # a run a Slurm job trains: through Slurm
    if how is not None:
        click.echo(f"{run_dir}: {how}")
        return
    how = detach.stop(run_dir, grace, say=lambda m: click.echo(m, err=True))
    click.echo(f"{run_dir}: {how}")
