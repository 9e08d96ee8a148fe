"""`envkit env`: the profile's environment for a shell."""

from __future__ import annotations

import os
from pathlib import Path

import click

from envkit.profiles.envscripts import SHELLS, Shell, render, write_env_scripts
from envkit.errors import EnvkitError
from envkit.install.setup.managed import find_managed
from envkit.profiles import load_profile
from envkit.exec.environment import resolve_profile_name  # one rule for env and exec
from envkit.facts import gather


def _default_shell() -> Shell:
    shell = os.path.basename(os.environ.get("SHELL", ""))
    return shell if shell in ("zsh", "fish") else "bash"


@click.command()
@click.option("--profile", "profile_name", default=None,
              help="Profile name, or auto (the default: the managed env's profile, else the one recommended for this machine).")
@click.option("--shell", "shell", type=click.Choice(SHELLS), default=None,
              help="Output syntax (default: from $SHELL; bash otherwise).")
@click.option("--replay", "replay", type=click.Path(dir_okay=False),
              help="Resolve the profile against a recorded snapshot instead of this machine.")
@click.option("--write", "write_dir", type=click.Path(file_okay=False),
              help="Write activate, activate.fish, .env and .envrc into DIR instead of printing.")
@click.option("--force", is_flag=True, help="With --write: overwrite files even if you edited them.")
@click.option("--no-venv", is_flag=True, help="Do not activate the managed venv in the scripts.")
def env(profile_name: str | None, shell: Shell | None, replay: str | None, write_dir: str | None, force: bool,
        no_venv: bool) -> None:
    """Print the profile's environment: eval "$(envkit env)" (bash/zsh), envkit env --shell fish | source.

    Sourcing the output (or DIR/activate) sets the variables and defines deactivate_envkit, which
    restores every variable to its previous value. With a managed env (.envkit/, from envkit setup)
    its venv is activated too.
    """

    facts = None
    managed = find_managed() if not replay else None
    if replay:
        try:
            facts = gather(replay, runtime=False)
        except FileNotFoundError:
            raise EnvkitError("no such snapshot", where=replay, fix="ls tests/snapshots/")

    profile_name, warning, facts = resolve_profile_name(profile_name, managed, facts)
    if warning:
        click.echo(f"envkit: warning: {warning}", err=True)
    p = load_profile(profile_name, facts=facts)
    for w in p.warnings:
        click.echo(f"envkit: warning: {w}", err=True)
    if write_dir:
        directory = Path(write_dir)
        venv = None if no_venv else default_venv(directory)
        paths = write_env_scripts(directory, p, venv, force)
        for path in paths:
            click.echo(f"wrote {path}", err=True)
        click.echo(f"profile {p.name}: source {directory / 'activate'} (bash/zsh) or {directory / 'activate.fish'} (fish); "
                   "deactivate_envkit undoes it", err=True)
        return
    venv = None if (no_venv or not managed) else managed.venv
    click.echo(render(shell or _default_shell(), p.env, profile_name=p.name, description=p.description, venv=venv), nl=False)


def default_venv(directory: Path) -> Path | None:
    """DIR/venv when it is a venv, else the managed env's venv (if any)."""
    own = Path(directory) / "venv"
    if (own / "bin" / "activate").is_file() or (own / "pyvenv.cfg").is_file():
        return own

    m = find_managed()
    return m.venv if m else None
