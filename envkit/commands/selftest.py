"""`envkit selftest`."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from envkit.selftest import render_report, run_selftest, PROBES
from envkit.console import is_tty, console, print_json

if TYPE_CHECKING:
    from envkit.config.schema import DeviceType


@click.command()
@click.option("--device", type=click.Choice(["auto", "mps", "cuda", "cpu"]), default="auto", show_default=True,
              help="The device to test; auto: the profile's, else the best this machine has.")
@click.option("--profile", "profile", metavar="NAME", help="Use this profile's environment and settings "
              "(default: the managed env's profile, else the one recommended for this machine).")
@click.option("--quick", is_flag=True, help="Smaller sizes, no torch.compile: a few seconds.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--python", "python", metavar="PATH", help="Test this interpreter (default: the managed env's, else envkit's own).")
@click.option("--isolate/--shared", "isolate", default=None,
              help="A fresh interpreter for every probe, or one shared worker (the default) restarted after any "
                   "failure, a probe that failed after others running again alone before it is reported.")
def selftest(device: DeviceType, profile: str | None, quick: bool, as_json: bool, python: str | None, isolate: bool | None) -> None:
    """Prove the device works: numbers vs a float64 CPU reference (matmul, softmax, layernorm,
    conv2d, SDPA, incl. non-contiguous inputs), backward + AdamW, autocast, torch.compile, the
    profile's DataLoader, memory, throughput and bandwidth. Each probe runs in its own child
    process under a timeout (with --quick: a shared worker, replaced after any failure), so a
    crash or a hang fails that probe only and the others still run.

    Exit 0 when no probe fails, 1 when one fails, 2 for bad input.
    """
    if not as_json and is_tty(sys.stderr):

        done: list[str] = []
        with console(stderr=True).status("selftest: starting the interpreter (importing torch)...") as status:
            def progress(res):
                done.append(f"{res.name} {res.status}")
                status.update(f"selftest: {len(done)}/{len(PROBES)} probes ({', '.join(done[-3:])})")

            report = run_selftest(python=python, device=device, profile=profile, quick=quick, on_probe=progress,
                                  isolate=isolate)
    else:
        report = run_selftest(python=python, device=device, profile=profile, quick=quick, isolate=isolate)
    if as_json:
        print_json(report.to_dict())
    else:
        render_report(report)
    sys.exit(report.exit_code)
