"""Facts + gates -> checks: the doctor's list of checks, in the order it prints them. Each check is
small, independent and knows its fix (flutter doctor); they live by concern in system.py (OS,
Python, torch), gpus.py (MPS, CUDA, ROCm/XPU), speedups.py (bf16, compile) and environment.py
(variables, OpenMP, torch's bytecode). A check's verdict, `Check`, is in verdict.py.
"""

from __future__ import annotations

from envkit.checks.environment import check_bytecode, check_env_vars, check_openmp
from envkit.checks.gpus import check_amd_intel, check_cuda, check_mps
from envkit.checks.speedups import check_bf16, check_compile
from envkit.checks.system import check_os, check_pairing, check_python_arch, check_python_version, check_torch
from envkit.checks.verdict import FAIL, Check
from envkit.facts.model import Facts

ALL_CHECKS = (check_os, check_python_version, check_python_arch, check_torch, check_pairing, check_mps, check_cuda,
              check_amd_intel, check_bf16, check_compile, check_env_vars, check_openmp, check_bytecode)


def run_checks(facts: Facts) -> list[Check]:
    return [fn(facts) for fn in ALL_CHECKS]


def exit_code(checks: list[Check]) -> int:
    return 1 if any(c.status == FAIL for c in checks) else 0
