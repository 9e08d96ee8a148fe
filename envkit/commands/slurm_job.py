"""The two commands envkit's sbatch script runs inside a job (not listed by `envkit --help`)."""

from __future__ import annotations

import sys

import click


@click.command("slurm-batch", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("record", type=click.Path(dir_okay=False))
@click.argument("srun", nargs=-1, type=click.UNPROCESSED)
def slurm_batch(record, srun):
    """The job's batch step: srun, signals passed on, requeue (envkit/slurm/batch.py)."""
    from envkit.slurm.batch import main

    argv = list(srun)
    if argv and argv[0] == "--":
        argv = argv[1:]
    sys.exit(main(record, argv))


@click.command("slurm-node")
@click.argument("record", type=click.Path(dir_okay=False))
def slurm_node(record):
    """One node's task: rendezvous address, pre-flight, then `envkit run`/`exec` (envkit/slurm/node.py)."""
    from envkit.slurm.node import main

    sys.exit(main(record))


@click.command("slurm-probe")
def slurm_probe():
    """`envkit doctor --slurm`'s task on each node (envkit/slurm/preflight.py)."""
    from envkit.slurm.preflight import probe_main

    sys.exit(probe_main())
