"""`envkit init`: write a ready train.yaml from one of the shipped templates."""

from __future__ import annotations

import shutil
from pathlib import Path

import click

from envkit.errors import EnvkitError

DEFAULT_TEMPLATE = "gpt_quick_test"


def _templates_dir() -> Path:
    from envkit.resources import shipped_dir

    return shipped_dir("templates") / "train"


def template_names() -> list[str]:
    d = _templates_dir()
    return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []


@click.command()
@click.argument("path", type=click.Path(dir_okay=False), default="train.yaml", required=False)
@click.option("--template", "template", default=DEFAULT_TEMPLATE, show_default=True, help="Which template (see --list).")
@click.option("--list", "list_", is_flag=True, help="List the templates.")
@click.option("--force", is_flag=True, help="Overwrite PATH if it exists.")
def init(path, template, list_, force):
    """Write a ready train.yaml from a template (default: the gpt quick test, about 2 minutes on a CPU).
    `envkit init cifar10` (a template's name instead of PATH) writes that template to train.yaml."""
    names = template_names()
    if list_:
        for n in names:
            first = (_templates_dir() / f"{n}.yaml").read_text().splitlines()[0].lstrip("# ").strip()
            click.echo(f"{n:<22} {first}")
        return
    if Path(path).suffix == "" and path in names and template == DEFAULT_TEMPLATE:  # `envkit init cifar10`
        template, path = path, "train.yaml"
    name = template[:-5] if template.endswith(".yaml") else template
    if name not in names:
        import difflib

        close = difflib.get_close_matches(name, names, n=1)
        raise EnvkitError(f"unknown template {template!r}" + (f" (did you mean '{close[0]}'?)" if close else ""),
                          where="--template", fix=f"one of: {', '.join(names)}")
    dest = Path(path)
    if dest.exists() and not force:
        raise EnvkitError("exists; not overwriting", where=str(dest), fix="use --force or another path")
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_templates_dir() / f"{name}.yaml", dest)
    click.echo(f"wrote {dest} from template {name}; next: `envkit validate {dest}` and `envkit run {dest}`")
