"""The two commands envkit's sbatch script runs inside a job (not listed by `envkit --help`)."""

from __future__ import annotations

import sys

import click

from envkit.slurm import batch, node
from envkit.slurm.preflight import probe_main


@click.command("slurm-batch", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("record", type=click.Path(dir_okay=False))
@click.argument("srun", nargs=-1, type=click.UNPROCESSED)
def slurm_batch(record, srun):
    """The job's batch step: srun, signals passed on, requeue (envkit/slurm/batch.py)."""
    argv = list(srun)
    if argv and argv[0] == "--":
        argv = argv[1:]
    sys.exit(batch.main(record, argv))


@click.command("slurm-node")
@click.argument("record", type=click.Path(dir_okay=False))
def slurm_node(record):
    """One node's task: rendezvous address, pre-flight, then `envkit run`/`exec` (envkit/slurm/node.py)."""
    sys.exit(node.main(record))


@click.command("slurm-probe")
def slurm_probe():
    """`envkit doctor --slurm`'s task on each node (envkit/slurm/preflight.py)."""
    sys.exit(probe_main())
