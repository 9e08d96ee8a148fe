"""`envkit lock`: one PEP 751 pylock.toml for the Mac and the CUDA box (install/lock/flow.py)."""

from __future__ import annotations

import click

from envkit.install.lock.flow import LockOptions, run_lock
from envkit.redact import strip_userinfo
from envkit.console import is_tty, print_json


@click.command()
@click.option("--target", "targets", multiple=True, metavar="T",
              help="this (default), macos-arm64, linux-x86_64-cpu, linux-x86_64-cuXXX, linux-x86_64-cuda (newest), "
                   "linux-aarch64-cuXXX, linux-x86_64-rocmX.Y, linux-x86_64-xpu. Repeatable.")
@click.option("--torch", "torch_req", default="stable", show_default=True, metavar="SPEC",
              help="stable, nightly, test, a version (2.13.0) or a specifier: one public version on every target.")
@click.option("--with", "with_", default="", metavar="PKGS", help="Also lock, paired with torch: torchvision,torchaudio.")
@click.option("--no-numpy", is_flag=True, help="Do not lock numpy beside torch.")
@click.option("--python", "python", metavar="X.Y", help="The Python the targets run (default: the one running envkit).")
@click.option("--index-url", "index_url", metavar="URL",
              help="The index of everything but torch's builds (default: pip's configuration). "
                   "torch's per-build pages: ENVKIT_PYTORCH_INDEX (default https://download.pytorch.org/whl).")
@click.option("--output", "-o", default="pylock.toml", show_default=True, metavar="FILE", help="pylock.toml or pylock.NAME.toml.")
@click.option("--from", "from_lock", metavar="MACHINE_LOCK", help="Convert a pylock.machine.toml (or envkit.lock): one platform, no resolving.")
@click.option("--extra", "extras", multiple=True, metavar="NAME", help="Lock this extra of the project too (repeatable).")
@click.option("--group", "groups", multiple=True, metavar="NAME", help="Lock this PEP 735 dependency group too (repeatable).")
@click.option("-r", "--requirements", "requirements", multiple=True, metavar="FILE", help="Lock a requirements file too (repeatable).")
@click.option("--no-project", is_flag=True, help="Lock torch alone, not the project's [project] dependencies.")
@click.option("--json", "as_json", is_flag=True, help="Print what was locked as JSON.")
def lock(targets, torch_req, with_, no_numpy, python, index_url, output, from_lock, extras, groups, requirements, no_project,
         as_json) -> None:
    """Write one pylock.toml (PEP 751) with the same torch for every target machine, and the project.

    The project is the pyproject.toml in the lock's folder: its [project] dependencies, and the
    extras, dependency groups and requirements files named here or in [tool.envkit.lock]
    (extras, groups, requirements), resolved with torch for every target."""

    def say(text: str, err: bool = False) -> None:
        click.echo(strip_userinfo(text), err=err)

    res = run_lock(LockOptions(targets=list(targets), torch=torch_req, with_=with_, numpy=not no_numpy, python=python,
                               index_url=index_url, output=output, from_lock=from_lock, extras=extras, groups=groups,
                               requirements=requirements, no_project=no_project), say)
    if as_json:
        print_json({"path": str(res.path), "written": res.written, "targets": res.targets})
        return
    _render(res, say)


def _render(res, say) -> None:
    rows = [(name, info.get("group") or "-", info["torch"],
             ", ".join(f"{n} {v}" for n, v in info["packages"].items() if n != "torch"))
            for name, info in res.targets.items()]
    if is_tty():
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"{res.path}" + ("" if res.written else " (unchanged)"))
        for col in ("target", "group", "torch", "with"):
            table.add_column(col)
        for row in rows:
            table.add_row(*row)
        Console().print(table)
    else:
        for name, group, torch, rest in rows:
            say(f"{name}  group {group}  torch {torch}  {rest}")
        say(f"{'wrote' if res.written else 'unchanged:'} {res.path}")
