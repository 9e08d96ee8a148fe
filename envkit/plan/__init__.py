"""What a run will be, before anything starts (no torch here): the config resolved against the
profile and held against the machine, the process count and the nodes, the run folders, and every
refusal, in one place. `make_plan(RunRequest(...)) -> Plan` is the one entry point; `envkit run`
(here or --slurm), each combination of `envkit sweep`, `envkit validate` and `envkit exec` (its
process count and nodes) go through it, and envkit/launch/launcher.py starts what it planned.

    model.py      RunRequest, Plan, PlannedRun, Nodes; the closed sets they hold (Purpose, Resume, RunState)
    options.py    RunOptions: `envkit run`'s options, of which the RunRequest is the plan's part
    resolve.py    the config with its profile, the facts of the machine, the training interpreter
    grid.py       a sweep's combinations
    run_folders.py the run folder: new, resumed (only with its own config) or completed
    refusals.py   the nodes, what --slurm cannot take, the device and precision against the machine,
                  the process count against the config; a sweep's combinations each
    make.py       make_plan: the above, in that order
"""

from envkit.plan.make import make_plan
from envkit.plan.model import Plan, PlannedRun, RunRequest

__all__ = ["Plan", "PlannedRun", "RunRequest", "make_plan"]
