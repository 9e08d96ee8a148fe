"""`envkit doctor`."""

from __future__ import annotations

import sys

import click

from envkit.errors import EnvkitError
from envkit.checks.report import diagnose, render_plain, render_rich, PLAIN
from envkit.facts import collect
from envkit.facts.runner import LiveRunner, RecordingRunner, ReplayRunner, load_snapshot, write_json_atomic
from envkit.install import bytecode
from envkit.install.setup.managed import target_python
from envkit.launch.torchrun import child_entry
from envkit.slurm.preflight import run_checks
from envkit.console import print_json, console, is_tty


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print {facts, checks, profile} as JSON.")
@click.option("--record", "record", type=click.Path(dir_okay=False), help="Write the raw probe results to FILE (a snapshot).")
@click.option("--replay", "replay", type=click.Path(dir_okay=False), help="Diagnose a recorded snapshot instead of this machine.")
@click.option("--no-runtime", is_flag=True, help="Do not import torch (judge from version gates only).")
@click.option("--python", "python", help="Examine this interpreter (default: the project's .envkit environment if any, else envkit's own).")
@click.option("--slurm", "slurm", is_flag=True,
              help="Pre-flight for `--slurm` jobs instead: Slurm answers, the partition, envkit on the nodes, the rendezvous.")
@click.option("--partition", help="--slurm: the partition to check (default: the cluster's default).")
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True, help="--slurm: nodes to probe (2 checks that they reach node 0).")
@click.option("--fix", "fix", is_flag=True,
              help="Make the fixes envkit makes itself, then judge again: torch's bytecode where Python writes none "
                   "(in place, or into envkit's cache where site-packages is read-only; `envkit run`, `exec` and `sweep` use it).")
@click.option("--gpus-per-node", type=click.IntRange(min=0), default=0, show_default=True, help="--slurm: GPUs the partition's nodes must have.")
def doctor(as_json: bool, record: str | None, replay: str | None, no_runtime: bool, python: str | None, slurm: bool,
           partition: str | None, nodes: int, fix: bool, gpus_per_node: int) -> None:
    """Detect the OS, chip, Python and PyTorch, and judge them against the version gates.

    With --slurm: the checks a Slurm job needs, each with a fix (a short srun probe on --nodes nodes).

    Exit 0 when nothing fails, 1 when a check fails, 2 for bad input.
    """
    if slurm:
        _slurm_doctor(partition, nodes, gpus_per_node, as_json)

    python = None if replay else target_python(python)
    if record and replay:
        raise EnvkitError("--record and --replay cannot be used together", fix="choose one")
    if fix and (replay or record):
        raise EnvkitError("--fix changes this machine: it cannot be used with --replay or --record", fix="run `envkit doctor --fix` alone")
    if replay:
        runner = ReplayRunner(load_snapshot(replay), source=replay)
        facts = collect(runner, runtime=not no_runtime, source=replay)
    elif record:
        runner = RecordingRunner(python)
        facts = collect(runner, runtime=not no_runtime)
        try:
            write_json_atomic(record, runner.snapshot())
        except OSError as exc:
            raise EnvkitError(f"cannot write snapshot: {exc.strerror}", where=record)
    else:
        facts = collect(LiveRunner(python), runtime=not no_runtime)
    d = diagnose(facts)
    fixed = _fix_bytecode(d, facts, python) if fix else None
    if fixed is not None:
        facts = collect(LiveRunner(python), runtime=not no_runtime)
        d = diagnose(facts)
    if as_json:
        print_json({**d.to_dict(), **({"fixed": [] if fixed is None else [{"check": "bytecode", **fixed.to_dict()}]} if fix else {})})
    else:
        if fix:
            click.echo(f"fixed: {fixed.line()}" if fixed is not None else "fixed: nothing (envkit fixes torch's bytecode only; "
                       "the other fixes are below)")
        if is_tty():
            render_rich(d, console())
        else:
            render_plain(d, click.echo)
        if record:
            click.echo(f"snapshot written to {record} (no secrets, home as ~): attach it to a bug report", err=True)
    sys.exit(d.exit_code)


def _fix_bytecode(d, facts, python: str | None):
    """install/bytecode.py's fix where the bytecode check warns, else None."""
    check = next((c for c in d.checks if c.id == "bytecode"), None)
    code = facts.torch_bytecode
    if check is None or check.status != "warn" or code is None:
        return None
    click.echo("envkit: writing torch's bytecode (a minute or two)...", err=True)
    return bytecode.fix(python or sys.executable, code.folder, code.writable, also=(child_entry().parent / "envkit",))


def _slurm_doctor(partition, nodes, gpus, as_json) -> None:
    checks = run_checks(partition, nodes, gpus)
    ok = all(c.status != "fail" for c in checks)
    if as_json:
        print_json({"slurm": True, "ok": ok, "checks": [c.to_dict() for c in checks]})
    else:
        click.echo("envkit doctor --slurm")
        for c in checks:
            click.echo(f"{PLAIN[c.status]} {c.id}: {c.message}")
            if c.fix and c.status in ("warn", "fail"):
                click.echo(f"       fix: {c.fix}")
        click.echo("ready for --slurm" if ok else "not ready: fix the failing check above")
    sys.exit(0 if ok else 1)
