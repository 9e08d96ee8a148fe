"""Checks: the judging stage. Facts in, verdicts out; rules live in envkit/data/gates.toml.

    gates.py         reads the version gates (MPS floors, drivers, pairings) from the data file
    verdict.py       a check's verdict, `Check(id, status, message, fix)` (flutter doctor's validators)
    device.py        which device trains here (best_device), and how a verdict names its GPUs
    machine.py       the doctor's list of checks (ALL_CHECKS), by concern in system.py (OS, Python,
                     torch), gpus.py (MPS, CUDA, ROCm/XPU), speedups.py (bf16, compile) and
                     environment.py (variables, OpenMP)
    recommend.py     the profile this machine gets
    requirements.py  `envkit check --require` / `[tool.envkit]` requirements, judged without torch
    report.py        doctor's diagnosis: the checks grouped, summarised and rendered
"""

from envkit.checks.device import best_device, trainer_device
from envkit.checks.machine import ALL_CHECKS, exit_code, run_checks
from envkit.checks.verdict import Check

__all__ = ["ALL_CHECKS", "Check", "best_device", "exit_code", "run_checks", "trainer_device"]
