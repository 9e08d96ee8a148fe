"""Checks: the judging stage. Facts in, verdicts out; rules live in envkit/data/gates.toml.

    gates.py         reads the version gates (MPS floors, drivers, pairings) from the data file
    machine.py       the doctor checks, each `Check(id, status, message, fix)` (flutter doctor's validators)
    recommend.py     the profile this machine gets
    requirements.py  `envkit check --require` / `[tool.envkit]` requirements, judged without torch
    report.py        doctor's diagnosis: the checks grouped, summarised and rendered
"""

from envkit.checks.machine import ALL_CHECKS, Check, best_device, exit_code, run_checks, trainer_device

__all__ = ["ALL_CHECKS", "Check", "best_device", "exit_code", "run_checks", "trainer_device"]
