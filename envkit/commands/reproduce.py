"""`envkit reproduce RUN_DIR`: parse the options, call the reproduce stage, render its answer."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from envkit.console import print_json
from envkit.reproduce.session import reproduce as run
from envkit.reproduce.report import check
from envkit.reproduce.venv import python_of


def _say(as_json: bool):
    return lambda text: click.echo(text, err=True) if as_json else click.echo(text)


@click.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--check", "check_only", is_flag=True,
              help="Only compare the venv, code, data and config with the run's record, naming each difference.")
@click.option("--venv", "venv", type=click.Path(file_okay=True), metavar="DIR",
              help="Build the venv here (or reuse it if it holds exactly the run's lock); with --check: the venv to compare.")
@click.option("--steps", type=click.IntRange(min=1), help="Train again up to this step only, and compare those "
              "(an exec run: its script stops once envkit.track has logged that step).")
@click.option("--tolerance", type=click.FloatRange(min=0), help="Accept differences up to this (absolute, every metric) "
              "instead of the measured run-to-run spread, where identical is not required.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda", "mps"]), help="Train the reproduction on this device "
              "(default: the run's; a run from another machine: this machine's). Another device is held to the across-devices bound.")
@click.option("--yes", "-y", is_flag=True, help="Go on without asking where the folder is not one this machine wrote "
              "unchanged (what it will run and build is shown first).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def reproduce(run_dir, check_only, venv, steps, tolerance, device, yes, as_json):
    """Make a recorded run again: a fresh venv from its pylock.toml, its code (a git worktree at its
    commit with its uncommitted changes), training into RUN_DIR-reproN beside it, and the metrics
    compared step by step. Exit 0 the same (identical, or within the stated tolerance), 1 different,
    2 cannot reproduce (an artifact or the data is missing or changed, a bad record, or no consent).

    A run folder this machine wrote and can verify unchanged (record.seal) reproduces without a
    question; any other (sent by someone, edited since) shows what it will run and build and asks
    first: --yes accepts, and without a terminal and --yes nothing is run. --check runs nothing
    the folder names."""
    say = _say(as_json)
    if check_only:
        _check(Path(run_dir), venv, as_json, say)
        return

    result = run(Path(run_dir), venv=Path(venv) if venv else None, steps=steps, tolerance=tolerance, device=device, say=say,
                 yes=yes)
    if as_json:
        print_json(result)
    else:
        _render(result)
    sys.exit(result["exit_code"])


def _check(run_dir: Path, venv: str | None, as_json: bool, say) -> None:
    report = check(run_dir, python_of(Path(venv)) if venv else None)
    code = 2 if report.blocking else 1 if report.differences else 0
    if as_json:
        print_json({"run_dir": str(run_dir), "exit_code": code, **report.to_dict()})
    else:
        for line in report.differences:
            click.echo(line)
        for note in report.notes:
            click.echo(f"note: {note}")
        click.echo(f"{run_dir}: " + ("the data changed: the run cannot be made again as it was" if code == 2
                                     else f"{len(report.differences)} difference{'s' if len(report.differences) > 1 else ''} "
                                          "from the run's record" if code
                                     else "the venv, code, data and config match the run's record"))
    sys.exit(code)


def _render(r: dict) -> None:
    for name, m in sorted(r["metrics"].items()):
        tol = (r.get("tolerance") or {}).get(name)
        click.echo(f"  {name:<14} {m['steps']:>4} steps  " + ("identical" if m["identical"] else
                   f"max |diff| {m['max_abs']:.3g} at step {m['at_step']} (first at step {m['first_diff']})")
                   + (f"  tolerance {tol:.3g}" if tol and not m["identical"] else ""))
    facts = r["facts"]["reproduction"]
    said = [facts["device_name"] or facts["device"], f"torch {facts['torch']}" if facts.get("torch") else "no torch",
            facts.get("precision"), f"{facts['processes']} process(es)" if facts.get("processes") else None,
            f"deterministic {'on' if facts['deterministic'] else 'off'}"]
    click.echo(f"  facts: {', '.join(x for x in said if x)}; {r['why']}")
    if r.get("another_machine"):
        click.echo(r["another_machine"]["line"])  # the tolerance and where it came from are in it
    elif r.get("tolerance_from"):
        click.echo(f"  tolerance from: {r['tolerance_from']}")
    click.echo(f"{r['outcome']}: {r['run']} against {Path(r['run_dir']).name}, {r['steps_compared']} logged steps compared")
