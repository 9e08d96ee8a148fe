"""`envkit bench`: the optimization ladder, measured on this machine (see session.py)."""

from envkit.bench.context import BenchContext, load_context
from envkit.bench.session import BenchReport, run_bench, save_report

__all__ = ["BenchContext", "BenchReport", "load_context", "run_bench", "save_report"]
