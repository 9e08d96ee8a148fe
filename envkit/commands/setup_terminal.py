"""How `envkit setup` talks to the person at the terminal: the plan, the confirmation, the notes and
the self-test's report (or, with --json, the plan alone on stdout and every other line on stderr).
Every line loses URL credentials on the way out."""

from __future__ import annotations

import sys

import click

from envkit.console import is_tty, print_json
from envkit.errors import EnvkitError
from envkit.redact import strip_userinfo
from envkit.selftest import render_report


def say(text: str = "", err: bool = False) -> None:
    """Every line setup prints (plan, commands, notes) loses URL credentials: the installer gets
    the real index URL, the terminal and its logs do not."""
    click.echo(strip_userinfo(text), err=err)


class CommandLineUI:
    """How setup talks to the person at the terminal (or to a script, with --json: then stdout holds
    the plan as one JSON document, and every other line (notes, the installer's, the self-test's
    report, the next step) goes to stderr)."""

    def __init__(self, as_json: bool = False):
        self.as_json = as_json

    def say(self, text: str = "", err: bool = False) -> None:
        say(text, err=err or self.as_json)

    @staticmethod
    def show_json(obj) -> None:
        print_json(obj)

    @staticmethod
    def confirm(yes: bool) -> None:
        _confirm(yes)

    @staticmethod
    def show_plan(plan: dict, as_json: bool) -> None:
        _show(plan, as_json)

    def selftest_report(self, report) -> None:
        render_report(report, echo=(lambda line: say(line, err=True)) if self.as_json else None)


def _show(plan: dict, as_json: bool) -> None:
    if as_json:
        print_json(plan)
        return
    say(f"envkit setup  {plan['machine']}")
    say(f"  profile   {plan['profile']}")
    say(f"  torch     {plan['request']} -> " + (", ".join(f"{k} {v}" for k, v in plan["versions"].items()) if plan["versions"] else plan["spec"]))
    say(f"  build     {plan['device']} ({plan['backend']}, {plan['channel']})")
    say(f"  index     {plan['index_url'] or _pip_sources_text(plan)}  [{plan['index_why']}]")
    if plan["limit"]:
        say(f"  limit     torch {plan['limit']}: {'; '.join(plan['limit_why'])}")
    say(f"  venv      {plan['venv']}" + (" (new)" if plan["create_venv"] else ""))
    say(f"  installer {plan['installer']}")
    for c in plan["changes"]:
        say(f"  change    {c['name']}: {c['from'] or 'not installed'} -> {c['to']}")
    for c in plan["commands"]:
        say(f"  $ {c}")
    for n in plan["notes"]:
        say(f"  note: {n}")

def _pip_sources_text(plan: dict) -> str:
    """Every source pip is configured with (pip installs torch's dependencies from any of them), and
    the ones torch itself was found on."""
    text = "pip configured sources: " + ", ".join(plan["pip_sources"])
    return text + (f" (torch from {', '.join(plan['sources'])})" if plan["sources"] != plan["pip_sources"] else "")


def _confirm(yes: bool) -> None:
    if yes:
        return
    if not is_tty(sys.stdin):
        raise EnvkitError("setup needs a confirmation and stdin is not a terminal", fix="pass --yes to proceed without asking")
    if not click.confirm("Proceed?", default=True):
        raise click.exceptions.Abort()


