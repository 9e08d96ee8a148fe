"""The steps of `envkit exec` between its options and the supervisor: the command's environment and
interpreter, the torchrun command line for several processes, the run folder of a Slurm job's node,
and the exit code of an interrupted command. commands/exec.py strings them together."""

from __future__ import annotations

import signal
import sys
import tempfile
from pathlib import Path

import click

from envkit import __version__
from envkit.console import print_json
from envkit.errors import EnvkitError
from envkit.exec import detach, environment
from envkit.exec.request import is_python
from envkit.facts import bytecode_cache
from envkit.install.act.interp import probe
from envkit.install.setup.managed import find_managed, missing_line
from envkit.launch.torchrun import torchrun_head
from envkit.profiles import load_profile
from envkit.runfolder.progress import Summary
from envkit.runfolder.records import RunStatus


def torchrun_argv(argv: list[str], nproc: int, nodes, python: str, run_dir: Path) -> list[str]:
    """`python [-u] train.py ARGS` -> `python -m torch.distributed.run ... train.py ARGS`;
    `python -m pkg ARGS` keeps -m (torchrun's --module); any other program runs with --no-python."""
    head = torchrun_head(python, nodes, nproc, rank_logs=run_dir / "ranks")
    if is_python(argv[0]):
        rest = [a for a in argv[1:] if a not in ("-u",)]  # torchrun's workers run unbuffered under envkit anyway
        return head + rest
    return head + ["--no-python", *argv]


def resolve_environment(profile_name: str | None, argv: list[str]):
    """(managed env, profile, the command's environment, the command's resolved path), the profile's
    warnings said; a command that is not there or a script that cannot run is refused."""
    managed = find_managed()
    pname, warning, facts = environment.resolve_profile_name(profile_name, managed)
    profile = load_profile(pname, facts=facts)
    for w in [warning, *profile.warnings]:
        if w:
            click.echo(f"envkit: warning: {w}", err=True)
    xenv = environment.build_environ(profile, managed.venv if managed else None)
    resolved = environment.find_command(argv, xenv.environ)
    python = resolved if resolved and is_python(resolved) else (str(managed.python) if managed else None)
    xenv.environ = bytecode_cache.child_environ(xenv.environ, python)  # envkit's bytecode cache, where one was made for it
    environment.check_script(argv)
    if managed is None:  # said, not silently skipped: the torch-against-lock check has no lock to hold to
        click.echo(missing_line(str(resolved or argv[0])), err=True)
    return managed, profile, xenv, resolved


def interpreter_versions(resolved: str, managed, no_check: bool) -> dict:
    """envkit, Python and torch of the interpreter that runs the command; the torch-build check."""
    out = {"envkit": __version__, "python": None, "torch": None}
    python = resolved if is_python(resolved) else (str(managed.python) if managed else None)
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


def launcher_python(argv: list[str], resolved: str, managed) -> str:
    """The interpreter torchrun runs under: the command's own when it is one, else the managed env's (or envkit's)."""
    return resolved if is_python(argv[0]) else str(managed.python if managed else sys.executable)


def given_run_dir(run_dir: Path, node_rank: int) -> Path:
    """--run-dir (inside a Slurm job): node 0 writes the run folder; another node keeps its own
    records in a private folder, as `envkit run` does for its nodes."""
    if not run_dir.is_dir():
        raise EnvkitError(f"run folder {run_dir} does not exist", where="--run-dir", fix="made by `envkit exec --slurm` at submission")
    return run_dir if node_rank == 0 else Path(tempfile.mkdtemp(prefix=f"envkit-exec-node{node_rank}-"))


def interrupted_exit_code(rc: int, summary: Summary) -> int:
    """A command that a signal sent to envkit interrupted (Ctrl-C, SIGTERM, `envkit stop`) and that
    saved and exited 0 anyway is not finished: 128 + the signal's number (130 for Ctrl-C), as a shell
    reports it, so `envkit exec ... && next` stops there. Its own non-zero code is kept."""
    name = summary.get("signal")
    if rc == 0 and summary.state is RunStatus.INTERRUPTED and isinstance(number := getattr(signal, str(name), None), int):
        return 128 + number
    return rc


def recorded(recording) -> None:
    """The run's record finished (the environment's lock): exec never returns before it is."""
    if recording is not None:
        recording.join()


def detach_and_report(run_dir: Path, launched: list[str], env: dict, as_json: bool, recording=None) -> None:
    """--detach: the supervisor started in the background; the run folder and PIDs said."""
    proc = detach.spawn(run_dir, launched, env)
    child = detach.wait_started(run_dir, proc)
    recorded(recording)
    if as_json:
        print_json({"run_dir": str(run_dir), "pid": child, "envkit_pid": proc.pid})
        return
    click.echo(f"run folder: {run_dir}")
    click.echo(f"pid: {child} (envkit's supervisor: {proc.pid})")
    click.echo(f"follow: tail -f {run_dir / 'train.log'}  |  envkit monitor {run_dir}  |  envkit stop {run_dir}", err=True)
