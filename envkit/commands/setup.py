"""`envkit setup`: parse the options, run install.setup.flow.run_setup (install), then the self-test
and, with --tune, the tuner; render what each reports."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from envkit.commands.setup_terminal import CommandLineUI
from envkit.errors import EnvkitError
from envkit.install import bytecode
from envkit.install.setup.flow import SetupOptions, run_setup
from envkit.launch.torchrun import child_entry
from envkit.bench.context import load_context
from envkit.checks.recommend import TUNED_SUFFIX
from envkit.install.setup.managed import write_state, where_line
from envkit.tune.session import parse_budget, run_tune
from envkit.selftest import run_selftest


@click.command()
@click.option("--profile", "profile_name", default="auto", show_default=True, help="A profile name, or auto (recommended for this machine).")
@click.option("--torch", "torch_req", default="stable", show_default=True, metavar="WHAT",
              help="stable, nightly, test (release candidate), a version (2.5.1) or a specifier ('>=2.5,<2.7').")
@click.option("--with", "with_", default="", metavar="PKGS", help="Also install, paired with torch: torchvision,torchaudio.")
@click.option("--no-numpy", is_flag=True, help="Do not install numpy beside torch (installed by default: see docs/setup.md).")
@click.option("--venv", "venv_opt", metavar="PATH", help="The venv to create or reuse (default .envkit/venv; 'active' = $VIRTUAL_ENV).")
@click.option("--python", "python_opt", metavar="PATH", help="The Python that creates the venv (default: the one running envkit).")
@click.option("--installer", type=click.Choice(["auto", "pip", "uv"]), default="auto", show_default=True,
              help="auto: uv when it is on PATH or beside envkit's Python, pip otherwise.")
@click.option("--index-url", "index_url", metavar="URL",
              help="Read and install torch from this index (a mirror), or a folder of wheels. Also ENVKIT_INDEX_URL.")
@click.option("--dry-run", is_flag=True, help="Show the plan and stop.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--lock", "lock_opt", metavar="FILE", help="Rebuild from this lock if it exists, else write it here (default pylock.machine.toml).")
@click.option("--sync", is_flag=True, help="With --lock: also remove what the lock does not name (your project's own packages stay).")
@click.option("--no-selftest", is_flag=True, help="Skip the self-test at the end.")
@click.option("--tune", "tune", default=None, metavar="BUDGET", is_flag=False, flag_value="5m",
              help="After the install, run `envkit tune` for BUDGET (default 5m) and use the tuned profile.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.option("--replay", metavar="SNAPSHOT", type=click.Path(dir_okay=False), help="Plan for a recorded machine (implies --dry-run).")
def setup(profile_name, torch_req, with_, no_numpy, venv_opt, python_opt, installer, index_url, dry_run, yes, lock_opt,
          sync, no_selftest, tune, as_json, replay) -> None:
    """Install or upgrade PyTorch into a reproducible, containerless environment."""
    if tune:
        try:
            parse_budget(tune)  # a bad budget is refused before anything changes
        except EnvkitError as exc:
            raise EnvkitError(exc.message, where="--tune", fix=exc.fix)
    opts = SetupOptions(profile=profile_name, torch=torch_req, with_=with_, numpy=not no_numpy, venv=venv_opt,
                        python=python_opt, installer=installer, index_url=index_url, dry_run=dry_run, yes=yes,
                        lock=lock_opt, selftest=not no_selftest, as_json=as_json, replay=replay,
                        tune=tune, sync=sync)
    ui = CommandLineUI(as_json)
    installed = run_setup(opts, ui)
    if installed is None:
        return
    rc = _after_install(installed.venv_python, installed.profile, opts.selftest, ui, opts.tune, installed.root)
    if rc:
        sys.exit(rc)


def _after_install(venv_python: str, profile, selftest: bool, ui, tune: str | None = None, root: Path | None = None) -> int:
    """The stages after install, composed here: where the environment is, the self-test, then (with
    --tune) the tuner."""
    if root is not None:
        ui.say(where_line(root))
    fixed = bytecode.ensure(venv_python, also=(child_entry().parent / "envkit",))  # where Python writes none
    if fixed is not None:
        ui.say(fixed.line(), err=not fixed.ok)
    rc = _selftest(venv_python, profile, selftest, ui)
    if rc:
        return rc
    if tune:
        _tune(venv_python, profile, tune, ui, root)
    if Path("train.yaml").is_file():
        ui.say("next: source .envkit/activate, then envkit run train.yaml")
    else:
        ui.say("next: source .envkit/activate, then envkit init train.yaml && envkit run train.yaml")
    return 0


def _tune(venv_python: str, profile, budget: str, ui, root: Path | None) -> None:
    """`envkit setup --tune`: measure in the new environment and make the tuned profile the managed one."""

    start = profile.name.removesuffix(TUNED_SUFFIX)  # tune from the shipped profile, never on top of itself
    ui.say(f"tuning from profile {start} for {budget} (envkit tune)")
    ctx = load_context(None, None, start, venv_python)
    out = run_tune(ctx, parse_budget(budget), on_run=lambda row: ui.say(
        f"  {row['run']:<24} {row['status']:<5} " + (f"{row['per_second']:,.0f} {row['unit']}/s" if row["per_second"] else row["reason"])))
    for d in out.result.decisions:
        ui.say(f"  {'*' if d.changed else '='} {d.section}.{d.key} = {d.value}: {d.reason}")
    if out.profile and out.path:
        if root is not None and (root / "state.json").is_file():
            write_state(root, profile=out.profile)
        ui.say(f"wrote profile {out.profile}: {out.path}")
    else:
        ui.say("envkit tune decided nothing within the budget: the profile stays " + profile.name, err=True)


def _selftest(venv_python: str, profile, selftest: bool, ui) -> int:
    if selftest:
        report = run_selftest(python=venv_python, device="auto", profile=profile.name, quick=True)
        ui.selftest_report(report)
        if not report.ok:
            ui.say("the self-test failed: torch is installed and verified, but the device misbehaves (see above)", err=True)
            return 1
    return 0
