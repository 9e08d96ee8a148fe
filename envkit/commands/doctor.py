"""`envkit doctor`."""

from __future__ import annotations

import sys

import click

from envkit.errors import EnvkitError


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print {facts, checks, profile} as JSON.")
@click.option("--record", "record", type=click.Path(dir_okay=False), help="Write the raw probe results to FILE (a snapshot).")
@click.option("--replay", "replay", type=click.Path(dir_okay=False), help="Diagnose a recorded snapshot instead of this machine.")
@click.option("--no-runtime", is_flag=True, help="Do not import torch (judge from version gates only).")
@click.option("--python", "python", help="Examine this interpreter (default: the project's .envkit environment if any, else envkit's own).")
def doctor(as_json: bool, record: str | None, replay: str | None, no_runtime: bool, python: str | None) -> None:
    """Detect the OS, chip, Python and PyTorch, and judge them against the version gates.

    Exit 0 when nothing fails, 1 when a check fails, 2 for bad input.
    """
    from envkit.checks.report import diagnose, render_plain, render_rich
    from envkit.facts import collect
    from envkit.facts.runner import LiveRunner, RecordingRunner, ReplayRunner, load_snapshot, write_json_atomic

    from envkit.install.setup.managed import target_python

    python = None if replay else target_python(python)
    if record and replay:
        raise EnvkitError("--record and --replay cannot be used together", fix="choose one")
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
    if as_json:
        from envkit.console import print_json

        print_json(d.to_dict())
    else:
        from envkit.console import console, is_tty

        if is_tty():
            render_rich(d, console())
        else:
            render_plain(d, click.echo)
        if record:
            click.echo(f"snapshot written to {record} (no secrets, home as ~): attach it to a bug report", err=True)
    sys.exit(d.exit_code)
