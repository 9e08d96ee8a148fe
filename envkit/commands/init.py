"""`envkit init`: write a ready train.yaml from one of the shipped templates."""

from __future__ import annotations

import shutil
from pathlib import Path

import click

from envkit.errors import EnvkitError
from envkit.resources import shipped_dir

DEFAULT_TEMPLATE = "gpt_quick_test"
DEFAULT_SCRIPT = "train_demo"  # `envkit init NAME.py`: a script for `envkit exec`


def _templates_dir() -> Path:
    return shipped_dir("templates") / "train"


def template_names() -> list[str]:
    d = _templates_dir()
    return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []


def _script_templates() -> dict[str, Path]:
    """Scripts for `envkit exec` (templates/exec/*.py), by name."""
    d = shipped_dir("templates") / "exec"
    return {p.stem: p for p in sorted(d.glob("*.py"))} if d.is_dir() else {}


def _write(source: Path, dest: Path, force: bool) -> None:
    if dest.exists() and not force:
        raise EnvkitError("exists; not overwriting", where=str(dest), fix="use --force or another path")
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, dest)


def _init_script(dest: Path, template: str, force: bool) -> None:
    """`envkit init train_demo.py`: a script of your own that `envkit exec` runs and records."""
    scripts = _script_templates()
    name = dest.stem if template == DEFAULT_TEMPLATE and dest.stem in scripts else template
    if name == DEFAULT_TEMPLATE:
        name = DEFAULT_SCRIPT
    if name not in scripts:
        raise EnvkitError(f"unknown script template {name!r}", where="--template", fix=f"one of: {', '.join(scripts)}")
    _write(scripts[name], dest, force)
    click.echo(f"wrote {dest} from template {name}; next: `envkit exec -- python {dest}`")


@click.command()
@click.argument("path", type=click.Path(dir_okay=False), default="train.yaml", required=False)
@click.option("--template", "template", default=DEFAULT_TEMPLATE, show_default=True, help="Which template (see --list).")
@click.option("--list", "list_", is_flag=True, help="List the templates.")
@click.option("--force", is_flag=True, help="Overwrite PATH if it exists.")
def init(path, template, list_, force):
    """Write a ready train.yaml from a template (default: the gpt quick test, about 80 s on one CPU core).
    `envkit init cifar10` (a template's name instead of PATH) writes that template to train.yaml;
    `envkit init train_demo.py` (a .py PATH) writes a script of your own for `envkit exec`."""
    names = template_names()
    if list_:
        for n in names:
            first = (_templates_dir() / f"{n}.yaml").read_text().splitlines()[0].lstrip("# ").strip()
            click.echo(f"{n:<22} {first}")
        for n, script in _script_templates().items():
            click.echo(f"{n + '.py':<22} a script for `envkit exec`: {ast_docstring_first_line(script)}")
        return
    if Path(path).suffix == ".py":
        _init_script(Path(path), template, force)
        return
    if Path(path).suffix == "" and path in names and template == DEFAULT_TEMPLATE:  # `envkit init cifar10`
        template, path = path, "train.yaml"
    elif Path(path).suffix not in (".yaml", ".yml"):  # `envkit init mlp` would write the gpt template into a file named mlp
        import difflib

        near = [n for n in names if n.startswith(path)] or difflib.get_close_matches(path, names, n=3)
        raise EnvkitError(f"{path!r} is neither a template nor a .yaml or .py path" + (
            f" (did you mean {' or '.join(repr(n) for n in near[:3])}?)" if near else ""), where="PATH",
            fix=f"`envkit init {near[0] if near else 'gpt_quick_test'}` writes that template to train.yaml, "
                "`envkit init my.yaml --template NAME` to my.yaml; `envkit init --list` lists them")
    name = template[:-5] if template.endswith(".yaml") else template
    if name not in names:
        import difflib

        close = difflib.get_close_matches(name, names, n=1)
        raise EnvkitError(f"unknown template {template!r}" + (f" (did you mean '{close[0]}'?)" if close else ""),
                          where="--template", fix=f"one of: {', '.join(names)}")
    dest = Path(path)
    _write(_templates_dir() / f"{name}.yaml", dest, force)
    click.echo(f"wrote {dest} from template {name}; next: `envkit validate {dest}` and `envkit run {dest}`")


def ast_docstring_first_line(path: Path) -> str:
    import ast

    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return doc.splitlines()[0] if doc else ""
